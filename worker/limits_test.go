package worker_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// TestWorkerListenerClosesSlowBodyAndIdleConnection: a body that never
// ends and an idle keep-alive connection are closed within the worker's
// --http-read-timeout and --http-idle-timeout (issue 31: the worker held
// both for ever).
func TestWorkerListenerClosesSlowBodyAndIdleConnection(t *testing.T) {
	limits := ops.HTTPLimits{ReadTimeout: time.Second, IdleTimeout: time.Second}
	b := newBed(t)
	w, err := worker.New(b.config(func(c *worker.Config) { c.HTTP = limits }), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker.Serve: %v", err)
		}
	}()
	addr := ln.Addr().String()
	t.Run("slow body", func(t *testing.T) { testenv.AssertSlowBodyClosed(t, addr, limits.ReadTimeout) })
	t.Run("idle", func(t *testing.T) { testenv.AssertIdleClosed(t, addr, "/healthz", limits.IdleTimeout) })
}
