package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

type bed struct {
	redis  *testenv.RedisServer
	pool   *queue.Pool
	layout queue.Keyspace
}

func newBed(t *testing.T) *bed { t.Helper(); return newBedOf(t, 2) }

// newBedOf is a bed of parts partitions, its Redis started with opts.
func newBedOf(t *testing.T, parts int, opts ...testenv.RedisOption) *bed {
	t.Helper()
	r := testenv.Redis(t, opts...)
	layout := queue.Keyspace{Stage: "test", Partitions: parts}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &bed{redis: r, pool: p, layout: layout}
}

// enqueue puts jobs in Redis as the relay would, on their topic's queue
// (default "jobs").
func (b *bed) enqueue(t *testing.T, jobs ...job.Job) {
	t.Helper()
	items := make([]queue.Item, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		if j.Topic == "" {
			j.Topic = "jobs"
		}
		j.EnqueuedAt = time.Now()
		items[i] = queue.Item{ID: j.ID, Group: j.Group, Tenant: j.Tenant, Topic: j.Topic, Weight: j.Priority + 1, Envelope: j.AppendJSON(nil)}
	}
	if _, err := b.pool.Enqueue(context.Background(), 1, items, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// keys are the keys of topic "jobs" on partition part.
func (b *bed) keys(part int) queue.Keys { return b.layout.Keys(queue.Queue{Topic: "jobs", Part: part}) }

// jobHash reads the record of a job of topic "jobs"; group is the job's
// ("" for a job without one), which with the id picks its partition.
func (b *bed) jobHash(t *testing.T, id, group string) map[string]string {
	t.Helper()
	k := b.layout.Keys(b.layout.QueueOf("jobs", group, id))
	h, err := b.redis.Client().HGetAll(context.Background(), k.Job(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (b *bed) waitState(t *testing.T, id, group, state string) map[string]string {
	t.Helper()
	var h map[string]string
	testenv.WaitFor(t, 15*time.Second, "job "+id+" to be "+state, func() bool {
		h = b.jobHash(t, id, group)
		return h["state"] == state
	})
	return h
}

func (b *bed) config(mutate func(*worker.Config)) worker.Config {
	cfg := worker.DefaultConfig()
	cfg.Stage, cfg.Partitions, cfg.RedisAddr = b.layout.Stage, b.layout.Partitions, b.redis.Addr()
	cfg.Workers = 4
	cfg.Backoff, cfg.MaxBackoff = 20*time.Millisecond, 100*time.Millisecond
	cfg.Maintain = 20 * time.Millisecond
	cfg.Liveness = cfg.Maintain // reaps at once, as the tests expect of a short lease
	cfg.Lease = 3 * time.Second
	cfg.Drain = 200 * time.Millisecond
	// The bed's topic keeps a record of each done job, so that tests can
	// wait for it; TestAPlainJobLeavesNothingBehind turns it off.
	cfg.Retain = map[string]time.Duration{"jobs": time.Hour}
	if mutate != nil {
		mutate(&cfg)
	}
	return cfg
}

// start runs a worker with the handlers; stop ends it and waits.
func (b *bed) start(t *testing.T, mutate func(*worker.Config), setup func(*worker.Worker)) (stop func()) {
	t.Helper()
	w, err := worker.New(b.config(mutate), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	setup(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestRunsJobsAndKeepsResults(t *testing.T) {
	b := newBed(t)
	b.start(t, nil, func(w *worker.Worker) {
		w.Handle("echo", worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
			return append([]byte("got "), j.Payload...), nil
		}))
	})
	for i := range 20 {
		b.enqueue(t, job.Job{ID: "j" + strconv.Itoa(i), Type: "echo", Group: "g" + strconv.Itoa(i%3), Payload: []byte(`{"html":"<&>"}`)})
	}
	for i := range 20 {
		h := b.waitState(t, "j"+strconv.Itoa(i), "g"+strconv.Itoa(i%3), "done")
		if h["result"] != `got {"html":"<&>"}` || h["attempts"] != "1" {
			t.Fatalf("job %d: %v", i, h)
		}
	}
}

func TestRetriesWithBackoffThenSucceeds(t *testing.T) {
	b := newBed(t)
	var calls atomic.Int32
	b.start(t, nil, func(w *worker.Worker) {
		w.Handle("flaky", worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
			calls.Add(1)
			if j.Attempt < 3 {
				return nil, errors.New("downstream 503")
			}
			return nil, nil
		}))
	})
	b.enqueue(t, job.Job{ID: "f1", Type: "flaky"})
	h := b.waitState(t, "f1", "f1", "done")
	if h["attempts"] != "3" || calls.Load() != 3 {
		t.Fatalf("after retries: %v, %d calls", h, calls.Load())
	}
}

func TestPermanentPanicNoHandlerAndMaxAttempts(t *testing.T) {
	b := newBed(t)
	var panicked atomic.Bool
	var w *worker.Worker
	b.start(t, nil, func(started *worker.Worker) {
		w = started
		w.Handle("bad-input", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
			return nil, worker.Permanent(errors.New("invalid address"))
		}))
		w.Handle("always", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
			return nil, errors.New("still down")
		}))
		w.Handle("panics", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
			if panicked.CompareAndSwap(false, true) {
				panic("boom")
			}
			return nil, nil
		}))
	})
	b.enqueue(t,
		job.Job{ID: "p1", Type: "bad-input"},
		job.Job{ID: "a1", Type: "always", MaxAttempts: 3},
		job.Job{ID: "x1", Type: "panics"},
		job.Job{ID: "n1", Type: "nobody-handles-this"},
	)
	if h := b.waitState(t, "p1", "p1", "dead"); h["attempts"] != "1" || !strings.Contains(h["last_error"], "invalid address") {
		t.Fatalf("permanent: %v", h)
	}
	if h := b.waitState(t, "a1", "a1", "dead"); h["attempts"] != "3" || h["last_error"] != "still down" {
		t.Fatalf("max attempts: %v", h)
	}
	if h := b.waitState(t, "x1", "x1", "done"); h["attempts"] != "2" {
		t.Fatalf("a panic must be a failed attempt, then a retry: %v", h)
	}
	// No handler: retried with backoff, attempt counted, never killed on
	// the spot (a rolling deploy may bring the handler); dead only once
	// its attempts are spent.
	// Its last error says it is dead, not "retried later" (issue 32).
	if h := b.waitState(t, "n1", "", "dead"); !strings.Contains(h["last_error"], "no handler") || !strings.Contains(h["last_error"], "attempts are spent: dead") ||
		strings.Contains(h["last_error"], "retried later") || h["attempts"] != "5" {
		t.Fatalf("no handler: %v", h)
	}
	// Outcomes by job type; a type without a handler is "other", so that
	// clients cannot mint time series.
	const jobs = "sluice_worker_jobs_total"
	for _, c := range []struct {
		outcome, jobType string
		want             float64
	}{
		{"dead", "bad-input", 1}, {"retried", "always", 2}, {"dead", "always", 1},
		{"retried", "panics", 1}, {"done", "panics", 1}, {"retried", "other", 4}, {"dead", "other", 1},
	} {
		testenv.WaitFor(t, 5*time.Second, c.outcome+" "+c.jobType+" counted", func() bool {
			return testenv.Metric(t, w.Registry(), jobs, "outcome", c.outcome, "type", c.jobType) == c.want
		})
	}
	if n := testenv.Metric(t, w.Registry(), jobs, "type", "nobody-handles-this"); n != 0 {
		t.Fatalf("an unregistered type got a series of its own (%v)", n)
	}
	if n := testenv.Metric(t, w.Registry(), "sluice_worker_execution_seconds", "type", "always"); n != 3 {
		t.Fatalf("execution histogram counted %v runs of \"always\", want 3", n)
	}
	// Enqueue to done counts successes only: x1, on its second attempt.
	if n := testenv.Metric(t, w.Registry(), "sluice_worker_enqueue_to_done_seconds"); n != 1 {
		t.Fatalf("enqueue-to-done histogram counted %v jobs, want 1 (x1's success)", n)
	}
}

