package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
)

// backend is what runs a Redis server or a Consul agent: a child process or a
// container.
type backend interface {
	addr() string
	dir() string
	stop(context.Context) error
	kill() error
	restart(context.Context) error
	close(context.Context) error
}

// server is what RedisServer and ConsulServer share: the control methods
// over the backend, which fail the test (or panic, see failer) on error.
type server struct {
	name string // "redis" or "consul", for messages
	f    failer
	be   backend
	// down, if set, runs before the server goes down: Consul drops its
	// client's idle connections, which would die with the agent.
	down func()
	// closeClient, if set, closes the server's client in Close.
	closeClient func() error

	closeOnce sync.Once
	closeErr  error
}

func (s *server) goingDown() {
	if s.down != nil {
		s.down()
	}
}

// Addr returns the server's "host:port" address; for Consul that of the HTTP
// API.
func (s *server) Addr() string { return s.be.addr() }

// Dir returns the server's data directory (Consul: the agent's working
// directory), or "" in docker mode.
func (s *server) Dir() string { return s.be.dir() }

// Stop shuts the server down gracefully (SIGTERM) and waits for it.
func (s *server) Stop() {
	s.goingDown()
	s.f.do(stopTimeout, "stopping "+s.name, s.be.stop)
}

// Kill kills the server (SIGKILL), as a crash would, and waits for it.
func (s *server) Kill() {
	s.goingDown()
	s.f.do(stopTimeout, "killing "+s.name, func(context.Context) error { return s.be.kill() })
}

// Restart stops the server if it runs and starts it again on the same
// address, waiting until it is ready:
//
//   - Redis keeps its data directory and is ready when it answers PING; its
//     data survives only with WithAOF.
//   - Consul is ready when it has a leader and takes KV writes. Dev mode
//     keeps nothing on disk: KV, sessions and the catalog are empty
//     afterwards, as if the whole Consul cluster had been lost.
func (s *server) Restart() {
	s.goingDown()
	s.f.do(startTimeout, "restarting "+s.name, s.be.restart)
}

// Close closes the client, stops the server and removes its files. Redis and
// Consul call it in t.Cleanup; it is safe to call more than once.
func (s *server) Close() error {
	s.closeOnce.Do(func() {
		var cerr error
		if s.closeClient != nil {
			cerr = s.closeClient()
		}
		s.goingDown()
		ctx, cancel := stopCtx()
		defer cancel()
		if err := s.be.close(ctx); err != nil {
			s.closeErr = errors.Join(cerr, fmt.Errorf("%s at %s: %w", s.name, s.be.addr(), err))
		} else {
			s.closeErr = cerr
		}
	})
	return s.closeErr
}

// process is what processBackend controls: a *stack.Redis or *stack.Consul.
type process interface {
	Stop(context.Context) error
	Kill() error
	Restart(context.Context) error
}

// processBackend runs a server as a child process, with its files in a
// temporary directory that close removes.
type processBackend struct {
	p       process
	address string
	tempDir string
}

// startProcess runs start with a free loopback address and a fresh temporary
// directory named for name, trying other ports while the chosen one turns out
// to be taken.
func startProcess(name string, start func(addr, dir string) (process, error)) (backend, error) {
	dir, err := os.MkdirTemp("", "sluice-testenv-"+name+"-")
	if err != nil {
		return nil, err
	}
	var (
		p    process
		addr string
	)
	err = withFreePort(func(port int) error {
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p, err = start(addr, dir)
		return err
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &processBackend{p: p, address: addr, tempDir: dir}, nil
}

func (b *processBackend) addr() string                      { return b.address }
func (b *processBackend) dir() string                       { return b.tempDir }
func (b *processBackend) stop(ctx context.Context) error    { return b.p.Stop(ctx) }
func (b *processBackend) kill() error                       { return b.p.Kill() }
func (b *processBackend) restart(ctx context.Context) error { return b.p.Restart(ctx) }
func (b *processBackend) close(ctx context.Context) error {
	return errors.Join(b.p.Stop(ctx), removeDir(b.tempDir))
}
