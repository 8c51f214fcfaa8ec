package gate_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// httpsClient trusts what c trusts and shows c's client certificate, if
// any. A new connection per request, so that each sees the certificate
// the gate serves now.
func httpsClient(t *testing.T, c tlsfiles.Client) *http.Client {
	t.Helper()
	tc, err := c.Config()
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
}

// postJob POSTs one job to the gate at base; the status and the serial of
// the certificate the gate showed.
func postJob(hc *http.Client, base string) (int, string, error) {
	resp, err := hc.Post(base+"/v1/topics/jobs/jobs", "application/json", strings.NewReader(`{"type":"hello","payload":{}}`))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber.String(), nil
}

// The gate with --tls-cert-file and --tls-key-file serves HTTPS only:
// jobs, /healthz and /metrics alike; a certificate renewed in the same
// files is served without a restart.
func TestHTTPSGateServesARenewedCertificateWithoutRestart(t *testing.T) {
	certs := testenv.NewCerts(t)
	tg := startGate(t, newKafka(t), func(c *gate.Config) { c.TLS = certs.Server(false) })
	base := strings.Replace(tg.url, "http://", "https://", 1)
	trusting := tlsfiles.Client{CAFile: certs.CAFile}
	hc := httpsClient(t, trusting)

	status, first, err := postJob(hc, base)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("POST over HTTPS with the test CA: %d %v", status, err)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		resp, err := hc.Get(base + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s over HTTPS: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	// Plain HTTP on the same port is not served: Go's server answers 400.
	if resp, err := http.Get(tg.url + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the HTTPS gate: %d, want 400", resp.StatusCode)
		}
	}

	if err := certs.Sign(certs.ServerCertFile, certs.ServerKey, "localhost"); err != nil {
		t.Fatal(err)
	}
	// The gate looks at its files at most once a second, on a handshake.
	testenv.WaitFor(t, 15*time.Second, "the renewed certificate to be served", func() bool {
		status, serial, err := postJob(hc, base)
		return err == nil && status == http.StatusAccepted && serial != first
	})
}

// With --tls-client-ca-file the gate refuses a client without a
// certificate, and serves one with a certificate its CA signed.
func TestMutualTLSGateRefusesAClientWithoutACertificate(t *testing.T) {
	certs := testenv.NewCerts(t)
	tg := startGate(t, newKafka(t), func(c *gate.Config) { c.TLS = certs.Server(true) })
	base := strings.Replace(tg.url, "http://", "https://", 1)

	if status, _, err := postJob(httpsClient(t, certs.Client()), base); err != nil || status != http.StatusAccepted {
		t.Fatalf("POST with the client certificate: %d %v", status, err)
	}
	_, _, err := postJob(httpsClient(t, tlsfiles.Client{CAFile: certs.CAFile}), base)
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("POST without a client certificate: %v, want the gate's refusal (certificate required)", err)
	}
}

// A certificate, key or client CA file the gate cannot load fails New,
// before Kafka is dialled, with the Config field and the file named.
func TestGateTLSFilesItCannotLoadFailNewNamingTheField(t *testing.T) {
	certs := testenv.NewCerts(t)
	missing := filepath.Join(certs.Dir, "missing.pem")
	for _, c := range []struct {
		name  string
		tls   tlsfiles.Server
		wants []string
	}{
		{"missing cert", tlsfiles.Server{CertFile: missing, KeyFile: certs.ServerKey}, []string{"Config.TLS.CertFile", "missing.pem"}},
		{"key of another cert", tlsfiles.Server{CertFile: certs.ServerCertFile, KeyFile: certs.ClientKey}, []string{"Config.TLS.KeyFile", "client-key.pem"}},
		{"cert without key", tlsfiles.Server{CertFile: certs.ServerCertFile}, []string{"Config.TLS.KeyFile", "both"}},
		{"client CA not PEM", tlsfiles.Server{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKey, ClientCAFile: certs.ServerKey}, []string{"Config.TLS.ClientCAFile", "server-key.pem"}},
		{"client CA without HTTPS", tlsfiles.Server{ClientCAFile: certs.CAFile}, []string{"Config.TLS.ClientCAFile", "Config.TLS.CertFile"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := gate.DefaultConfig()
			cfg.Kafka.Brokers = []string{"127.0.0.1:1"} // never reached
			cfg.AllowNoAuth = true
			cfg.TLS = c.tls
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			g, err := gate.New(ctx, cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				g.Run(ctx)
				t.Fatal("gate.New accepted the files")
			}
			for _, want := range c.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("gate.New: %v\nwant it to name %s", err, want)
				}
			}
			if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("gate.New dialled Kafka before checking its certificate: %v", err)
			}
		})
	}
}