// An envelope that cannot be read (it came to Redis another way than the
// relay, or was damaged there) is read as the job is claimed; the job is
// dead at its first attempt with the reason as its last error, and the
// worker goes on with the next job: no later attempt would read it better.
func TestAnUnreadableEnvelopeIsDeadAtOnce(t *testing.T) {
	b := newBed(t)
	ran := make(chan string, 1)
	b.start(t, nil, func(w *worker.Worker) {
		w.Handle("fine", worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
			ran <- j.ID
			return nil, nil
		}))
	})
	bad := queue.Item{ID: "garbled", Group: "garbled", Topic: "jobs", Weight: 1, Envelope: []byte(`{"id":"garbled","type":`)}
	if _, err := b.pool.Enqueue(context.Background(), 1, []queue.Item{bad}, time.Now()); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, job.Job{ID: "after", Type: "fine"})
	if h := b.waitState(t, "garbled", "garbled", "dead"); h["attempts"] != "1" || !strings.Contains(h["last_error"], "envelope") {
		t.Fatalf("an unreadable envelope: %v", h)
	}
	if id := <-ran; id != "after" {
		t.Fatalf("ran %q", id)
	}
}

func TestGracefulShutdownHandsBackWithoutFailing(t *testing.T) {
	b := newBed(t)
	started := make(chan struct{}, 1)
	stop := b.start(t, nil, func(w *worker.Worker) {
		w.Handle("slow", worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			started <- struct{}{}
			<-ctx.Done() // runs past the drain deadline
			return nil, ctx.Err()
		}))
	})
	b.enqueue(t, job.Job{ID: "s1", Type: "slow", Group: "g"})
	<-started
	stop()
	k := b.keys(b.layout.PartitionOf("g"))
	ctx := context.Background()
	entries, _ := b.redis.Client().LRange(ctx, k.Lane(queue.LaneOf("g", "", "jobs", 0)), 0, -1).Result()
	var back queue.ParsedEntry
	if len(entries) == 1 {
		back, _ = queue.ParseEntry(entries[0])
	}
	if len(entries) != 1 || back.ID != "s1" || back.Attempts != 0 {
		t.Fatalf("after shutdown: lane %q; want the job back on its lane, attempt not counted", entries)
	}
	if h := b.jobHash(t, "s1", "g"); h["state"] == "dead" || h["last_error"] != "" {
		t.Fatalf("a shutdown counted as a failure: %v", h)
	}
}

