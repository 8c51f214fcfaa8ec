package chaos

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy is a loopback TCP proxy the suite controls: one process's Consul
// or Redis address points at it, so that process alone can be cut off.
// While cut, it drops the connections it carries (their peers see a
// reset) and holds new ones open without forwarding a byte (their dials
// succeed and their requests time out), as a partition that loses
// packets would; restore closes those held and forwards again.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{} // client and upstream sides alike
	held  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.closeAll() })
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
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

func (p *proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		up.Close()
		c.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) { io.Copy(dst, src); dst.Close(); src.Close(); done <- struct{}{} }
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// cutOff drops every connection and holds new ones until restore.
func (p *proxy) cutOff() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.closeAll()
}

// restore forwards again; the connections held meanwhile are closed, so
// their clients dial again.
func (p *proxy) restore() {
	p.mu.Lock()
	p.cut = false
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, c := range held {
		c.Close()
	}
}

func (p *proxy) closeAll() {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
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
