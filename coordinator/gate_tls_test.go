package coordinator_test

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// newHTTPSPeriodicGate is newPeriodicGate serving HTTPS with server; its
// srv.URL is https://.
func newHTTPSPeriodicGate(t *testing.T, server tlsfiles.Server) *periodicGate {
	t.Helper()
	tc, err := server.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &periodicGate{}
	// The part's own TLS config (GetCertificate), not httptest's
	// certificate: a listener of its own.
	g.srv = &httptest.Server{Listener: tls.NewListener(ln, tc), Config: &http.Server{Handler: http.HandlerFunc(g.serve)}}
	g.srv.Start()
	g.srv.URL = strings.Replace(g.srv.URL, "http://", "https://", 1)
	t.Cleanup(g.srv.Close)
	return g
}

// The periodic scheduler posts to a gate serving mutual TLS with
// Config.Periodic.GateTLS (--periodic-gate-tls-*); a scheduler that trusts
// another CA logs the fix naming --periodic-gate-tls-ca-file.
func TestPeriodicPostsToAnHTTPSGate(t *testing.T) {
	certs := testenv.NewCerts(t)
	tokenFile := t.TempDir() + "/token"
	if err := os.WriteFile(tokenFile, []byte("periodic-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		gateTLS tlsfiles.Client
		posts   bool
	}{
		{"trusting the gate's CA", certs.Client(), true},
		{"trusting another CA", tlsfiles.Client{CAFile: certs.OtherCAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKey}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBed(t, 2)
			gate := newHTTPSPeriodicGate(t, certs.Server(true))
			r := b.start(t, "c1", func(cfg *coordinator.Config) {
				cfg.Periodic.GateURL = gate.srv.URL
				cfg.Periodic.GateTLS = c.gateTLS
				cfg.Periodic.Token.File = tokenFile
			})
			r.waitHolding(t)
			key, _ := periodic.ScheduleKey(b.layout.Stage, "tick")
			if _, err := b.consul.Client().KV().Put(&consulapi.KVPair{Key: key, Value: []byte(`{"every":"1s","topic":"jobs","type":"report"}`)}, nil); err != nil {
				t.Fatal(err)
			}
			if c.posts {
				testenv.WaitFor(t, 20*time.Second, "a slot posted over mutual TLS", func() bool { return gate.count() >= 1 })
				return
			}
			testenv.WaitFor(t, 20*time.Second, "the post's TLS failure logged with its fix", func() bool {
				return strings.Contains(r.logs.String(), "--periodic-gate-tls-ca-file")
			})
			if gate.count() != 0 {
				t.Errorf("the gate took %d posts from a scheduler that does not trust it", gate.count())
			}
			if strings.Contains(r.logs.String(), "periodic-secret") {
				t.Error("the token is in the logs")
			}
		})
	}
}

// A CA file the periodic scheduler cannot load stops New, naming the
// field.
func TestPeriodicGateTLSFileItCannotLoadFailsNew(t *testing.T) {
	cfg := coordinator.DefaultConfig()
	cfg.Periodic.GateTLS.CAFile = t.TempDir() + "/missing.pem"
	_, err := coordinator.New(cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "Config.Periodic.GateTLS.CAFile") || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("coordinator.New: %v", err)
	}
}
