package worker_test

import (
	"log/slog"
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
	addr := testenv.Serve(t, w.Serve)
	testenv.AssertConnLimits(t, addr, "/healthz", limits.ReadTimeout, limits.IdleTimeout)
}