func TestAnExpiredLeaseRunsAgain(t *testing.T) {
	b := newBed(t)
	b.enqueue(t, job.Job{ID: "orphan", Type: "ok", Group: "g"})
	// A worker that claimed it and died: the lease is never extended.
	part := b.layout.PartitionOf("g")
	if jobs, err := b.pool.Claim(context.Background(), queue.Queue{Topic: "jobs", Part: part}, 1, 200*time.Millisecond); err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	b.start(t, nil, func(w *worker.Worker) { w.Handle("ok", worker.Noop) })
	if h := b.waitState(t, "orphan", "g", "done"); h["attempts"] != "2" {
		t.Fatalf("after the lease expired: %v", h)
	}
}

func TestIdleWorkerStartsNewWorkWithinMilliseconds(t *testing.T) {
	b := newBed(t)
	started := make(chan time.Time, 1)
	b.start(t, nil, func(w *worker.Worker) {
		w.Handle("t", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
			started <- time.Now()
			return nil, nil
		}))
	})
	// The state measured: every partition's consumer idle, blocked on its
	// wake list.
	testenv.WaitFor(t, 5*time.Second, "the consumers to block on their wake lists", func() bool {
		info, err := b.redis.Client().Info(context.Background(), "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:"+strconv.Itoa(b.layout.Partitions)+"\r")
	})
	at := time.Now()
	b.enqueue(t, job.Job{ID: "w1", Type: "t"})
	select {
	case s := <-started:
		if d := s.Sub(at); d > 250*time.Millisecond {
			t.Fatalf("an idle worker started new work after %s", d)
		} else {
			t.Logf("idle worker started new work %s after the enqueue", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the job never started")
	}
}

// Redis restarts (AOF) while jobs run and wait: every job still completes,
// none twice.
func TestRedisRestartDuringExecutionLosesNothing(t *testing.T) {
	r := testenv.Redis(t, testenv.WithAOF())
	layout := queue.Keyspace{Stage: "test", Partitions: 2}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.LoadScripts(context.Background())
	b := &bed{redis: r, pool: p, layout: layout}
	var mu sync.Mutex
	runs := map[string]int{}
	b.start(t, func(c *worker.Config) { c.Lease = 2 * time.Second }, func(w *worker.Worker) {
		w.Handle("t", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			return nil, nil
		}))
	})
	for i := range 100 {
		b.enqueue(t, job.Job{ID: "r" + strconv.Itoa(i), Type: "t", Group: "g" + strconv.Itoa(i%5)})
	}
	// Let a few jobs run, then restart Redis under the worker.
	testenv.WaitFor(t, 10*time.Second, "some jobs to run", func() bool { mu.Lock(); defer mu.Unlock(); return len(runs) >= 5 })
	r.Stop()
	r.Restart()
	for i := range 100 {
		b.waitState(t, "r"+strconv.Itoa(i), "g"+strconv.Itoa(i%5), "done")
	}
	mu.Lock()
	defer mu.Unlock()
	// At least once: a job whose ack was lost with Redis runs again after
	// its lease; with AOF (everysec) that window is at most a second.
	if len(runs) != 100 {
		t.Fatalf("%d of 100 jobs ran", len(runs))
	}
}

