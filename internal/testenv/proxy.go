package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a loopback TCP proxy a test controls, put between one client
// and a real server (Redis, Consul) so that this client alone can be cut
// off, in the ways a network fails:
//
//   - CutOff drops every connection (the peers see a reset) and holds new
//     ones open without forwarding a byte (dials succeed, requests time
//     out), as a partition that loses packets would; Restore closes those
//     held and forwards again.
//   - Freeze keeps every connection open and accepts new ones, but
//     forwards nothing either way: the client gets neither answers nor
//     errors, like one whose server hangs. Restore forwards again.
//   - Close closes the listener and every connection: dials are refused.
//
// The test's end closes it.
type Proxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	// sent, if set, sees every chunk the clients send (before a freeze
	// drops it).
	sent func([]byte)

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[net.Conn]struct{} // client and upstream sides alike
	held   []net.Conn
}

// NewProxy starts a proxy to target, the server's address.
func NewProxy(t testing.TB, target string) *Proxy { return NewWatchedProxy(t, target, nil) }

// NewWatchedProxy is NewProxy with sent called on every chunk of bytes a
// client sends (from the proxy's goroutines: sent must be safe for
// concurrent use), to count the requests that pass.
func NewWatchedProxy(t testing.TB, target string, sent func([]byte)) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, sent: sent, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address the client is to dial instead of the server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		up.Close()
		c.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, c, p.sent); done <- struct{}{} }()
	go func() { p.pipe(c, up, nil); done <- struct{}{} }()
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// pipe copies src to dst until either fails, dropping what it reads while
// the proxy is frozen, then closes both.
func (p *Proxy) pipe(dst, src net.Conn, seen func([]byte)) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && seen != nil {
			seen(buf[:n])
		}
		if n > 0 && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// CutOff drops every connection and holds new ones until Restore.
func (p *Proxy) CutOff() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.dropAll()
}

// Freeze stops forwarding, keeping every connection open, until Restore.
func (p *Proxy) Freeze() { p.frozen.Store(true) }

// Restore forwards again, after CutOff or Freeze; the connections held
// meanwhile are closed, so their clients dial again.
func (p *Proxy) Restore() {
	p.frozen.Store(false)
	p.mu.Lock()
	p.cut = false
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, c := range held {
		c.Close()
	}
}

// Close closes the listener and every connection: dials are refused from
// then on.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.dropAll()
}

func (p *Proxy) dropAll() {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns)+len(p.held))
	for c := range p.conns {
		conns = append(conns, c)
	}
	conns = append(conns, p.held...)
	p.held = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
