package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// TestConsoleOverMutualTLS: with Config.TLS and a client CA the console
// serves the admin API (and /healthz) over HTTPS to the admin client with
// a certificate, refuses a client without one, and serves a renewed
// certificate without a restart.
func TestConsoleOverMutualTLS(t *testing.T) {
	b := newBed(t, 2)
	certs := testenv.NewCerts(t)
	r := b.start(t, "tls", func(c *console.Config) { c.TLS = certs.Server(true) })
	if r.c.TLSConfig() == nil {
		t.Fatal("TLSConfig is nil with Config.TLS set")
	}
	tc, err := certs.Client().Config()
	if err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}
	ac := &admin.Client{BaseURL: "https://" + r.addr, Token: adminToken, HTTP: &http.Client{Timeout: 10 * time.Second, Transport: transport}}
	var who admin.WhoAmI
	if err := ac.Get(t.Context(), "/api/v1/whoami", &who); err != nil || who.Role != "admin" {
		t.Fatalf("the admin API over mutual TLS: %+v %v", who, err)
	}

	noCert := tlsfiles.Client{CAFile: certs.CAFile}
	ntc, err := noCert.Config()
	if err != nil {
		t.Fatal(err)
	}
	refused := &admin.Client{BaseURL: "https://" + r.addr, Token: adminToken, HTTP: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ntc}}}
	if err := refused.Get(t.Context(), "/api/v1/whoami", &who); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("a client without a certificate: %v", err)
	}

	serial := func() string {
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: transport}).Get("https://" + r.addr + "/healthz")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	if err := certs.Sign(certs.ServerCertFile, certs.ServerKey, "localhost"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "the renewed certificate to be served", func() bool {
		s := serial()
		return s != first && !strings.Contains(s, " ")
	})
}

// A certificate or client CA the console cannot load fails New with the
// Config field and the file named; so does an unreadable CA for the
// gates' /metrics.
func TestConsoleTLSFilesItCannotLoadFailNew(t *testing.T) {
	certs := testenv.NewCerts(t)
	missing := filepath.Join(certs.Dir, "missing.pem")
	for _, c := range []struct {
		name   string
		mutate func(*console.Config)
		wants  []string
	}{
		{"missing key", func(c *console.Config) { c.TLS = tlsfiles.Server{CertFile: certs.ServerCertFile, KeyFile: missing} }, []string{"Config.TLS.KeyFile", "missing.pem"}},
		{"missing client CA", func(c *console.Config) { c.TLS = certs.Server(false); c.TLS.ClientCAFile = missing }, []string{"Config.TLS.ClientCAFile", "missing.pem"}},
		{"missing gates' CA", func(c *console.Config) { c.GateMetricsTLS.CAFile = missing }, []string{"Config.GateMetricsTLS.CAFile", "missing.pem"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := console.DefaultConfig()
			c.mutate(&cfg)
			con, err := console.New(cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				con.Run(ctx)
				t.Fatal("console.New accepted the files")
			}
			for _, want := range c.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("console.New: %v\nwant it to name %s", err, want)
				}
			}
		})
	}
}
