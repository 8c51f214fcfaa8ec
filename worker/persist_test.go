package worker_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// A keyed job that finishes while Redis cannot persist (MISCONF: its disk
// full) keeps its idempotency record and its ack pending, retried, and
// both land once Redis persists again: the job is done, its key done, and
// it never runs a second time. The outage is logged once and its time
// counted. (Before: MISCONF was no Transient error; the record and the
// ack were dropped at once, the lease expired, the reaper returned the job
// and, once the running mark expired, it ran again.)
func TestAKeyedJobFinishedWhileRedisCannotPersistRunsOnce(t *testing.T) {
	b := newBed(t)
	var (
		runs     atomic.Int32
		started  = make(chan struct{}, 1)
		release  = make(chan struct{})
		returned = make(chan struct{}, 1)
		logged   testenv.LogBuffer
	)
	// The lease outlives the outage, so the record and the ack land while
	// the job is still this worker's; the running mark (timeout + lease)
	// ends soon after, so that a job whose writes were dropped runs again
	// within the test.
	cfg := b.config(func(c *worker.Config) { c.Lease, c.Timeout = 5*time.Second, time.Second })
	w, err := worker.New(cfg, slog.New(slog.NewTextHandler(io.MultiWriter(&logged, logWriter{t, "w"}), nil)))
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("send", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
		if runs.Add(1) == 1 {
			started <- struct{}{}
			<-release
			defer func() { returned <- struct{}{} }()
		}
		return []byte("sent"), nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	b.enqueue(t, job.Job{ID: "a", Type: "send", Group: "g", IdempotencyKey: "order-1"})
	<-started
	persistAgain := b.redis.RefusePersisting(t)
	close(release)
	<-returned
	// The fault lasts a second after the handler returned: many retries
	// of the record at most 100 ms apart, all refused.
	time.Sleep(time.Second)
	if g := testenv.Metric(t, w.Registry(), "sluice_worker_redis_unavailable"); g != 1 {
		t.Errorf("sluice_worker_redis_unavailable = %v while Redis refuses the record, want 1", g)
	}
	persistAgain()

	ctxb := context.Background()
	idem := b.layout.PartKeys(b.layout.PartitionOf("order-1")).Idempotency("order-1")
	testenv.WaitFor(t, 30*time.Second, "the job done and its key recorded", func() bool {
		mark, _ := b.redis.Client().Get(ctxb, idem).Result()
		return b.jobHash(t, "a", "g")["state"] == "done" && mark == "done:a"
	})
	k := b.layout.Keys(b.layout.QueueOf("jobs", "g", "a"))
	if n, _ := b.redis.Client().ZCard(ctxb, k.Leases()).Result(); n != 0 {
		t.Errorf("%d leases left after the ack", n)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the keyed job ran %d times, want once", n)
	}
	for outcome, want := range map[string]float64{"done": 1, "lost": 0, "idempotent_skip": 0} {
		if n := testenv.Metric(t, w.Registry(), "sluice_worker_jobs_total", "outcome", outcome); n != want {
			t.Errorf("jobs %s: %v, want %v", outcome, n, want)
		}
	}
	if s := testenv.Metric(t, w.Registry(), "sluice_worker_redis_unavailable_seconds_total"); s < 1 {
		t.Errorf("sluice_worker_redis_unavailable_seconds_total = %v, want the second of the outage at least", s)
	}
	if n := strings.Count(logged.String(), "Redis cannot serve or cannot write now"); n != 1 {
		t.Errorf("the outage was logged %d times, want once", n)
	}
}

// A worker refuses to start against a Redis whose maxmemory-policy evicts
// keys: Run returns at once with an error that names the setting.
func TestTheWorkerRefusesAnEvictingRedis(t *testing.T) {
	b := newBed(t)
	if err := b.redis.Client().ConfigSet(context.Background(), "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(b.config(nil), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = w.Run(ctx)
	if ctx.Err() != nil || err == nil || !strings.Contains(err.Error(), "maxmemory-policy is volatile-lru") || !strings.Contains(err.Error(), "noeviction") {
		t.Fatalf("Run against volatile-lru: %v (ctx %v)", err, ctx.Err())
	}
}
