package worker_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// A worker cut off from Redis while a handler runs cannot extend the
// lease: it cancels the handler's context before the lease ends, with the
// reason as the context's cause, and does not record the job; once the
// lease ends the job is reaped and runs again elsewhere (at least once).
// Before issue 29 the worker only logged and ran on past its lease.
func TestAWorkerCutOffFromRedisCancelsTheHandlerBeforeTheLeaseEnds(t *testing.T) {
	b := newBed(t)
	px := testenv.NewProxy(t, b.redis.Addr())
	const lease = 2 * time.Second
	type cancelled struct {
		at    time.Time
		cause error
	}
	started := make(chan struct{}, 1)
	ended := make(chan cancelled, 1)
	b.start(t, func(c *worker.Config) { c.RedisAddr, c.Lease, c.Timeout = px.Addr(), lease, time.Minute }, func(w *worker.Worker) {
		w.Handle("long", worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			started <- struct{}{}
			<-ctx.Done()
			ended <- cancelled{time.Now(), context.Cause(ctx)}
			return nil, nil // as a handler that did its work all the same: not recorded
		}))
	})
	b.enqueue(t, job.Job{ID: "cut", Type: "long", Group: "g"})
	<-started
	px.Close() // dials refused from now on
	// The lease's deadline as Redis holds it now that no extension can
	// reach it (Redis's clock is this host's).
	k := b.keys(b.layout.PartitionOf("g"))
	leased, err := b.redis.Client().ZRangeWithScores(context.Background(), k.Leases(), 0, -1).Result()
	if err != nil || len(leased) != 1 {
		t.Fatalf("leases: %v %v", leased, err)
	}
	deadline := time.UnixMilli(int64(leased[0].Score))
	select {
	case c := <-ended:
		if !c.at.Before(deadline) {
			t.Fatalf("the handler was cancelled at %s, after its lease ended at %s", c.at.Format(time.StampMilli), deadline.Format(time.StampMilli))
		}
		if c.cause == nil || !strings.Contains(c.cause.Error(), "lease could not be extended since") {
			t.Fatalf("cancelled with cause %v", c.cause)
		}
		t.Logf("cancelled %s before the lease's end: %v", deadline.Sub(c.at).Round(time.Millisecond), c.cause)
	case <-time.After(time.Until(deadline) + 2*time.Second):
		t.Fatalf("the handler still runs %s after its lease ended", 2*time.Second)
	}
	if h := b.jobHash(t, "cut", "g"); h["state"] != "" {
		t.Fatalf("the cut-off worker recorded the job: %v", h)
	}
	// Another worker, on Redis directly, reaps it once the lease ends and
	// runs it again.
	b.start(t, nil, func(w *worker.Worker) { w.Handle("long", worker.Noop) })
	if h := b.waitState(t, "cut", "g", "done"); h["attempts"] != "2" {
		t.Fatalf("the rerun: %v, want done at attempt 2", h)
	}
}

