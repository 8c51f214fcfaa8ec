package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/limits"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
)

const consoleTestToken = "console-test-admin-token"

// consoleBed is the real Redis and Consul the console's tests run sluice
// console and sluice coordinator against, with topic jobs registered as
// its relay would.
type consoleBed struct {
	redis  *testenv.RedisServer
	consul *testenv.ConsulServer
}

func newConsoleBed(t *testing.T) *consoleBed {
	t.Helper()
	b := &consoleBed{redis: testenv.Redis(t), consul: testenv.Consul(t)}
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: queue.Keyspace{Stage: "test", Partitions: 2}, Addr: b.redis.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.RegisterTopics(context.Background(), []string{"jobs"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	return b
}

// start runs `sluice <part> <the bed's flags> args...` in process on a
// free port until the test ends, and returns its address once /healthz
// answers.
func (b *consoleBed) start(t *testing.T, part string, args ...string) string {
	t.Helper()
	return b.startProbed(t, part, func(addr string) int {
		code, _ := httpGet(t, "http://"+addr+"/healthz", "")
		return code
	}, args...)
}

// startProbed is start with the /healthz probe given: healthz GETs the
// part's /healthz at addr (over HTTPS, say) and returns the status.
func (b *consoleBed) startProbed(t *testing.T, part string, healthz func(addr string) int, args ...string) string {
	t.Helper()
	return runPartProbed(t, part, healthz, append([]string{"--stage", "test", "--redis-addr", b.redis.Addr(), "--redis-partitions", "2",
		"--consul-addr", b.consul.Addr(), "--log-format", "text"}, args...)...)
}

// runPartProbed runs `sluice <part> --listen <free port> args...` in
// process until the test ends, and returns its address once healthz (a
// GET of its /healthz) answers 200.
func runPartProbed(t *testing.T, part string, healthz func(addr string) int, args ...string) string {
	t.Helper()
	port, err := stack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out, errOut testenv.LogBuffer
	go func() { done <- run(ctx, append([]string{part, "--listen", addr}, args...), &out, &errOut) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("sluice %s: exit %d: %s", part, code, errOut.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("sluice %s did not stop within 20s", part)
		}
	})
	testenv.WaitFor(t, 15*time.Second, "sluice "+part+" to serve", func() bool {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("sluice %s exited %d: %s", part, code, errOut.String())
		default:
		}
		return healthz(addr) == http.StatusOK
	})
	return addr
}