func TestIdempotencyKeys(t *testing.T) {
	b := newBed(t)
	var mu sync.Mutex
	runs := map[string]int{}
	b.start(t, func(c *worker.Config) { c.Lease = time.Second }, func(w *worker.Worker) {
		w.Handle("send", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			time.Sleep(100 * time.Millisecond) // the work; another job with the key arrives meanwhile
			if strings.HasPrefix(j.ID, "fails") {
				return nil, worker.Permanent(errors.New("bad"))
			}
			return []byte("sent"), nil
		}))
	})
	// Two jobs with one key at once, a third after: one execution.
	b.enqueue(t, job.Job{ID: "a", Type: "send", IdempotencyKey: "order-1"}, job.Job{ID: "b", Type: "send", IdempotencyKey: "order-1"})
	b.waitState(t, "a", "a", "done")
	b.waitState(t, "b", "b", "done")
	b.enqueue(t, job.Job{ID: "c", Type: "send", IdempotencyKey: "order-1"})
	if h := b.waitState(t, "c", "c", "done"); !strings.Contains(h["result"], "skipped") {
		t.Fatalf("a job with a completed key ran: %v", h)
	}
	mu.Lock()
	if n := runs["a"] + runs["b"] + runs["c"]; n != 1 {
		t.Fatalf("one idempotency key ran %d times: %v", n, runs)
	}
	mu.Unlock()
	// A failure frees the key for the next job.
	b.enqueue(t, job.Job{ID: "fails1", Type: "send", IdempotencyKey: "order-2"})
	b.waitState(t, "fails1", "fails1", "dead")
	b.enqueue(t, job.Job{ID: "d", Type: "send", IdempotencyKey: "order-2"})
	if h := b.waitState(t, "d", "d", "done"); h["result"] != "sent" {
		t.Fatalf("after a failed run the key stayed taken: %v", h)
	}
}

