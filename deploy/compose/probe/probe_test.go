package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The healthcheck's exit code: 0 only for a 2xx, 1 for a part that answers
// not ready or does not answer at all.
func TestProbe(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, "redis: connection refused")
	}))
	defer srv.Close()
	for _, c := range []struct {
		status, want int
	}{{http.StatusOK, 0}, {http.StatusNoContent, 0}, {http.StatusServiceUnavailable, 1}, {http.StatusNotFound, 1}} {
		status = c.status
		if got := probe(srv.URL+"/readyz", "", io.Discard); got != c.want {
			t.Errorf("answer %d: exit %d, want %d", c.status, got, c.want)
		}
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	if got := probe(url+"/readyz", "", io.Discard); got != 1 {
		t.Errorf("nothing listening: exit %d, want 1", got)
	}
}

// compose.secure.yaml's healthchecks: a part serving HTTPS with a
// certificate of the stack's private CA is healthy only when the probe
// trusts that CA; a certificate from another CA, or no --ca-file, fails.
func TestProbeHTTPS(t *testing.T) {
	certs := testenv.NewCerts(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ready")
	}))
	tlsCfg, err := certs.Server(false).Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = tlsCfg
	srv.StartTLS()
	defer srv.Close()
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/readyz"

	if got := probe(url, certs.CAFile, io.Discard); got != 0 {
		t.Errorf("trusting the server's CA: exit %d, want 0", got)
	}
	var stderr bytes.Buffer
	if got := probe(url, certs.OtherCAFile, &stderr); got != 1 || !strings.Contains(stderr.String(), "certificate") {
		t.Errorf("trusting another CA: exit %d (%q), want 1 with a certificate error", got, stderr.String())
	}
	if got := probe(url, "", io.Discard); got != 1 {
		t.Errorf("trusting the system's roots only: exit %d, want 1", got)
	}
	stderr.Reset()
	if got := probe(url, certs.Dir+"/missing.pem", &stderr); got != 1 || !strings.Contains(stderr.String(), "--ca-file") {
		t.Errorf("a missing --ca-file: exit %d (%q), want 1 naming --ca-file", got, stderr.String())
	}
}