// httpGet GETs url with token ("": none): status and body; 0 when nothing
// answered.
func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestConsoleAloneServesTheAdminAPI: sluice console, without a coordinator
// anywhere, serves the admin API the admin commands use (a rate set
// reaches Consul as the relay reads it), the dashboard, and its metrics
// under the name they had in the coordinator; it says it holds no lock and
// where its scaling parameters come from; its fixes name its flags; a bad
// token entry is refused at start with the field, the flag and the
// variable.
func TestConsoleAloneServesTheAdminAPI(t *testing.T) {
	b := newConsoleBed(t)
	addr := b.start(t, "console", "--admin-tokens", consoleTestToken+" admin")
	api := []string{"--admin-url", "http://" + addr, "--admin-token", consoleTestToken}

	code, out, errOut := cliRun(append([]string{"rate", "set", "jobs", "5"}, api...)...)
	if code != 0 {
		t.Fatalf("sluice rate set against sluice console: exit %d\n%s\n%s", code, out, errOut)
	}
	kv, _, err := b.consul.Client().KV().Get("sluice/test/relay/jobs/rate", nil)
	if err != nil || kv == nil {
		t.Fatalf("the rate is not in Consul: %v %v", kv, err)
	}
	if r, err := limits.ParseRate(kv.Value); err != nil || r.PerSecond != 5 {
		t.Errorf("Consul holds %s: %+v %v", kv.Value, r, err)
	}
	code, out, errOut = cliRun(append([]string{"scale", "show", "-o", "json"}, api...)...)
	var scale admin.ScaleList
	if err := json.Unmarshal([]byte(out), &scale); code != 0 || err != nil {
		t.Fatalf("sluice scale show: exit %d %v\n%s\n%s", code, err, out, errOut)
	}
	if scale.Holder || scale.ParamsFrom != admin.ParamsFromConsul || len(scale.Partitions) != 2 || scale.Partitions[0].Target != nil {
		t.Errorf("scale show of a console alone: %+v", scale)
	}
	if code, out, errOut := cliRun(append([]string{"groups", "ls"}, api...)...); code != 0 {
		t.Errorf("sluice groups ls: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, page := httpGet(t, "http://"+addr+"/", ""); code != http.StatusOK || !strings.Contains(page, "app.js") {
		t.Errorf("the dashboard: %d %.200s", code, page)
	}
	code, body := httpGet(t, "http://"+addr+"/api/v1/dlq?source=kafka&topic=jobs", consoleTestToken)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "sluice console's --kafka-brokers (SLUICE_CONSOLE_KAFKA_BROKERS)") {
		t.Errorf("the Kafka DLQ without brokers: %d %s", code, body)
	}
	if _, metrics := httpGet(t, "http://"+addr+"/metrics", ""); !strings.Contains(metrics, `sluice_coordinator_admin_requests_total{code="200",route="PUT /api/v1/rates/{topic}"} 1`) {
		t.Errorf("/metrics lacks the request counted:\n%s", metrics)
	}
	if code, body := httpGet(t, "http://"+addr+"/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}

	code, _, errOut = cliRun("console", "--listen", "127.0.0.1:0", "--admin-tokens", "too-short-token")
	if want := "Config.AdminTokens: token entry 1: want \"<token> <role> [<name>]\" (role read or admin) (set by --admin-tokens / SLUICE_CONSOLE_ADMIN_TOKENS)"; code != 1 || !strings.Contains(errOut, want) || strings.Contains(errOut, "too-short-token") {
		t.Errorf("a bad token entry: exit %d, %q; want %q", code, errOut, want)
	}
}

// TestCoordinatorServesTheConsoleUnlessTold: sluice coordinator serves the
// console on its listener by default, with the coordinator's lock, targets
// and parameters, and one /metrics for both; with --console=false its
// listener has no admin API and no dashboard.
func TestCoordinatorServesTheConsoleUnlessTold(t *testing.T) {
	b := newConsoleBed(t)
	addr := b.start(t, "coordinator", "--admin-tokens", consoleTestToken+" admin", "--lock-delay", "0", "--scale-every", "200ms", "--scale-threshold", "7")
	var scale admin.ScaleList
	testenv.WaitFor(t, 20*time.Second, "the coordinator's console to say it holds the lock", func() bool {
		code, body := httpGet(t, "http://"+addr+"/api/v1/scale", consoleTestToken)
		return code == http.StatusOK && json.Unmarshal([]byte(body), &scale) == nil && scale.Holder
	})
	if scale.ParamsFrom != admin.ParamsFromCoordinator || scale.Params.Threshold != 7 {
		t.Errorf("the parameters shown: %+v from %q, want the coordinator's --scale-threshold 7", scale.Params, scale.ParamsFrom)
	}
	code, body := httpGet(t, "http://"+addr+"/api/v1/dlq?source=kafka&topic=jobs", consoleTestToken)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "sluice coordinator's --kafka-brokers (SLUICE_COORDINATOR_KAFKA_BROKERS)") {
		t.Errorf("the Kafka DLQ without brokers: %d %s", code, body)
	}
	if code, page := httpGet(t, "http://"+addr+"/", ""); code != http.StatusOK || !strings.Contains(page, "app.js") {
		t.Errorf("the dashboard: %d %.200s", code, page)
	}
	_, metrics := httpGet(t, "http://"+addr+"/metrics", "")
	for _, want := range []string{"sluice_coordinator_lock_held 1", `sluice_coordinator_admin_requests_total{code="200",route="GET /api/v1/scale"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	bare := b.start(t, "coordinator", "--console=false", "--admin-tokens", consoleTestToken+" admin")
	for _, path := range []string{"/api/v1/whoami", "/api/v1/scale", "/"} {
		if code, body := httpGet(t, "http://"+bare+path, consoleTestToken); code != http.StatusNotFound {
			t.Errorf("GET %s with --console=false: %d %.200s, want 404", path, code, body)
		}
	}
	code, out, errOut := cliRun("groups", "ls", "--admin-url", "http://"+bare, "--admin-token", consoleTestToken)
	if code != 1 || !strings.Contains(errOut, "--console=false") {
		t.Errorf("an admin command against --console=false: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, metrics := httpGet(t, "http://"+bare+"/metrics", ""); !strings.Contains(metrics, "sluice_coordinator_lock_held 0") || strings.Contains(metrics, "sluice_coordinator_admin_requests_total") {
		t.Errorf("/metrics with --console=false:\n%.2000s", metrics)
	}
}
