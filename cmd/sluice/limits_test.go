package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestCanaryListenerClosesSlowBodyAndIdleConnection: sluice canary's
// listener closes a body that never ends and an idle keep-alive
// connection within its --http-read-timeout and --http-idle-timeout
// (issue 31: it held both for ever).
func TestCanaryListenerClosesSlowBodyAndIdleConnection(t *testing.T) {
	redis := testenv.Redis(t)
	addr := runPartProbed(t, "canary", func(addr string) int {
		code, _ := httpGet(t, "http://"+addr+"/healthz", "")
		return code
	}, "--stage", "test", "--redis-addr", redis.Addr(), "--redis-partitions", "2", "--log-format", "text",
		"--canary-topics", "jobs", "--canary-gate", "http://127.0.0.1:1",
		"--http-read-timeout", "1s", "--http-idle-timeout", "1s")
	testenv.AssertConnLimits(t, addr, "/healthz", time.Second, time.Second)
}

// TestCoordinatorHTTPFlagsBoundTheConsoleOnItsListener: sluice
// coordinator's --http-* flags (shared with its console, which it serves
// on the same listener) bound that listener, the admin API's routes
// included.
func TestCoordinatorHTTPFlagsBoundTheConsoleOnItsListener(t *testing.T) {
	b := newConsoleBed(t)
	addr := b.start(t, "coordinator", "--admin-tokens", consoleTestToken+" admin", "--lock-delay", "0",
		"--http-read-timeout", "1s", "--http-idle-timeout", "1s")
	if code, _ := httpGet(t, "http://"+addr+"/api/v1/whoami", consoleTestToken); code != http.StatusOK {
		t.Fatalf("the console on the coordinator's listener: GET /api/v1/whoami: %d", code)
	}
	testenv.AssertConnLimits(t, addr, "/api/v1/whoami", time.Second, time.Second)
}
