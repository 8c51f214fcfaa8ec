package testenv

import (
	"context"
	"errors"
	"net/http"
	"testing"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/sluicehq/sluice/internal/stack"
)

// ConsulServer is a Consul agent in dev mode for tests: a single server that
// is its own leader and keeps everything in memory.
type ConsulServer struct {
	server
	client *consulapi.Client
}

// Consul starts a Consul dev agent for the test, its HTTP API on a free port.
// t.Cleanup stops it and removes its files. A missing consul binary fails the
// test with how to build it.
func Consul(t testing.TB) *ConsulServer {
	t.Helper()
	s, err := startConsul(t)
	return forTest(t, "consul", s, err)
}

// StartConsul is Consul for TestMain: the caller must call Close.
func StartConsul() (*ConsulServer, error) {
	return startConsul(nil)
}

func startConsul(tb testing.TB) (*ConsulServer, error) {
	be, err := startBackend(startConsulProcess, startConsulDocker)
	if err != nil {
		return nil, err
	}
	client, transport, err := newConsulClient(be.addr())
	if err != nil {
		ctx, cancel := stopCtx()
		defer cancel()
		return nil, errors.Join(err, be.close(ctx))
	}
	return &ConsulServer{
		server: server{name: "consul", f: failer{tb}, be: be, down: transport.CloseIdleConnections},
		client: client,
	}, nil
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

func startConsulProcess(ctx context.Context) (backend, error) {
	return startProcess("consul", func(addr, dir string) (process, error) {
		return stack.StartConsul(ctx, stack.ConsulConfig{HTTPAddr: addr, Dir: dir})
	})
}

// Client returns an API client for the agent. It keeps working across Stop
// and Restart, since the address does not change.
func (s *ConsulServer) Client() *consulapi.Client { return s.client }
