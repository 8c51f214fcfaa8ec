// Package integration runs the Python and TypeScript SDKs' suites against
// the real pipeline: `sluice dev` on free loopback ports, its built-in
// worker delivering two job types through its http handler to handlers
// the suites build with the SDKs' helpers, signed group callbacks, a
// loopback proxy that eats one answer to show the resend after a 504, and
// the admin API (topics, a running job cancelled, listings, a delete).
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/scenario"
)

// TestSDKsAgainstSluiceDev starts one sluice dev and runs both SDKs'
// integration suites and examples against it, and their unit suites, at
// once. A missing python3, pytest, node
// or the TypeScript SDK's devDependencies fails the test, naming the fix:
// the SDKs are part of what `make test` proves.
func TestSDKsAgainstSluiceDev(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pyDir, tsDir := filepath.Join(root, "python"), filepath.Join(root, "typescript")
	python := need(t, "python3", "the Python SDK's tests need Python 3.11+ with pytest: make deps installs them")
	if out, err := exec.Command(python, "-c", "import sys, pytest; assert sys.version_info >= (3, 11), sys.version").CombinedOutput(); err != nil {
		t.Fatalf("python3 cannot run the Python SDK's tests (want 3.11+ with pytest; make deps installs pytest): %v\n%s", err, out)
	}
	node := need(t, "node", "the TypeScript SDK's tests need Node 20+ and npm: make deps runs npm ci in sdk/typescript")
	tsc := filepath.Join(tsDir, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Fatalf("sdk/typescript has no node_modules (%v): run make deps (npm ci in sdk/typescript)", err)
	}
	// Compile while the stack starts.
	built := make(chan error, 1)
	go func() {
		cmd := exec.Command(node, tsc, "-p", ".")
		cmd.Dir = tsDir
		if out, err := cmd.CombinedOutput(); err != nil {
			built <- fmt.Errorf("tsc: %v\n%s", err, out)
			return
		}
		built <- nil
	}()

	// The handlers' ports must be known before sluice dev starts: its
	// worker's --http names them.
	pyPort, tsPort, pyExPort, tsExPort := freePort(t), freePort(t), freePort(t), freePort(t)
	secret := "sdk-integration-callback-secret-0123456789"
	secretFile := filepath.Join(t.TempDir(), "callback-secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildSluice(t)
	var log lockedBuffer
	dev, err := scenario.StartDev(context.Background(), scenario.DevConfig{
		Bin: bin, Dir: t.TempDir(), Log: &log,
		Args: []string{"--canary-interval", "0", "--redis-aof=false", "--callback-secret-file", secretFile,
			"--http", fmt.Sprintf("sdkpy=http://127.0.0.1:%d/,sdkts=http://127.0.0.1:%d/,thumbpy=http://127.0.0.1:%d/,thumbts=http://127.0.0.1:%d/",
				pyPort, tsPort, pyExPort, tsExPort)},
	})
	if err != nil {
		t.Fatalf("sluice dev: %v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if err := dev.Stop(); err != nil {
			t.Errorf("sluice dev stopped with %v", err)
		}
		if t.Failed() {
			t.Logf("sluice dev's output:\n%s", log.String())
		}
	})
	flaky := newFlakyGate(t, dev.Endpoints.Gate)
	if err := <-built; err != nil {
		t.Fatal(err)
	}

	// sluice dev serves the admin API on the coordinator's address, with
	// the admin token it generated into <dir>/admin-token (docs/admin.md).
	adminToken, err := os.ReadFile(filepath.Join(dev.Dir(), "stack", "admin-token"))
	if err != nil {
		t.Fatalf("the admin token sluice dev generates: %v", err)
	}
	env := append(os.Environ(),
		"SLUICE_TEST_GATE="+dev.Endpoints.Gate,
		"SLUICE_TEST_FLAKY_GATE="+flaky.URL,
		"SLUICE_TEST_CALLBACK_SECRET="+secret,
		"SLUICE_TEST_ADMIN="+dev.Endpoints.Coordinator,
		"SLUICE_TEST_ADMIN_TOKEN="+strings.TrimSpace(string(adminToken)),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	suites := []struct {
		name     string
		dir      string
		cmd      []string
		env      []string
		passed   func(out string) bool
		whatRuns string
	}{
		{"python", pyDir, []string{python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/integration"},
			[]string{"SLUICE_TEST_JOB_TYPE=sdkpy", "SLUICE_TEST_HANDLER_PORT=" + strconv.Itoa(pyPort)},
			func(out string) bool { return strings.Contains(out, "4 passed") && !strings.Contains(out, "skipped") },
			"4 passed, none skipped"},
		{"typescript", tsDir, []string{node, "--test", "dist/test/integration/pipeline.test.js"},
			[]string{"SLUICE_TEST_JOB_TYPE=sdkts", "SLUICE_TEST_HANDLER_PORT=" + strconv.Itoa(tsPort)},
			func(out string) bool {
				return strings.Contains(out, "# pass 4") && strings.Contains(out, "# skipped 0")
			},
			"# pass 4, # skipped 0"},
		// The unit suites on the shared vectors (sdk/testdata), so that
		// make test breaks on an envelope change in any of the three.
		{"python unit", pyDir, []string{python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", "--ignore=tests/integration"}, nil,
			func(out string) bool { return regexp.MustCompile(`(?m)^\d+ passed in `).MatchString(out) }, "every test passed"},
		{"typescript unit", tsDir, []string{node, "--test", "dist/test/vectors.test.js", "dist/test/admin.test.js", "dist/test/handler.test.js"}, nil,
			func(out string) bool {
				return strings.Contains(out, "# fail 0") && strings.Contains(out, "# skipped 0")
			}, "# fail 0, # skipped 0"},
		// The examples of the README, with their 1,000 items.
		{"python example", pyDir, []string{python, "examples/bulkgroup.py"},
			[]string{"PYTHONPATH=src", "SLUICE_GATE=" + dev.Endpoints.Gate, "THUMB_TYPE=thumbpy", "THUMB_PORT=" + strconv.Itoa(pyExPort)},
			exampleDone, exampleLine},
		{"typescript example", tsDir, []string{node, "dist/examples/bulkgroup.js"},
			[]string{"SLUICE_GATE=" + dev.Endpoints.Gate, "THUMB_TYPE=thumbts", "THUMB_PORT=" + strconv.Itoa(tsExPort)},
			exampleDone, exampleLine},
	}
	var wg sync.WaitGroup
	for _, s := range suites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			cmd := exec.CommandContext(ctx, s.cmd[0], s.cmd[1:]...)
			cmd.Dir = s.dir
			cmd.Env = append(append([]string(nil), env...), s.env...)
			out, err := cmd.CombinedOutput()
			t.Logf("%s suite: %s in %v", s.name, strings.Join(s.cmd, " "), time.Since(start).Round(time.Millisecond))
			if err != nil || !s.passed(string(out)) {
				t.Errorf("the %s SDK's suite against sluice dev: %v (want %s)\n%s", s.name, err, s.whatRuns, out)
			}
		}()
	}
	wg.Wait()
}

const exampleLine = "callback: group <id>: 1000 items, 1000 done, 0 dead"

var exampleDone = regexp.MustCompile(`(?m)^callback: group \S+: 1000 items, 1000 done, 0 dead$`).MatchString

func need(t *testing.T, name, fix string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: %s", name, fix)
	}
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// newFlakyGate is a proxy in front of the gate that loses the answer to
// the first POST of each job id: the gate stored the job, the client gets
// 504, as when Kafka confirmed after the gate's produce timeout or the
// connection broke on the way back. GET /__sends?id= tells how many POSTs
// carried that id.
func newFlakyGate(t *testing.T, gate string) *httptest.Server {
	t.Helper()
	target, err := url.Parse(gate)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sends := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/__sends" {
			mu.Lock()
			n := sends[r.URL.Query().Get("id")]
			mu.Unlock()
			json.NewEncoder(w).Encode(n)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var env struct{ ID string }
		json.Unmarshal(body, &env)
		mu.Lock()
		sends[env.ID]++
		first := r.Method == http.MethodPost && env.ID != "" && sends[env.ID] == 1
		mu.Unlock()
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target.String()+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if first {
			if resp.StatusCode != http.StatusAccepted {
				t.Errorf("the gate refused the job the proxy forwards: %d %s", resp.StatusCode, answer)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGatewayTimeout)
			json.NewEncoder(w).Encode(map[string]any{"error": "injected by the test: the gate's answer was lost", "ids": []string{env.ID}})
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// lockedBuffer keeps the output of sluice dev, which exec copies from two
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
