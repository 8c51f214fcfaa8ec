package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The example, built and run as a program against a real Redis, configured
// only by SLUICE_WORKER_* variables: both typed handlers run, a payload
// that does not decode goes dead naming its type, and SIGTERM stops it
// cleanly.
func TestExampleWorkerRunsBothTypedHandlers(t *testing.T) {
	redis := testenv.Redis(t)
	layout := queue.Keyspace{Stage: "example", Partitions: 2}
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: redis.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	if err := pool.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}

	bin := buildExampleWorker(t)
	port, err := stack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"SLUICE_WORKER_REDIS_ADDR="+redis.Addr(), "SLUICE_WORKER_REDIS_PARTITIONS=2", "SLUICE_WORKER_STAGE=example",
		"SLUICE_WORKER_TOPICS=jobs", "SLUICE_WORKER_LISTEN="+listen, "SLUICE_WORKER_RETAIN=jobs=1h",
		"SLUICE_WORKER_MAINTAIN_EVERY=50ms")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var logMu sync.Mutex
	var logs []string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logs = append(logs, sc.Text())
			logMu.Unlock()
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		cmd.Process.Kill() // an error once it exited: nothing to do
		logMu.Lock()
		defer logMu.Unlock()
		if t.Failed() {
			t.Logf("the worker's log:\n%s", strings.Join(logs, "\n"))
		}
	}()
	testenv.WaitFor(t, 20*time.Second, "the example's /readyz", func() bool {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	jobs := []job.Job{
		{ID: "mail1", Type: "email.send", Payload: json.RawMessage(`{"to":"ada@example.com","subject":"Welcome"}`)},
		{ID: "img1", Type: "image.resize", Payload: json.RawMessage(`{"url":"https://example.com/a.png","width":320}`)},
		{ID: "img2", Type: "image.resize", Payload: json.RawMessage(`{"url":"https://example.com/b.png","width":"wide"}`)},
	}
	items := make([]queue.Item, len(jobs))
	for i := range jobs {
		jobs[i].Topic, jobs[i].EnqueuedAt = "jobs", time.Now()
		items[i] = queue.Item{ID: jobs[i].ID, Topic: "jobs", Weight: 1, Envelope: jobs[i].AppendJSON(nil)}
	}
	if _, err := pool.Enqueue(ctx, 1, items, time.Now()); err != nil {
		t.Fatal(err)
	}
	record := func(id string) map[string]string {
		h, _ := redis.Client().HGetAll(ctx, layout.Keys(layout.QueueOf("jobs", "", id)).Job(id)).Result()
		return h
	}
	wait := func(id, state string) map[string]string {
		var h map[string]string
		testenv.WaitFor(t, 20*time.Second, id+" to be "+state, func() bool { h = record(id); return h["state"] == state })
		return h
	}
	wait("mail1", "done")
	if h := wait("img1", "done"); h["result"] != `{"thumbnail":"https://example.com/a.png?w=320","width":320}` {
		t.Fatalf("img1's result: %v", h)
	}
	h := wait("img2", "dead")
	if h["attempts"] != "1" || !strings.Contains(h["last_error"], `job type "image.resize"`) || !strings.Contains(h["last_error"], "main.Resize") {
		t.Fatalf("img2, whose width does not decode: %v", h)
	}
	logMu.Lock()
	all := strings.Join(logs, "\n")
	logMu.Unlock()
	if !strings.Contains(all, `"msg":"email sent"`) || !strings.Contains(all, `"to":"ada@example.com"`) {
		t.Fatalf("the email handler logged nothing of mail1:\n%s", all)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the example exited with %v after SIGTERM", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the example did not stop within 40 s of SIGTERM")
	}
}

// TestExampleWorkerSaysWhatIsWrongWithItsSettings: a bad variable is
// printed, naming it, with exit status 2 (the example used to exit 2
// without a word); -h prints the usage and exits 0.
func TestExampleWorkerSaysWhatIsWrongWithItsSettings(t *testing.T) {
	bin := buildExampleWorker(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "SLUICE_WORKER_WORKERS=many")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `SLUICE_WORKER_WORKERS="many"`) {
		t.Fatalf("with SLUICE_WORKER_WORKERS=many: %v, output %q; want exit status 2 and the variable named", err, out)
	}
	out, err = exec.Command(bin, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SLUICE_WORKER_WORKERS") {
		t.Fatalf("-h: %v, output %q; want the usage and exit status 0", err, out)
	}
}

// buildExampleWorker builds examples/worker into the test's temp dir.
func buildExampleWorker(t *testing.T) string {
	t.Helper()
	root, err := stack.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, "./examples/worker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/worker: %v\n%s", err, out)
	}
	return bin
}
