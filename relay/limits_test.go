package relay_test

import (
	"context"
	"log/slog"
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
	addr := testenv.Serve(t, r.Serve)
	testenv.AssertConnLimits(t, addr, "/healthz", limits.ReadTimeout, limits.IdleTimeout)
}
