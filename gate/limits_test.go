package gate_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/testenv"
)

// shortLimits are listener limits a test can wait out.
var shortLimits = ops.HTTPLimits{ReadTimeout: time.Second, IdleTimeout: time.Second}

// TestGateListenerClosesSlowBodyAndIdleConnection: a job body that never
// ends and an idle keep-alive connection are closed within the gate's
// --http-read-timeout and --http-idle-timeout.
func TestGateListenerClosesSlowBodyAndIdleConnection(t *testing.T) {
	g := startGate(t, newKafka(t), func(c *gate.Config) { c.HTTP = shortLimits })
	addr := strings.TrimPrefix(g.url, "http://")
	testenv.AssertConnLimits(t, addr, "/healthz", shortLimits.ReadTimeout, shortLimits.IdleTimeout)
}

// TestGatePprofOnlyOnLoopbackListenerWithoutCmdline: with --pprof the
// profiler is served on --pprof-listen, a loopback address, never on the
// gate's API port (issue 31: it was, unauthenticated), and its cmdline,
// which shows inline secrets, is not served at all.
func TestGatePprofOnlyOnLoopbackListenerWithoutCmdline(t *testing.T) {
	g := startGate(t, newKafka(t), func(c *gate.Config) {
		c.Pprof, c.PprofListen = true, "127.0.0.1:0"
	})
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		if code, body := get(g.url + path); code == http.StatusOK || strings.Contains(body, "goroutine") {
			t.Errorf("the gate's API port serves %s: %d %.100q", path, code, body)
		}
	}
	var addr string
	testenv.WaitFor(t, 10*time.Second, "the profiler's address in the log", func() bool {
		m := regexp.MustCompile(`serving Go's profiler.* addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(g.logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	if code, body := get("http://" + addr + "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("the profiler's listener: %d %.100q, want the goroutine profile", code, body)
	}
	if code, body := get("http://" + addr + "/debug/pprof/cmdline"); code != http.StatusNotFound || strings.Contains(body, os.Args[0]) {
		t.Errorf("/debug/pprof/cmdline: %d %.100q, want 404 without the command line", code, body)
	}
}

// TestGatePprofRefusesNonLoopbackAddress: --pprof-listen on an address
// others reach is refused at start, naming the setting.
func TestGatePprofRefusesNonLoopbackAddress(t *testing.T) {
	for _, addr := range []string{":6060", "0.0.0.0:6060", "192.0.2.1:6060", "example.com:6060"} {
		cfg := gate.DefaultConfig()
		cfg.AllowNoAuth, cfg.Pprof, cfg.PprofListen = true, true, addr
		_, err := gate.New(context.Background(), cfg, nil)
		if err == nil || !strings.Contains(err.Error(), "Config.PprofListen") || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("PprofListen %q: %v, want a refusal naming Config.PprofListen", addr, err)
		}
	}
}
