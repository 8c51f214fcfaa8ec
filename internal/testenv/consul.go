package testenv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"testing"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// ConsulOption configures Consul and StartConsul.
type ConsulOption func(*consulOpts)

type consulOpts struct {
	acl bool
	tls *Certs
}

// WithConsulACL turns ACLs on with default_policy "deny" and a random
// initial management token (ManagementToken), which the server's Client
// sends: a part's client needs a token of its own (ACLToken). Process
// mode only.
func WithConsulACL() ConsulOption { return func(o *consulOpts) { o.acl = true } }

// WithConsulTLS serves the HTTP API over HTTPS only, on Addr, with certs'
// server certificate (for 127.0.0.1, ::1 and localhost, signed by
// certs.CAFile); clients need no certificate. The server's Client trusts
// certs.CAFile. Process mode only.
func WithConsulTLS(certs *Certs) ConsulOption { return func(o *consulOpts) { o.tls = certs } }

// ConsulServer is a Consul agent in dev mode for tests: a single server that
// is its own leader and keeps everything in memory.
type ConsulServer struct {
	server
	client *consulapi.Client
	token  string
	tls    bool
}

// Consul starts a Consul dev agent for the test, its HTTP API on a free port.
// t.Cleanup stops it and removes its files. A missing consul binary fails the
// test with how to build it.
func Consul(t testing.TB, opts ...ConsulOption) *ConsulServer {
	t.Helper()
	s, err := startConsul(t, opts)
	return forTest(t, "consul", s, err)
}

// StartConsul is Consul for TestMain: the caller must call Close.
func StartConsul(opts ...ConsulOption) (*ConsulServer, error) {
	return startConsul(nil, opts)
}

func startConsul(tb testing.TB, opts []ConsulOption) (*ConsulServer, error) {
	var o consulOpts
	for _, opt := range opts {
		opt(&o)
	}
	var token string
	if o.acl {
		token = newUUID()
	}
	be, err := startBackend(
		func(ctx context.Context) (backend, error) { return startConsulProcess(ctx, o, token) },
		func(ctx context.Context) (backend, error) {
			if o.acl || o.tls != nil {
				return nil, errors.New("testenv: Consul with ACLs or TLS runs in process mode only: unset " + EnvMode)
			}
			return startConsulDocker(ctx)
		},
	)
	if err != nil {
		return nil, err
	}
	client, transport, err := newConsulClient(be.addr(), token, o.tls)
	if err != nil {
		ctx, cancel := stopCtx()
		defer cancel()
		return nil, errors.Join(err, be.close(ctx))
	}
	return &ConsulServer{
		server: server{name: "consul", f: failer{tb}, be: be, down: transport.CloseIdleConnections},
		client: client, token: token, tls: o.tls != nil,
	}, nil
}

// newConsulClient builds a client for addr only: consulapi.DefaultConfig
// would pick up CONSUL_HTTP_ADDR, tokens and TLS settings from the
// environment, which must not leak into tests.
func newConsulClient(addr, token string, certs *Certs) (*consulapi.Client, *http.Transport, error) {
	tr := cleanhttp.DefaultPooledTransport()
	scheme := "http"
	if certs != nil {
		tc, err := (tlsfiles.Client{CAFile: certs.CAFile}).Config()
		if err != nil {
			return nil, nil, err
		}
		tr.TLSClientConfig, scheme = tc, "https"
	}
	c, err := consulapi.NewClient(&consulapi.Config{
		Address:    addr,
		Scheme:     scheme,
		Token:      token,
		Transport:  tr,
		HttpClient: &http.Client{Transport: tr},
	})
	return c, tr, err
}

func startConsulProcess(ctx context.Context, o consulOpts, token string) (backend, error) {
	return startProcess("consul", func(addr, dir string) (process, error) {
		cfg := stack.ConsulConfig{HTTPAddr: addr, Dir: dir, ManagementToken: token}
		if o.tls != nil {
			cfg.TLS = &stack.ConsulTLS{CAFile: o.tls.CAFile, CertFile: o.tls.ServerCertFile, KeyFile: o.tls.ServerKey}
		}
		return stack.StartConsul(ctx, cfg)
	})
}

// Client returns an API client for the agent, with the management token
// under WithConsulACL. It keeps working across Stop and Restart, since the
// address does not change.
func (s *ConsulServer) Client() *consulapi.Client { return s.client }

// ManagementToken is the initial management token under WithConsulACL,
// else "".
func (s *ConsulServer) ManagementToken() string { return s.token }

// ACLToken creates a policy of rules (HCL) named name and a token that
// has it alone, and returns the token's secret. It fails the test (or
// panics, for StartConsul) on error; it needs WithConsulACL.
func (s *ConsulServer) ACLToken(name, rules string) string {
	if s.token == "" {
		s.f.fatalf("testenv: ACLToken needs a Consul started WithConsulACL")
	}
	var secret string
	s.f.do(startTimeout, "creating ACL token "+name, func(ctx context.Context) error {
		wo := (&consulapi.WriteOptions{}).WithContext(ctx)
		pol, _, err := s.client.ACL().PolicyCreate(&consulapi.ACLPolicy{Name: name, Rules: rules}, wo)
		if err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		tok, _, err := s.client.ACL().TokenCreate(&consulapi.ACLToken{
			Description: "sluice test: " + name,
			Policies:    []*consulapi.ACLTokenPolicyLink{{ID: pol.ID}},
		}, wo)
		if err != nil {
			return fmt.Errorf("token: %w", err)
		}
		secret = tok.SecretID
		return nil
	})
	return secret
}

// DeleteACLToken deletes the token whose secret is secret: a request
// with it then gets 403 "ACL not found".
func (s *ConsulServer) DeleteACLToken(secret string) {
	s.f.do(startTimeout, "deleting an ACL token", func(ctx context.Context) error {
		tok, _, err := s.client.ACL().TokenReadSelf((&consulapi.QueryOptions{Token: secret}).WithContext(ctx))
		if err != nil {
			return err
		}
		_, err = s.client.ACL().TokenDelete(tok.AccessorID, (&consulapi.WriteOptions{}).WithContext(ctx))
		return err
	})
}

// newUUID is a random UUID (version 4), the form Consul wants a token in.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
