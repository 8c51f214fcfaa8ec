package coordinator_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestCoordinatorListenerClosesSlowBodyAndIdleConnection: a body that
// never ends and an idle keep-alive connection are closed within the
// coordinator's --http-read-timeout and --http-idle-timeout (issue 31: the
// coordinator held both for ever).
func TestCoordinatorListenerClosesSlowBodyAndIdleConnection(t *testing.T) {
	limits := ops.HTTPLimits{ReadTimeout: time.Second, IdleTimeout: time.Second}
	r := newBed(t, 2).start(t, "c", func(c *coordinator.Config) { c.HTTP = limits })
	testenv.AssertConnLimits(t, r.addr, "/healthz", limits.ReadTimeout, limits.IdleTimeout)
}
