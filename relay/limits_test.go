package relay_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

// TestRelayListenerClosesSlowBodyAndIdleConnection: a body that never ends
// and an idle keep-alive connection are closed within the relay's
// --http-read-timeout and --http-idle-timeout (issue 31: the relay held
// both for ever).
func TestRelayListenerClosesSlowBodyAndIdleConnection(t *testing.T) {
	limits := ops.HTTPLimits{ReadTimeout: time.Second, IdleTimeout: time.Second}
	b := newBed(t)
	r, err := relay.New(context.Background(), b.config(func(c *relay.Config) { c.HTTP = limits }), slog.New(slog.NewTextHandler(testWriter{t, "r"}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay.Serve: %v", err)
		}
	}()
	addr := ln.Addr().String()
	t.Run("slow body", func(t *testing.T) { testenv.AssertSlowBodyClosed(t, addr, limits.ReadTimeout) })
	t.Run("idle", func(t *testing.T) { testenv.AssertIdleClosed(t, addr, "/healthz", limits.IdleTimeout) })
}