// Regression (make chaos, 2026-11-25: two keys ran to a 2xx twice): a job
// whose batch the reaper takes back while its handler runs, and whose
// handler still answers success, records its idempotency key done, so
// that its next attempt skips it instead of running it again. With room
// for two jobs the worker claims the next attempt itself while the first
// still runs: each attempt is held on its own, so the first is still
// found lost (and cut short) when its batch is gone.
func TestALostLeaseStillRecordsTheIdempotencyKey(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run("workers="+strconv.Itoa(workers), func(t *testing.T) {
			b := newBed(t)
			var mu sync.Mutex
			runs := 0
			started := make(chan struct{}, 1)
			// Without prefetch, one slot: the next attempt cannot start beside the first.
			b.start(t, func(c *worker.Config) { c.Lease, c.Workers, c.Prefetch = time.Second, workers, 0 }, func(w *worker.Worker) {
				w.Handle("send", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
					mu.Lock()
					runs++
					first := runs == 1
					mu.Unlock()
					if first {
						started <- struct{}{}
						<-ctx.Done() // the worker learns the lease is lost and cuts the run short
					}
					return []byte("sent"), nil // the side effect happened all the same
				}))
			})
			b.enqueue(t, job.Job{ID: "once", Type: "send", Group: "g", IdempotencyKey: "order-9"})
			<-started
			// The reaper, as a Redis outage longer than the lease leaves
			// it: the batch goes back to its lane, the attempt counted.
			// The worker keeps extending the lease: expire it until a
			// reap lands before the next extension.
			q := queue.Queue{Topic: "jobs", Part: b.layout.PartitionOf("g")}
			leases := b.keys(q.Part).Leases()
			testenv.WaitFor(t, 5*time.Second, "a reap of the running job's batch", func() bool {
				batches, err := b.redis.Client().ZRange(context.Background(), leases, 0, -1).Result()
				if err != nil || len(batches) != 1 {
					return false
				}
				b.redis.Client().ZAddXX(context.Background(), leases, redis.Z{Score: 1, Member: batches[0]})
				n, _, err := b.pool.Reap(context.Background(), q, 10, queue.DeadLimits{Max: 10, Keep: time.Hour}, nil)
				return n == 1 && err == nil
			})
			if h := b.waitState(t, "once", "g", "done"); !strings.Contains(h["result"], "skipped") || h["attempts"] != "2" {
				t.Fatalf("the second attempt: %v, want it skipped by the key the first recorded", h)
			}
			mu.Lock()
			defer mu.Unlock()
			if runs != 1 {
				t.Fatalf("the job ran %d times", runs)
			}
		})
	}
}

// The coordinator's command resizes a partition's pool at run time; the
// count is checkpointed and a restarted worker resumes it.
func TestResizeByCommandIsCheckpointedAndRestored(t *testing.T) {
	b := newBed(t)
	var running, peak atomic.Int32
	release := make(chan struct{})
	handler := worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer running.Add(-1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	var w *worker.Worker
	stop := b.start(t, func(c *worker.Config) { c.Workers = 2; c.Serve = []int{0, 1} }, func(wk *worker.Worker) {
		w = wk
		wk.Handle("hold", handler)
	})
	part := b.layout.PartitionOf("g")
	for i := range 10 {
		b.enqueue(t, job.Job{ID: "h" + strconv.Itoa(i), Type: "hold", Group: "g"})
	}
	testenv.WaitFor(t, 10*time.Second, "2 jobs running", func() bool { return running.Load() == 2 })
	cmd := `{"type":"SCALE_UP","partition":` + strconv.Itoa(part) + `,"targetWorkers":5,"reason":"PWQD threshold exceeded for 3 consecutive cycles"}`
	if err := b.redis.Client().RPush(context.Background(), b.layout.PartKeys(part).Cmd(), cmd).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "5 jobs running after SCALE_UP", func() bool { return running.Load() == 5 })
	if w.Workers(part) != 5 || peak.Load() != 5 {
		t.Fatalf("after SCALE_UP: pool %d, peak %d", w.Workers(part), peak.Load())
	}
	close(release)
	stop()
	// A new worker resumes the checkpointed count.
	b.start(t, func(c *worker.Config) { c.Workers = 2 }, func(wk *worker.Worker) {
		w = wk
		wk.Handle("hold", handler)
	})
	testenv.WaitFor(t, 10*time.Second, "the restarted worker to resume 5", func() bool { return w.Workers(part) == 5 })
	if err := w.SetWorkers(context.Background(), part, 0); err == nil {
		t.Fatal("SetWorkers(0) accepted")
	}
}