// A worker whose clock runs 5 minutes ahead (the --clock-skew test knob)
// reaps no batch another worker holds under a live lease: leases go by
// Redis's clock. Before issue 29 it reaped the running job at its next
// maintenance tick and ran it a second time.
func TestAWorkerWithItsClockAheadReapsNoLiveLease(t *testing.T) {
	b := newBed(t)
	var mu sync.Mutex
	runs := map[string]int{}
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	handler := func(name string) worker.Handler {
		return worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			mu.Lock()
			runs[name]++
			mu.Unlock()
			select {
			case started <- struct{}{}:
			default:
			}
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		})
	}
	b.start(t, nil, func(w *worker.Worker) { w.Handle("slow", handler("exact")) })
	b.enqueue(t, job.Job{ID: "held", Type: "slow", Group: "g"})
	<-started
	b.start(t, func(c *worker.Config) { c.ClockSkew = 5 * time.Minute }, func(w *worker.Worker) { w.Handle("slow", handler("ahead")) })
	// The lease is 3 s; the skewed worker's maintainer reaps every 20 ms,
	// and before issue 29 took the batch at its first tick. Nothing tells
	// a tick that reaps nothing: watch a second of them (50), in which the
	// batch must stay leased.
	k := b.keys(b.layout.PartitionOf("g"))
	held, err := b.redis.Client().ZRange(context.Background(), k.Leases(), 0, -1).Result()
	if err != nil || len(held) != 1 {
		t.Fatalf("leases: %v %v", held, err)
	}
	watchUntil := time.Now().Add(time.Second)
	for time.Now().Before(watchUntil) {
		if _, err := b.redis.Client().ZScore(context.Background(), k.Leases(), held[0]).Result(); err != nil {
			t.Fatalf("the running job's batch left the leases while its holder runs it: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // one maintenance tick of the skewed worker
	}
	close(release)
	h := b.waitState(t, "held", "g", "done")
	mu.Lock()
	defer mu.Unlock()
	if h["attempts"] != "1" || runs["exact"] != 1 || runs["ahead"] != 0 {
		t.Fatalf("record %v, runs %v: want one run, by the worker whose clock is right", h, runs)
	}
}

// A job whose worker died running it at its last attempt is made dead by
// the reaper, by the limit the worker reads from its envelope (or its
// type's default), and is not run again; one with attempts left runs
// again (issue 29).
func TestTheReaperKillsAJobWhoseWorkerDiedAtItsLastAttempt(t *testing.T) {
	b := newBed(t)
	b.enqueue(t,
		job.Job{ID: "once", Type: "crash", Group: "g", MaxAttempts: 1},
		job.Job{ID: "typed", Type: "crash1", Group: "g"},
		job.Job{ID: "again", Type: "crash", Group: "g", MaxAttempts: 2})
	// A worker that claimed them and died: the lease is never extended.
	q := queue.Queue{Topic: "jobs", Part: b.layout.PartitionOf("g")}
	if jobs, err := b.pool.Claim(context.Background(), q, 3, time.Millisecond); err != nil || len(jobs) != 3 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	var mu sync.Mutex
	var ran []string
	record := worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		ran = append(ran, j.ID)
		mu.Unlock()
		return nil, nil
	})
	b.start(t, nil, func(w *worker.Worker) {
		w.Handle("crash", record)
		w.Handle("crash1", record, worker.TypeMaxAttempts(1))
	})
	for _, id := range []string{"once", "typed"} {
		h := b.waitState(t, id, "g", "dead")
		if want := "lease expired: the worker died or stopped running it (attempt 1 of 1)"; h["last_error"] != want || h["attempts"] != "1" {
			t.Fatalf("%s: %v, want last_error %q", id, h, want)
		}
	}
	if h := b.waitState(t, "again", "g", "done"); h["attempts"] != "2" {
		t.Fatalf("again: %v, want done at attempt 2", h)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 1 || ran[0] != "again" {
		t.Fatalf("ran %v, want only the job with an attempt left", ran)
	}
}

// A lease whose extensions failed while Redis was stopped is extended as
// soon as Redis answers again, not given up: the handler that runs under
// it is not cancelled, and its keyed job runs once. Redis stops right
// after an extension, for two extension ticks (a third of the lease
// apart), and is back a while before the worker would give the lease up
// (a tenth of the lease before its end). Before: the keeper tried again
// only at its next tick, after the give-up; the chaos suite's "stop Redis
// 2s" with a 3 s lease so cancelled a keyed job's handler whose HTTP call
// had answered 2xx, the failed run freed the key, and the reaped job ran
// to a 2xx again at attempt 2.
func TestALeaseIsExtendedOnceRedisAnswersAgainNotGivenUp(t *testing.T) {
	b := newBedOf(t, 2, testenv.WithAOF())
	// Long enough that the give-up comes 1.2 s after Redis is back.
	const lease = 6 * time.Second
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	cancelled := make(chan error, 1)
	b.start(t, func(c *worker.Config) { c.Lease, c.Timeout = lease, time.Minute }, func(w *worker.Worker) {
		w.Handle("send", worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			if runs.Add(1) > 1 {
				return []byte("sent again"), nil
			}
			started <- struct{}{}
			select {
			case <-release:
				return []byte("sent"), nil
			case <-ctx.Done():
				cancelled <- context.Cause(ctx)
				return nil, ctx.Err()
			}
		}))
	})
	b.enqueue(t, job.Job{ID: "a", Type: "send", Group: "g", IdempotencyKey: "order-1"})
	<-started

	ctx := context.Background()
	rc := b.redis.Client()
	leases := b.keys(b.layout.PartitionOf("g")).Leases()
	// The batch's deadline by Redis's clock, Unix ms (0 when it cannot be
	// read: a connection of the test's client lost to the restart).
	deadline := func() float64 {
		got, err := rc.ZRangeWithScores(ctx, leases, 0, -1).Result()
		if err != nil || len(got) != 1 {
			return 0
		}
		return got[0].Score
	}
	// Right after an extension: the worker's last answered one.
	first := deadline()
	var last float64
	testenv.WaitFor(t, lease, "the lease to be extended", func() bool { last = deadline(); return last > first })
	extended := time.Now()
	b.redis.Stop()
	// Down across the next two ticks (lease/3 apart), as the chaos suite's
	// 2 s stop was with its 3 s lease; the stop's length is the fault's.
	time.Sleep(time.Until(extended.Add(2*lease/3 + 100*time.Millisecond)))
	b.redis.Restart()
	back := time.Now()
	giveUp := extended.Add(lease - lease/10)
	if !back.Before(giveUp.Add(-500 * time.Millisecond)) {
		t.Fatalf("Redis took until %s after the extension to come back, too close to the give-up at %s to tell", back.Sub(extended), giveUp.Sub(extended))
	}
	testenv.WaitFor(t, lease, "the lease to be extended after Redis came back", func() bool {
		select {
		case cause := <-cancelled:
			t.Fatalf("the handler was cancelled %s after Redis came back: %v", time.Since(back).Round(time.Millisecond), cause)
		default:
		}
		return deadline() > last
	})
	t.Logf("lease extended %s after Redis answered again (the give-up was due %s after)", time.Since(back).Round(time.Millisecond), giveUp.Sub(back).Round(time.Millisecond))
	// Past the give-up: the handler still runs.
	time.Sleep(time.Until(giveUp.Add(200 * time.Millisecond)))
	select {
	case cause := <-cancelled:
		t.Fatalf("the handler was cancelled: %v", cause)
	default:
	}
	close(release)
	if h := b.waitState(t, "a", "g", "done"); h["attempts"] != "1" {
		t.Errorf("done: %v, want at attempt 1", h)
	}
	idem := b.layout.PartKeys(b.layout.PartitionOf("order-1")).Idempotency("order-1")
	if mark, _ := rc.Get(ctx, idem).Result(); mark != "done:a" {
		t.Errorf("key mark %q, want done:a", mark)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the keyed job ran %d times, want once", n)
	}
}

