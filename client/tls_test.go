package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// httpsGate serves a real gate over HTTPS (gate.Config.TLS, as sluice gate
// --tls-cert-file does) in front of kfake, on a loopback port; its
// https:// URL.
func httpsGate(t *testing.T, server tlsfiles.Server) string {
	t.Helper()
	k := testenv.Kafka(t, testenv.Topic(topic, kafkaParts))
	cfg := gate.DefaultConfig()
	cfg.Kafka.Brokers = k.Brokers()
	cfg.AllowNoAuth = true
	cfg.TLS = server
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g, err := gate.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gate.Serve: %v", err)
		}
	})
	return "https://" + ln.Addr().String()
}

// The client given the test CA (Config.CAFile, or a *tls.Config) enqueues
// to a gate serving HTTPS; one that trusts another CA gets, at once and
// without resends, an error that names Config.CAFile.
func TestClientOverHTTPSTrustsTheCAItIsGiven(t *testing.T) {
	certs := testenv.NewCerts(t)
	url := httpsGate(t, certs.Server(false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(client.Config{URL: url, CAFile: certs.CAFile, Retry: quick})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Enqueue(ctx, topic, "email", map[string]string{"to": "a@example.com"}); err != nil || res.ID == "" {
		t.Fatalf("Enqueue over HTTPS with Config.CAFile: %+v %v", res, err)
	}
	pool, err := tlsfiles.LoadCAs(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err = client.New(client.Config{URL: url, TLS: &tls.Config{RootCAs: pool}, Retry: quick})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, topic, "email", nil); err != nil {
		t.Fatalf("Enqueue over HTTPS with Config.TLS: %v", err)
	}

	c, err = client.New(client.Config{URL: url, CAFile: certs.OtherCAFile, Retry: quick})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Enqueue(ctx, topic, "email", nil)
	var he *client.TLSError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "client.Config.CAFile") || !strings.Contains(err.Error(), "not signed by a CA this client trusts") {
		t.Fatalf("Enqueue trusting another CA: %v\nwant a HandshakeError naming client.Config.CAFile", err)
	}
	t.Logf("trusting another CA: %v", err)
	if !strings.Contains(err.Error(), ": 1 sends:") {
		t.Errorf("an untrusted certificate was sent again: %v", err)
	}

	// The system's roots do not hold the test CA either: the same fix.
	c, err = client.New(client.Config{URL: url, Retry: quick})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, topic, "email", nil); !errors.As(err, &he) || !strings.Contains(err.Error(), "client.Config.CAFile") {
		t.Fatalf("Enqueue with the system's roots: %v", err)
	}
}

// A gate with --tls-client-ca-file takes the client's certificate
// (Config.CertFile, Config.KeyFile), and refuses a client without one
// with an error that names those fields.
func TestClientShowsItsCertificateToAMutualTLSGate(t *testing.T) {
	certs := testenv.NewCerts(t)
	url := httpsGate(t, certs.Server(true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(client.Config{URL: url, CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKey, Retry: quick})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, topic, "email", nil); err != nil {
		t.Fatalf("Enqueue with the client certificate: %v", err)
	}
	c, err = client.New(client.Config{URL: url, CAFile: certs.CAFile, Retry: quick})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Enqueue(ctx, topic, "email", nil)
	t.Logf("without a client certificate: %v", err)
	if err == nil || !strings.Contains(err.Error(), "client.Config.CertFile") {
		t.Fatalf("Enqueue without a client certificate: %v\nwant an error naming client.Config.CertFile", err)
	}
}

// New refuses what it cannot honour: TLS settings beside an HTTPClient of
// the caller's (whose Transport holds its TLS), a file it cannot load.
func TestClientTLSSettingsNew(t *testing.T) {
	certs := testenv.NewCerts(t)
	if _, err := client.New(client.Config{URL: "https://127.0.0.1:1", CAFile: certs.CAFile, HTTPClient: &http.Client{}}); err == nil || !strings.Contains(err.Error(), "Config.HTTPClient") {
		t.Errorf("CAFile beside HTTPClient: %v", err)
	}
	if _, err := client.New(client.Config{URL: "https://127.0.0.1:1", CAFile: certs.Dir + "/missing.pem"}); err == nil || !strings.Contains(err.Error(), "Config.CAFile") || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("a missing CA file: %v", err)
	}
	if _, err := client.New(client.Config{URL: "https://127.0.0.1:1", CertFile: certs.ClientCertFile}); err == nil || !strings.Contains(err.Error(), "Config.KeyFile") {
		t.Errorf("a cert without its key: %v", err)
	}
}