// Prefetch follows the run time: fast jobs are claimed ahead of the free
// slots, in batches; slow ones are not, so one process does not hoard
// them out of the fair order.
func TestPrefetchClaimsAheadOnlyForFastJobs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		run      time.Duration
		jobs     int
		ahead    bool // some handler must see more leases than slots
		maxLease int  // no handler may see more
	}{
		// Fast: the slots, the prefetch, a claim's overlap, and done jobs
		// whose acks the acker gathers for one call (up to maxAckBatch,
		// within AckLinger): their leases end with that call.
		{name: "fast", run: 0, jobs: 300, ahead: true, maxLease: 4 + 64 + 32 + 256},
		// 2 slots x 50 ms / 300 ms: nothing waits. A job whose ack is on
		// its way may overlap the next claim: 2 x slots at most.
		{name: "slow", run: 300 * time.Millisecond, jobs: 8, ahead: false, maxLease: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t)
			workers := 4
			if tc.run > 0 {
				workers = 2
			}
			part := b.layout.PartitionOf("g")
			stats := b.keys(part).Stats()
			var most atomic.Int64
			b.start(t, func(c *worker.Config) {
				c.Workers, c.Prefetch, c.PrefetchWait = workers, 64, 50*time.Millisecond
			}, func(w *worker.Worker) {
				w.Handle("work", worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
					n, err := b.redis.Client().HGet(ctx, stats, "inflight").Int64()
					if err != nil {
						return nil, err
					}
					for old := most.Load(); n > old && !most.CompareAndSwap(old, n); old = most.Load() {
					}
					time.Sleep(tc.run) // the job's work
					return nil, nil
				}))
			})
			jobs := make([]job.Job, tc.jobs)
			for i := range jobs {
				jobs[i] = job.Job{ID: "j" + strconv.Itoa(i), Type: "work", Group: "g"}
			}
			b.enqueue(t, jobs...)
			testenv.WaitFor(t, 30*time.Second, "every job done", func() bool {
				n, _ := b.redis.Client().HGet(context.Background(), stats, "done").Int()
				return n == tc.jobs
			})
			got := int(most.Load())
			if tc.ahead && got <= workers {
				t.Errorf("fast jobs: at most %d leases seen with %d slots; prefetch never claimed ahead", got, workers)
			}
			if got > tc.maxLease {
				t.Errorf("%d leases held at once, want at most %d", got, tc.maxLease)
			}
			t.Logf("%s jobs: at most %d leases held with %d slots", tc.name, got, workers)
		})
	}
}

