package queue

import (
	"context"
	"testing"
	"time"
)

// A job whose worker dies running it (os.Exit, a native crash, an OOM
// kill) is never acked or failed: only the reaper sees it. A reap counts
// an attempt, and the reap that spends the job's last attempt makes it
// dead, with the bookkeeping of a failed last attempt, instead of putting
// it back on its lane for ever (issue 29).
func TestAReapThatSpendsTheLastAttemptMakesTheJobDead(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	rdb := r.Client()
	k := p.Keyspace().Keys(jq(0))
	enqueueOK(t, p, 1, []Item{item("plain", ""), item("grouped", "g")}, now)
	limits := DeadLimits{Max: 100, Keep: time.Hour}
	// Read from the envelope, as the worker reads max_attempts.
	twice := func(env string) int {
		if env == "" {
			t.Error("the limit was asked without the envelope")
		}
		return 2
	}
	for attempt := 1; attempt <= 3; attempt++ {
		jobs, err := p.Claim(ctx, jq(0), 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if attempt == 3 {
			if len(jobs) != 0 {
				t.Fatalf("after 2 reaps of a job with 2 attempts it runs again: %+v", jobs)
			}
			break
		}
		if len(jobs) != 2 || jobs[0].Attempt != attempt || jobs[1].Attempt != attempt {
			t.Fatalf("claim %d: %+v", attempt, jobs)
		}
		// Never acked: the worker died. Its lease runs out.
		expireLeases(t, p, jq(0), jobs[0].Batch)
		back, died, err := p.Reap(ctx, jq(0), 10, limits, twice)
		if err != nil {
			t.Fatal(err)
		}
		if want := 2 * (2 - attempt); back != want || died != 2-want {
			t.Fatalf("reap %d: %d back, %d dead; want %d back", attempt, back, died, want)
		}
	}
	const why = "lease expired: the worker died or stopped running it (attempt 2 of 2)"
	for _, id := range []string{"plain", "grouped"} {
		rec := rdb.HGetAll(ctx, k.Job(id)).Val()
		if rec["state"] != "dead" || rec["last_error"] != why || rec["attempts"] != "2" || rec["dead_ms"] == "" {
			t.Fatalf("%s's record: %v", id, rec)
		}
		if pe, err := ParseEntry(rec["env"]); err != nil || pe.ID != id || pe.Attempts != 2 {
			t.Fatalf("%s's entry in its record: %q %v", id, rec["env"], err)
		}
		if _, err := rdb.ZScore(ctx, k.Dead(), id).Result(); err != nil {
			t.Fatalf("%s is not in the dead set: %v", id, err)
		}
	}
	f, err := p.Funnel(ctx, jq(0))
	if err != nil {
		t.Fatal(err)
	}
	if f.Ready != 0 || f.Inflight != 0 || f.Dead != 2 || f.Milestones["jobs"][MilestoneDead] != 2 {
		t.Fatalf("funnel after the deaths: %+v", f)
	}
	if st := rdb.HGetAll(ctx, k.Stats()).Val(); st["dead"] != "2" {
		t.Fatalf("stats: %v", st)
	}
	g := rdb.HGetAll(ctx, k.Group("g")).Val()
	if g["running"] != "0" || g["dead"] != "1" || g["failed"] != "1" {
		t.Fatalf("group after the death: %v", g)
	}
	if res := rdb.HGet(ctx, k.Results("g"), "grouped").Val(); res != "dead 2 "+why {
		t.Fatalf("group result %q", res)
	}
	if n := rdb.Exists(ctx, k.Leases(), k.Lane("g/g")).Val(); n != 0 {
		t.Fatal("a lease or the group's lane is left")
	}
	// An operator's replay puts a dead job back, as after any death.
	if res, err := p.ReplayDead(ctx, jq(0), "plain", now); res != ReplayDone || err != nil {
		t.Fatalf("replay: %d %v", res, err)
	}
}

// Leases are judged by Redis's clock: a worker whose clock runs minutes
// ahead does not reap a batch another worker holds under a live lease, and
// a batch it claims lives its lease, neither 5 minutes more nor less
// (issue 29).
func TestLeasesGoByRedisClockNotTheWorkers(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	ahead, behind := 5*time.Minute, -5*time.Minute
	skewed := func(by time.Duration) *Pool {
		s, err := NewPool(PoolConfig{Keyspace: p.Keyspace(), Addr: r.Addr(), Now: func() time.Time { return time.Now().Add(by) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	fast, slow := skewed(ahead), skewed(behind)
	limits := DeadLimits{Max: 100, Keep: time.Hour}
	enqueueOK(t, p, 1, []Item{item("a", ""), item("b", ""), item("c", "")}, now)

	held, err := p.Claim(ctx, jq(0), 1, 10*time.Second)
	if err != nil || len(held) != 1 {
		t.Fatalf("claim: %+v %v", held, err)
	}
	// The worker 5 minutes ahead reaps: the lease is live.
	if back, died, err := fast.Reap(ctx, jq(0), 10, limits, nil); back != 0 || died != 0 || err != nil {
		t.Fatalf("a worker 5 min ahead reaped a live lease: %d back, %d dead, %v", back, died, err)
	}
	if ok, err := p.Ack(ctx, jq(0), Done{Job: held[0]}, now, time.Hour); !ok || err != nil {
		t.Fatalf("the holder's ack: %v %v", ok, err)
	}

	// A batch claimed by the worker 5 minutes behind is not born expired.
	early, err := slow.Claim(ctx, jq(0), 1, 10*time.Second)
	if err != nil || len(early) != 1 {
		t.Fatalf("claim: %+v %v", early, err)
	}
	if back, _, err := p.Reap(ctx, jq(0), 10, limits, nil); back != 0 || err != nil {
		t.Fatalf("a batch claimed by a worker 5 min behind was reaped at once: %d %v", back, err)
	}
	if ok, err := slow.Ack(ctx, jq(0), Done{Job: early[0]}, now, time.Hour); !ok || err != nil {
		t.Fatalf("the holder's ack: %v %v", ok, err)
	}

	// A batch claimed by the worker 5 minutes ahead lives its lease, and
	// no more: it is reaped once Redis's clock passes it.
	const lease = 300 * time.Millisecond
	claimed := time.Now()
	late, err := fast.Claim(ctx, jq(0), 1, lease)
	if err != nil || len(late) != 1 {
		t.Fatalf("claim: %+v %v", late, err)
	}
	for {
		back, _, err := p.Reap(ctx, jq(0), 10, limits, nil)
		if err != nil {
			t.Fatal(err)
		}
		if back == 1 {
			break
		}
		if time.Since(claimed) > 10*time.Second {
			t.Fatalf("a batch claimed by a worker 5 min ahead with a lease of %s is not reaped after %s", lease, time.Since(claimed))
		}
		time.Sleep(10 * time.Millisecond) // polling the reaper, as the maintainer does
	}
	if took := time.Since(claimed); took < lease {
		t.Fatalf("reaped after %s, within its lease of %s", took, lease)
	}
}

// A retry is due its backoff after the failure by Redis's clock, whatever
// the failing worker's clock says, and so is a deferral: a worker 5
// minutes ahead delayed its retries and deferrals by 5 minutes when the
// due time was its own (the chaos suite's skewed worker left always-failing
// jobs "retrying", and keyed twins deferred, past the drain), and one
// behind ran them at once.
func TestARetryIsDueByRedisClockNotTheWorkers(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	for _, skew := range []time.Duration{5 * time.Minute, -5 * time.Minute} {
		id := "skew" + skew.String()
		if _, err := p.Enqueue(ctx, 1, []Item{item(id, "")}, time.Now()); err != nil {
			t.Fatal(err)
		}
		jobs, err := p.Claim(ctx, jq(0), 1, time.Minute)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		workerNow := time.Now().Add(skew)
		failedAt := time.Now()
		if res, err := p.Fail(ctx, jq(0), Failure{Job: jobs[0], Cause: "boom", NextTry: workerNow.Add(2 * time.Second)}, workerNow, DeadLimits{Max: 10, Keep: time.Hour}); res != FailRetrying || err != nil {
			t.Fatal(res, err)
		}
		w, err := p.FindJob(ctx, JobLookup{Topic: "jobs", ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if !dueAfter(w.Until, 2*time.Second, failedAt) {
			t.Fatalf("clock %v off: the retry is due at %v, want 2s after %v", skew, w.Until, failedAt)
		}

		deferred := "defer" + skew.String()
		if _, err := p.Enqueue(ctx, 1, []Item{item(deferred, "")}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if jobs, err = p.Claim(ctx, jq(0), 1, time.Minute); err != nil || len(jobs) != 1 || jobs[0].ID != deferred {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		workerNow, deferredAt := time.Now().Add(skew), time.Now()
		if ok, err := p.Defer(ctx, jq(0), jobs[0], workerNow.Add(3*time.Second), workerNow); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if w, err = p.FindJob(ctx, JobLookup{Topic: "jobs", ID: deferred}); err != nil {
			t.Fatal(err)
		}
		if !dueAfter(w.Until, 3*time.Second, deferredAt) {
			t.Fatalf("clock %v off: the deferral is due at %v, want 3s after %v", skew, w.Until, deferredAt)
		}
	}
}