// A keyed job's run that the worker cut short because its lease could not
// be extended (Redis stopped) does not free the key: what the handler did
// is unknown (it may have done its work, as an HTTP call answered 2xx whose
// answer the cancellation beat), so its running mark is left to expire,
// and the job's next attempt waits for that instead of running at once.
// Before: the cut-short run was recorded as failed once Redis was back,
// which freed the key, and the reaped job ran again right away (the chaos
// suite's keys run to a 2xx twice 0.6-0.8 s apart).
func TestARunCutShortByALostLeaseLeavesItsKeyHeld(t *testing.T) {
	b := newBedOf(t, 2, testenv.WithAOF())
	const lease, timeout = 2 * time.Second, 3 * time.Second // the mark holds 5 s
	var (
		mu   sync.Mutex
		runs []time.Time
	)
	started := make(chan struct{}, 1)
	cut := make(chan error, 1)
	b.start(t, func(c *worker.Config) { c.Lease, c.Timeout = lease, timeout }, func(w *worker.Worker) {
		w.Handle("send", worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			mu.Lock()
			runs = append(runs, time.Now())
			n := len(runs)
			mu.Unlock()
			if n > 1 {
				return []byte("sent again"), nil
			}
			// Its work is done; its answer comes after the cancellation.
			started <- struct{}{}
			<-ctx.Done()
			cut <- context.Cause(ctx)
			return nil, ctx.Err()
		}))
	})
	enqueued := time.Now()
	b.enqueue(t, job.Job{ID: "a", Type: "send", Group: "g", IdempotencyKey: "order-1"})
	<-started
	b.redis.Stop()
	select {
	case cause := <-cut:
		if cause == nil || !strings.Contains(cause.Error(), "lease could not be extended since") {
			t.Fatalf("cut short with cause %v", cause)
		}
	case <-time.After(2 * lease):
		t.Fatal("the handler was not cut short while Redis was down")
	}
	b.redis.Restart()
	// The reaper returns the job (its lease ended while Redis was down);
	// its next attempt must wait for the mark.
	h := b.waitState(t, "a", "g", "done")
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 2 || h["attempts"] != "2" {
		t.Fatalf("runs at %v, record %v: want a second run, done at attempt 2", runs, h)
	}
	if after := runs[1].Sub(enqueued); after < lease+timeout {
		t.Fatalf("the job ran again %s after it was enqueued, before the cut-short run's mark (held %s from its begin) expired",
			after.Round(time.Millisecond), lease+timeout)
	}
	t.Logf("ran again %s after the first run began (the mark held %s)", runs[1].Sub(runs[0]).Round(time.Millisecond), lease+timeout)
}