// The fairness scenario, end to end through a running worker: one
// partition holds a 100,000-job group; 20 groups of 10 enqueued after it
// has been running all complete while most of the big group still waits.
func TestSmallGroupsFinishWhileAHugeGroupWaits(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	// Every group on one partition: names chosen by the layout's hash.
	part := b.layout.PartitionOf("big")
	var small []string
	for i := 0; len(small) < 20; i++ {
		if g := "small" + strconv.Itoa(i); b.layout.PartitionOf(g) == part {
			small = append(small, g)
		}
	}
	const bigJobs = 100000
	items := make([]queue.Item, 0, 1000)
	for i := range bigJobs {
		id := "big-" + strconv.Itoa(i)
		env := (&job.Job{ID: id, Type: "noop", Group: "big", Topic: "jobs"}).AppendJSON(nil)
		items = append(items, queue.Item{ID: id, Group: "big", Topic: "jobs", Weight: 1, Envelope: env})
		if len(items) == cap(items) {
			if _, err := b.pool.Enqueue(ctx, 1, items, time.Now()); err != nil {
				t.Fatal(err)
			}
			items = items[:0]
		}
	}
	stats := b.keys(part).Stats()
	done := func() int { n, _ := b.redis.Client().HGet(ctx, stats, "done").Int(); return n }
	b.start(t, nil, func(w *worker.Worker) { w.Handle("noop", worker.Noop) })
	// The big group runs alone first, so its virtual time moves ahead.
	testenv.WaitFor(t, time.Minute, "the big group to be under way", func() bool { return done() >= 1000 })
	var jobs []job.Job
	for _, g := range small {
		for i := range 10 {
			jobs = append(jobs, job.Job{ID: g + "-" + strconv.Itoa(i), Type: "noop", Group: g})
		}
	}
	b.enqueue(t, jobs...)
	testenv.WaitFor(t, time.Minute, "every small group done", func() bool {
		for _, g := range small {
			n, _ := b.redis.Client().HGet(ctx, b.keys(part).Group(g), "done").Int()
			if n != 10 {
				return false
			}
		}
		return true
	})
	bigDone, _ := b.redis.Client().HGet(ctx, b.keys(part).Group("big"), "done").Int()
	if bigDone >= bigJobs/2 {
		t.Fatalf("the small groups finished only after %d of the big group's %d jobs", bigDone, bigJobs)
	}
	if left, _ := b.redis.Client().LLen(ctx, b.keys(part).Lane(queue.LaneOf("big", "", "jobs", 0))).Result(); left == 0 {
		t.Fatal("the big group was drained")
	}
	t.Logf("20 small groups done while the big group had done %d of %d", bigDone, bigJobs)
}

// TestAPlainJobLeavesNothingBehind: without retain, a job that succeeded
// keeps no record in Redis, only counters; one that failed an attempt
// first keeps its record (its last error) until it expires.
func TestAPlainJobLeavesNothingBehind(t *testing.T) {
	b := newBed(t)
	var calls atomic.Int64
	b.start(t, func(c *worker.Config) { c.Retain = nil }, func(w *worker.Worker) {
		w.Handle("ok", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) { return []byte(`"r"`), nil }))
		w.Handle("flaky", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
			if calls.Add(1) == 1 {
				return nil, errors.New("first try fails")
			}
			return nil, nil
		}))
	})
	b.enqueue(t, job.Job{ID: "plain", Type: "ok"}, job.Job{ID: "flaky", Type: "flaky"})
	h := b.waitState(t, "flaky", "", "done")
	if h["attempts"] != "2" || h["last_error"] != "first try fails" {
		t.Fatalf("the record of a job that failed once: %v", h)
	}
	ctx := context.Background()
	testenv.WaitFor(t, 10*time.Second, "both jobs counted done", func() bool {
		done := 0
		for p := range b.layout.Partitions {
			n, _ := b.redis.Client().HGet(ctx, b.keys(p).Stats(), "done").Int()
			done += n
		}
		return done == 2
	})
	if h := b.jobHash(t, "plain", ""); len(h) != 0 {
		t.Fatalf("a plain job that succeeded left a record: %v", h)
	}
}

