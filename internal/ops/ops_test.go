package ops

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHealthReadyMetricsAndDrain(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_things_total", Help: "h"})
	reg.MustRegister(c)
	c.Add(3)
	var notReady atomic.Bool
	mux := http.NewServeMux()
	Mount(mux, reg, func(context.Context) error {
		if notReady.Load() {
			return errors.New("no Kafka")
		}
		return nil
	})
	release := make(chan struct{})
	entered := make(chan struct{})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.Write([]byte("done"))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, slog.New(slog.DiscardHandler), &http.Server{Handler: mux}, ln, 10*time.Second)
	}()

	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz %d", code)
	}
	notReady.Store(true)
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "no Kafka") {
		t.Fatalf("/readyz when not ready: %d %q", code, body)
	}
	if _, body := get(t, base+"/metrics"); !strings.Contains(body, "sluice_test_things_total 3") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics lacks the counter or the Go collector")
	}

	slow := make(chan string, 1)
	go func() { _, body := get(t, base+"/slow"); slow <- body }()
	<-entered
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v before the in-flight request finished", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if body := <-slow; body != "done" {
		t.Fatalf("in-flight request got %q", body)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
