package worker_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/testenv"
)

type logWriter struct {
	t    *testing.T
	name string
}

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(w.name + ": " + strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestKillNineMidJobRunsItAgain: a worker process dies (SIGKILL) while a job
// runs; after its lease expires another worker runs the job again and it
// completes, with both attempts counted.
func TestKillNineMidJobRunsItAgain(t *testing.T) {
	b := newBed(t)
	bin := testenv.BuildSluice(t)
	startWorker := func(name string) *exec.Cmd {
		cmd := exec.Command(bin, "worker", "--listen", "127.0.0.1:0", "--stage", b.layout.Stage,
			"--redis-addr", b.redis.Addr(), "--redis-partitions", strconv.Itoa(b.layout.Partitions),
			"--handle", "sleep=sleep", "--retain", "jobs=1h", "--lease", "2s", "--maintain-every", "100ms", "--log-format", "text")
		cmd.Stdout, cmd.Stderr = logWriter{t, name}, logWriter{t, name}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	first := startWorker("w1")
	b.enqueue(t, job.Job{ID: "long", Type: "sleep", Group: "g", Payload: []byte(`{"ms":1500}`)})
	k := b.keys(b.layout.PartitionOf("g"))
	testenv.WaitFor(t, 10*time.Second, "the job to be running", func() bool {
		n, _ := b.redis.Client().HGet(context.Background(), k.Stats(), "inflight").Int()
		return n == 1
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	killed := time.Now()
	startWorker("w2")
	h := b.waitState(t, "long", "g", "done")
	if h["attempts"] != "2" {
		t.Fatalf("after kill -9: %v, want done at attempt 2", h)
	}
	t.Logf("done %s after the kill (lease 2s, job 1.5s)", time.Since(killed).Round(100*time.Millisecond))
}
