package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/sluicehq/sluice/internal/stack"
)

// consulBackend is what runs the agent: a child process or a container.
type consulBackend interface {
	addr() string
	dir() string
	stop(context.Context) error
	kill() error
	restart(context.Context) error
	close(context.Context) error
}

// ConsulServer is a Consul agent in dev mode for tests: a single server that
// is its own leader and keeps everything in memory.
type ConsulServer struct {
	f         failer
	be        consulBackend
	client    *consulapi.Client
	transport *http.Transport

	closeOnce sync.Once
	closeErr  error
}

// Consul starts a Consul dev agent for the test, its HTTP API on a free port.
// t.Cleanup stops it and removes its files. A missing consul binary fails the
// test with how to build it.
func Consul(t testing.TB) *ConsulServer {
	t.Helper()
	s, err := startConsul(t)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("testenv: closing consul: %v", err)
		}
	})
	return s
}

// StartConsul is Consul for TestMain: the caller must call Close.
func StartConsul() (*ConsulServer, error) {
	return startConsul(nil)
}

func startConsul(tb testing.TB) (*ConsulServer, error) {
	m, err := mode()
	if err != nil {
		return nil, err
	}
	ctx, cancel := startCtx()
	defer cancel()
	var be consulBackend
	if m == modeDocker {
		be, err = startConsulDocker(ctx)
	} else {
		be, err = startConsulProcess(ctx)
	}
	if err != nil {
		return nil, err
	}
	s := &ConsulServer{f: failer{tb}, be: be}
	s.client, s.transport, err = newConsulClient(be.addr())
	if err != nil {
		ctx, cancel := stopCtx()
		defer cancel()
		return nil, errors.Join(err, be.close(ctx))
	}
	return s, nil
}

// newConsulClient builds a client for addr only: consulapi.DefaultConfig
// would pick up CONSUL_HTTP_ADDR, tokens and TLS settings from the
// environment, which must not leak into tests.
func newConsulClient(addr string) (*consulapi.Client, *http.Transport, error) {
	tr := cleanhttp.DefaultPooledTransport()
	c, err := consulapi.NewClient(&consulapi.Config{
		Address:    addr,
		Scheme:     "http",
		Transport:  tr,
		HttpClient: &http.Client{Transport: tr},
	})
	return c, tr, err
}

type consulProcess struct {
	c       *stack.Consul
	tempDir string
}

func startConsulProcess(ctx context.Context) (*consulProcess, error) {
	dir, err := os.MkdirTemp("", "sluice-testenv-consul-")
	if err != nil {
		return nil, err
	}
	var c *stack.Consul
	err = withFreePort(func(port int) error {
		c, err = stack.StartConsul(ctx, stack.ConsulConfig{
			HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Dir:      dir,
		})
		return err
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &consulProcess{c: c, tempDir: dir}, nil
}

func (p *consulProcess) addr() string                      { return p.c.HTTPAddr() }
func (p *consulProcess) dir() string                       { return p.tempDir }
func (p *consulProcess) stop(ctx context.Context) error    { return p.c.Stop(ctx) }
func (p *consulProcess) kill() error                       { return p.c.Kill() }
func (p *consulProcess) restart(ctx context.Context) error { return p.c.Restart(ctx) }
func (p *consulProcess) close(ctx context.Context) error {
	return errors.Join(p.c.Stop(ctx), removeDir(p.tempDir))
}

// Addr returns the "host:port" address of the HTTP API.
func (s *ConsulServer) Addr() string { return s.be.addr() }

// Dir returns the agent's working directory, or "" in docker mode.
func (s *ConsulServer) Dir() string { return s.be.dir() }

// Client returns an API client for the agent. It keeps working across Stop
// and Restart, since the address does not change.
func (s *ConsulServer) Client() *consulapi.Client { return s.client }

// Stop shuts the agent down (SIGTERM) and waits for it.
func (s *ConsulServer) Stop() {
	ctx, cancel := stopCtx()
	defer cancel()
	s.transport.CloseIdleConnections() // they die with the agent
	if err := s.be.stop(ctx); err != nil {
		s.f.fatalf("testenv: stopping consul: %v", err)
	}
}

// Kill kills the agent (SIGKILL) and waits for it.
func (s *ConsulServer) Kill() {
	s.transport.CloseIdleConnections()
	if err := s.be.kill(); err != nil {
		s.f.fatalf("testenv: killing consul: %v", err)
	}
}

// Restart stops the agent if it runs and starts a new one on the same HTTP
// address, waiting until it has a leader and takes KV writes. Dev mode keeps
// nothing on disk: KV, sessions and the catalog are empty afterwards, as if
// the whole Consul cluster had been lost.
func (s *ConsulServer) Restart() {
	ctx, cancel := startCtx()
	defer cancel()
	s.transport.CloseIdleConnections()
	if err := s.be.restart(ctx); err != nil {
		s.f.fatalf("testenv: restarting consul: %v", err)
	}
}

// Close stops the agent and removes its files. Consul calls it in t.Cleanup;
// it is safe to call more than once.
func (s *ConsulServer) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := stopCtx()
		defer cancel()
		s.transport.CloseIdleConnections()
		if err := s.be.close(ctx); err != nil {
			s.closeErr = fmt.Errorf("consul at %s: %w", s.be.addr(), err)
		}
	})
	return s.closeErr
}
