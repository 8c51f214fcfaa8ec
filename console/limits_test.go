package console_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestConsoleListenerClosesSlowBodyAndIdleConnection: a body that never
// ends (before any authentication) and an idle keep-alive connection are
// closed within the console's --http-read-timeout and --http-idle-timeout
// (issue 31: the console held both for ever).
func TestConsoleListenerClosesSlowBodyAndIdleConnection(t *testing.T) {
	limits := ops.HTTPLimits{ReadTimeout: time.Second, IdleTimeout: time.Second}
	r := newBed(t, 2).start(t, "c", func(c *console.Config) { c.HTTP = limits })
	testenv.AssertConnLimits(t, r.addr, "/healthz", limits.ReadTimeout, limits.IdleTimeout)
}
