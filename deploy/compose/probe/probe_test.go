package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
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
		if got := probe(srv.URL+"/readyz", io.Discard); got != c.want {
			t.Errorf("answer %d: exit %d, want %d", c.status, got, c.want)
		}
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	if got := probe(url+"/readyz", io.Discard); got != 1 {
		t.Errorf("nothing listening: exit %d, want 1", got)
	}
}