// Regression (issue 32: a duplicate sat "delayed / deferred" for a whole
// lease, 30 s, after the job that held its idempotency key had completed):
// a job deferred behind another job's run of its key is woken when that
// run ends, and skipped at once, not a lease later. The lease here is 5 s,
// the deferral before the fix.
func TestADuplicateIsSkippedAsSoonAsItsKeyCompletes(t *testing.T) {
	b := newBed(t)
	var mu sync.Mutex
	runs := map[string]int{}
	var ended time.Time
	b.start(t, func(c *worker.Config) { c.Lease = 5 * time.Second }, func(w *worker.Worker) {
		w.Handle("send", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			time.Sleep(300 * time.Millisecond) // the duplicate starts meanwhile and finds the key running
			mu.Lock()
			defer mu.Unlock()
			runs[j.ID]++
			ended = time.Now()
			return []byte("sent"), nil
		}))
	})
	// Both claimed in one batch, run side by side: one holds the key.
	b.enqueue(t, job.Job{ID: "dup-a", Type: "send", IdempotencyKey: "order-7"}, job.Job{ID: "dup-b", Type: "send", IdempotencyKey: "order-7"})
	ha := b.waitState(t, "dup-a", "dup-a", "done")
	hb := b.waitState(t, "dup-b", "dup-b", "done")
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1 {
		t.Fatalf("one idempotency key ran %v", runs)
	}
	skipped := hb
	if _, ran := runs["dup-b"]; ran {
		skipped = ha
	}
	if !strings.Contains(skipped["result"], "skipped") {
		t.Fatalf("the duplicate: %v, want skipped", skipped)
	}
	doneMS, _ := strconv.ParseInt(skipped["done_ms"], 10, 64)
	after := time.UnixMilli(doneMS).Sub(ended)
	t.Logf("the duplicate was skipped %v after the run that held its key returned (lease %v)", after, 5*time.Second)
	if after > 500*time.Millisecond {
		t.Fatalf("the duplicate settled %v after its key completed; want it woken at once, not a lease (5s) later", after)
	}
}

// Cancel of a running job (issue 32): the worker learns of it at its next
// lease extension (every Lease/3), cancels the handler's context with a
// cause that says so, and settles the job cancelled, not failed: it is
// not retried, and its lookup says cancelled. A waiting job's cancel drops
// it before it starts. The time from the cancel call to the handler's
// ctx.Done() is at most one extension interval, plus slack.
func TestCancelOfARunningJobCancelsItsHandler(t *testing.T) {
	b := newBed(t)
	const lease = 3 * time.Second // extensions every second
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	stopped := make(chan time.Time, 1)
	var cause atomic.Value
	b.start(t, func(c *worker.Config) { c.Lease, c.Workers, c.Prefetch = lease, 1, 0 }, func(w *worker.Worker) {
		w.Handle("block", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			runs.Add(1)
			started <- struct{}{}
			<-ctx.Done()
			stopped <- time.Now()
			cause.Store(context.Cause(ctx).Error())
			return nil, ctx.Err()
		}))
	})
	b.enqueue(t, job.Job{ID: "long", Type: "block", Group: "g"})
	<-started
	ctx := context.Background()
	sent := time.Now()
	out, _, err := b.pool.CancelJob(ctx, queue.JobLookup{Topic: "jobs", ID: "long", Group: "g"}, false, time.Now())
	if err != nil || out != queue.CancelRequested {
		t.Fatalf("cancel: %q %v", out, err)
	}
	var took time.Duration
	select {
	case at := <-stopped:
		took = at.Sub(sent)
	case <-time.After(2 * lease):
		t.Fatal("the handler's context was not cancelled")
	}
	t.Logf("cancel to the handler's ctx.Done(): %v (extension interval %v)", took, lease/3)
	if took > lease/3+500*time.Millisecond {
		t.Fatalf("the handler stopped %v after the cancel; want within one extension interval (%v) plus slack", took, lease/3)
	}
	if c, _ := cause.Load().(string); !strings.Contains(c, "cancelled by an operator") {
		t.Fatalf("the context's cause: %q", c)
	}
	h := b.waitState(t, "long", "g", "cancelled")
	if h["attempts"] != "1" {
		t.Fatalf("the cancelled job's record: %v", h)
	}
	w, err := b.pool.FindJob(ctx, queue.JobLookup{Topic: "jobs", ID: "long", Group: "g"})
	if err != nil || w.Where != queue.WhereCancelled {
		t.Fatalf("the lookup of the cancelled job: %+v %v", w, err)
	}
	if st, err := b.pool.GroupStatus(ctx, "jobs", "g"); err != nil || st.Cancelled != 1 || st.Running != 0 || st.Failed != 0 {
		t.Fatalf("its group: %+v %v", st, err)
	}
	// Not retried: a job after it runs, and it does not.
	b.enqueue(t, job.Job{ID: "next", Type: "block", Group: "g"})
	<-started
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs: the cancelled job ran again", n)
	}
}
