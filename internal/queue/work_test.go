package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

// onePartition is a pool with a single partition, so every group shares it.
func onePartition(t *testing.T) (*Pool, *testenv.RedisServer) {
	r := testenv.Redis(t)
	return newPool(t, 1, r.Addr(), nil), r
}

func enqueueGroup(t *testing.T, p *Pool, group string, n, weight int) {
	t.Helper()
	items := make([]Item, n)
	for i := range items {
		items[i] = item(group+"-"+strconv.Itoa(i), group)
		items[i].Weight = weight
	}
	for len(items) > 0 {
		chunk := items[:min(len(items), 1000)]
		items = items[len(chunk):]
		if _, err := p.Enqueue(context.Background(), 1, chunk, now); err != nil {
			t.Fatal(err)
		}
	}
}

// ack acks claimed jobs without results and fails the test unless each
// was still in its batch.
func ack(t *testing.T, p *Pool, part int, jobs ...Claimed) {
	t.Helper()
	done := make([]Done, len(jobs))
	for i, j := range jobs {
		done[i] = Done{Job: j}
	}
	ok, err := p.AckMany(context.Background(), jq(part), done, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range ok {
		if !o {
			t.Fatalf("ack of %s (batch %s) found it gone", jobs[i].ID, jobs[i].Batch)
		}
	}
}

// A 10,000-job group enqueued first and 20 groups of 10 after it: every
// small group completes while most of the big one still waits, and the
// big one keeps moving.
func TestClaimIsFairAcrossGroups(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "big", 10000, 1)
	// The big group runs alone for a while: its virtual time moves on, and
	// groups arriving later must enter at that time, not behind it.
	for range 10 {
		jobs, err := p.Claim(ctx, jq(0), 10, time.Minute)
		if err != nil || len(jobs) != 10 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		ack(t, p, 0, jobs...)
	}
	for g := range 20 {
		enqueueGroup(t, p, "small"+strconv.Itoa(g), 10, 1)
	}
	claimed, big := 0, 0
	left := map[string]int{}
	for g := range 20 {
		left["small"+strconv.Itoa(g)] = 10
	}
	for len(left) > 0 {
		jobs, err := p.Claim(ctx, jq(0), 16, time.Minute)
		if err != nil || len(jobs) == 0 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		for _, j := range jobs {
			claimed++
			if j.Group == "big" {
				big++
			} else if left[j.Group]--; left[j.Group] == 0 {
				delete(left, j.Group)
			}
		}
		ack(t, p, 0, jobs...)
	}
	// Fair shares: 21 groups, each small group's 10 jobs take 10 rounds.
	if claimed > 260 || big < 5 {
		t.Fatalf("the 200 small jobs took %d claims (%d from the big group): not fair", claimed, big)
	}
	t.Logf("200 small jobs done after %d claims, %d of them from the 10,000-job group", claimed, big)
}

func TestClaimHonoursWeights(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "low", 500, 1)
	enqueueGroup(t, p, "high", 500, 4)
	count := map[string]int{}
	for range 10 {
		jobs, err := p.Claim(ctx, jq(0), 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			count[j.Group]++
		}
	}
	if count["high"] < 75 || count["high"] > 85 {
		t.Fatalf("weight 4 against 1 got %v of 100", count)
	}
}

// A plain job's ack leaves nothing of it; a job that asked for retain
// gets a record with its result, kept that long; a second ack counts
// nothing.
func TestAckCountsOnceAndKeepsTheResultOnlyWhenAsked(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	rdb := r.Client()
	k := p.Keyspace().Keys(jq(0))
	enqueueGroup(t, p, "g", 2, 1)
	jobs, err := p.Claim(ctx, jq(0), 5, time.Minute)
	if err != nil || len(jobs) != 2 || jobs[0].Attempt != 1 || jobs[0].ID != "g-0" || jobs[0].Group != "g" || jobs[0].Lane != "g/g" {
		t.Fatalf("claim: %+v %v", jobs, err)
	}
	if string(jobs[0].Envelope) != string(item("g-0", "g").Envelope) {
		t.Fatalf("claimed envelope %q", jobs[0].Envelope)
	}
	if jobs[0].Batch == "" || jobs[1].Batch != jobs[0].Batch {
		t.Fatalf("one claim, one batch: %q %q", jobs[0].Batch, jobs[1].Batch)
	}
	if ok, err := p.Ack(ctx, jq(0), Done{Job: jobs[0], Result: []byte(`{"sent":true}`)}, now, time.Hour); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if ok, _ := p.Ack(ctx, jq(0), Done{Job: jobs[0]}, now, time.Hour); ok {
		t.Fatal("a second ack counted")
	}
	if n := rdb.Exists(ctx, k.Job("g-0")).Val(); n != 0 {
		t.Fatal("a plain job that succeeded has a record")
	}
	// Retain: a record with the result, kept for the retain.
	if ok, err := p.Ack(ctx, jq(0), Done{Job: jobs[1], Result: []byte(`42`), Retain: 10 * time.Minute}, now, time.Hour); !ok || err != nil {
		t.Fatalf("ack with retain: %v %v", ok, err)
	}
	h := rdb.HGetAll(ctx, k.Job("g-1")).Val()
	if h["state"] != "done" || h["result"] != "42" || h["attempts"] != "1" {
		t.Fatalf("retained record %v", h)
	}
	if ttl := rdb.TTL(ctx, k.Job("g-1")).Val(); ttl <= 9*time.Minute || ttl > 10*time.Minute {
		t.Fatalf("retained for %v, want 10m", ttl)
	}
	g := rdb.HGetAll(ctx, k.Group("g")).Val()
	if g["running"] != "0" || g["done"] != "2" {
		t.Fatalf("group after ack: %v", g)
	}
	st := rdb.HGetAll(ctx, k.Stats()).Val()
	if st["done"] != "2" || st["inflight"] != "0" || st["ready"] != "0" {
		t.Fatalf("stats after acks: %v", st)
	}
	if n := rdb.Exists(ctx, k.Lease(jobs[0].Batch), k.Settled(jobs[0].Batch), k.Leases()).Val(); n != 0 {
		t.Fatal("a settled batch left its lease behind")
	}
}

// A job without a group whose handler answered a result, and asked for no
// retain, is settled like any plain job (in its batch's mask): counted
// once, nothing kept.
func TestAPlainJobsResultLeavesNothing(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	rdb := r.Client()
	k := p.Keyspace().Keys(jq(0))
	if _, err := p.Enqueue(ctx, 1, []Item{item("a", ""), item("b", "")}, now); err != nil {
		t.Fatal(err)
	}
	jobs, err := p.Claim(ctx, jq(0), 5, time.Minute)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %+v %v", jobs, err)
	}
	done := []Done{{Job: jobs[0], Result: []byte(`{"sent":true}`)}, {Job: jobs[1], Result: []byte(`7`)}}
	if ok, err := p.AckMany(ctx, jq(0), done, now, time.Hour); err != nil || !ok[0] || !ok[1] {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if ok, err := p.AckMany(ctx, jq(0), done, now, time.Hour); err != nil || ok[0] || ok[1] {
		t.Fatalf("a second ack counted: %v %v", ok, err)
	}
	if st := rdb.HGetAll(ctx, k.Stats()).Val(); st["done"] != "2" || st["inflight"] != "0" {
		t.Fatalf("stats after acks: %v", st)
	}
	if n := rdb.Exists(ctx, k.Job("a"), k.Job("b"), k.Lease(jobs[0].Batch), k.Settled(jobs[0].Batch)).Val(); n != 0 {
		t.Fatalf("%d keys left behind by two plain jobs with results", n)
	}
}

// One AckMany over two groups and two batches, with a job acked twice and
// a batch the reaper took back: each counts once, per group and in the
// partition's stats.
func TestAckManyCountsEachLeasedJobOncePerGroup(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "a", 3, 1)
	first, err := p.Claim(ctx, jq(0), 3, time.Minute)
	if err != nil || len(first) != 3 {
		t.Fatalf("claim: %+v %v", first, err)
	}
	enqueueGroup(t, p, "b", 2, 1)
	second, err := p.Claim(ctx, jq(0), 2, time.Second)
	if err != nil || len(second) != 2 || second[0].Batch == first[0].Batch {
		t.Fatalf("claim: %+v %v", second, err)
	}
	// b's batch expires first: the reaper takes it back.
	expireLeases(t, p, jq(0), second[0].Batch)
	if n, _, err := p.Reap(ctx, jq(0), 10, DeadLimits{Max: 100, Keep: time.Hour}, nil); n != 2 || err != nil {
		t.Fatalf("reap: %d %v", n, err)
	}
	var done []Done
	for _, j := range append(slices.Clone(first), second...) {
		done = append(done, Done{Job: j, Result: []byte("r-" + j.ID)})
	}
	done = append(done, Done{Job: first[0]}) // the same job again
	ok, err := p.AckMany(ctx, jq(0), done, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range done {
		want := d.Job.Group == "a" && i < 3
		if ok[i] != want {
			t.Fatalf("ack %d (%s): %v, want %v", i, d.Job.ID, ok[i], want)
		}
	}
	k := p.Keyspace().Keys(jq(0))
	ga := r.Client().HGetAll(ctx, k.Group("a")).Val()
	gb := r.Client().HGetAll(ctx, k.Group("b")).Val()
	if ga["running"] != "0" || ga["done"] != "3" || gb["running"] != "0" || gb["done"] != "" {
		t.Fatalf("groups after acks: a %v, b %v", ga, gb)
	}
	st := r.Client().HGetAll(ctx, k.Stats()).Val()
	if st["done"] != "3" || st["inflight"] != "0" || st["ready"] != "2" {
		t.Fatalf("stats after acks: %v", st)
	}
	if n := r.Client().Exists(ctx, k.Leases()).Val(); n != 0 {
		t.Fatalf("leases left: %v", r.Client().ZRange(ctx, k.Leases(), 0, -1).Val())
	}
}

// One lease per claimed batch: acks take jobs off it; when it expires the
// reaper returns only the jobs not acked, their attempt counted; a late
// ack (or fail, release, extend) of a reaped job finds it gone.
func TestOneLeasePerBatchReapReturnsOnlyTheUnacked(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	rdb := r.Client()
	k := p.Keyspace().Keys(jq(0))
	enqueueGroup(t, p, "g", 5, 1)
	enqueueOK(t, p, 1, []Item{item("s0", ""), item("s1", ""), item("s2", "")}, now)
	// A lease of 1 ms: expired at once unless extended.
	jobs, err := p.Claim(ctx, jq(0), 8, time.Millisecond)
	if err != nil || len(jobs) != 8 {
		t.Fatalf("claim: %d %v", len(jobs), err)
	}
	batch := jobs[0].Batch
	for _, j := range jobs {
		if j.Batch != batch || j.Attempt != 1 {
			t.Fatalf("job %+v: want batch %s, attempt 1", j, batch)
		}
	}
	if n := rdb.ZCard(ctx, k.Leases()).Val(); n != 1 {
		t.Fatalf("%d leases for one claim", n)
	}
	held := func() int64 {
		return rdb.LLen(ctx, k.Lease(batch)).Val() - rdb.BitCount(ctx, k.Settled(batch), nil).Val()
	}
	if n := held(); n != 8 {
		t.Fatalf("the batch's lease holds %d jobs", n)
	}
	byID := map[string]Claimed{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	ack(t, p, 0, byID["g-1"], byID["s0"], byID["g-4"])
	if n := held(); n != 5 {
		t.Fatalf("the lease holds %d after 3 acks", n)
	}
	// Extend tells a live batch from one that is gone.
	if kept, err := p.Extend(ctx, jq(0), []string{"no-such-batch", batch}, time.Minute); err != nil || len(kept) != 2 || kept[0] || !kept[1] {
		t.Fatalf("extend a live lease: %v %v", kept, err)
	}
	if n, _, err := p.Reap(ctx, jq(0), 100, DeadLimits{Max: 100, Keep: time.Hour}, nil); n != 0 || err != nil {
		t.Fatalf("reaped an extended lease: %d %v", n, err)
	}
	expireLeases(t, p, jq(0), batch)
	if n, _, err := p.Reap(ctx, jq(0), 100, DeadLimits{Max: 100, Keep: time.Hour}, nil); n != 5 || err != nil {
		t.Fatalf("reap: %d %v, want the 5 unacked", n, err)
	}
	if n := rdb.Exists(ctx, k.Leases(), k.Lease(batch), k.Settled(batch)).Val(); n != 0 {
		t.Fatal("the reaped batch is still leased")
	}
	st := rdb.HGetAll(ctx, k.Stats()).Val()
	if st["inflight"] != "0" || st["ready"] != "5" || st["done"] != "3" {
		t.Fatalf("stats after the reap: %v", st)
	}
	if g := rdb.HGetAll(ctx, k.Group("g")).Val(); g["running"] != "0" || g["done"] != "2" {
		t.Fatalf("group after the reap: %v", g)
	}
	// Late: the reaped jobs are no longer the holder's.
	if ok, _ := p.Ack(ctx, jq(0), Done{Job: byID["g-0"]}, now, time.Hour); ok {
		t.Fatal("acked a reaped job")
	}
	if res, _ := p.Fail(ctx, jq(0), Failure{Job: byID["g-2"], Cause: "late"}, now, DeadLimits{Max: 10, Keep: time.Hour}); res != FailLost {
		t.Fatalf("failed a reaped job: %d", res)
	}
	if n, _ := p.Release(ctx, jq(0), []Claimed{byID["s1"]}); n != 0 {
		t.Fatal("released a reaped job")
	}
	if kept, _ := p.Extend(ctx, jq(0), []string{batch}, time.Minute); len(kept) != 1 || kept[0] {
		t.Fatal("extended a reaped batch")
	}
	if n := rdb.Exists(ctx, k.Leases(), k.Lease(batch), k.Settled(batch), k.Job("g-2")).Val(); n != 0 {
		t.Fatal("a late call left a lease or a record behind")
	}
	// Back at the front of their lanes, each attempt counted.
	again, err := p.Claim(ctx, jq(0), 10, time.Minute)
	if err != nil || len(again) != 5 {
		t.Fatalf("after reaping: %+v %v", again, err)
	}
	var ids []string
	for _, j := range again {
		ids = append(ids, j.ID)
		if j.Attempt != 2 || j.Batch == batch || string(j.Envelope) != string(byID[j.ID].Envelope) {
			t.Fatalf("reclaimed %+v: want attempt 2 in a new batch, the same envelope", j)
		}
	}
	slices.Sort(ids)
	if want := []string{"g-0", "g-2", "g-3", "s1", "s2"}; !slices.Equal(ids, want) {
		t.Fatalf("reclaimed %v, want %v", ids, want)
	}
	// The first holder's ack stays late while another holds the job.
	if ok, _ := p.Ack(ctx, jq(0), Done{Job: byID["s2"]}, now, time.Hour); ok {
		t.Fatal("an ack from the old batch took the job off its new one")
	}
	ack(t, p, 0, again...)
	if st := rdb.HGetAll(ctx, k.Stats()).Val(); st["done"] != "8" || st["inflight"] != "0" {
		t.Fatalf("stats at the end: %v", st)
	}
}

// Release hands jobs back without counting the attempt; a failure with a
// next try waits in delayed with its attempt counted and a record of its
// error; Promote brings it back when due; after the last attempt it is
// dead with its entry and last error in its record; a replay puts it back
// with its attempts reset. For a group's job and one without a group.
func TestJobLifecycle(t *testing.T) {
	for _, group := range []string{"g", ""} {
		t.Run("group="+group, func(t *testing.T) {
			p, r := onePartition(t)
			ctx := context.Background()
			rdb := r.Client()
			k := p.Keyspace().Keys(jq(0))
			limits := DeadLimits{Max: 10, Keep: time.Hour}
			it := item("x", group)
			lane := LaneOf(group, "", "jobs", 0)
			enqueueOK(t, p, 1, positioned(0, 0, it), now)
			claim := func(attempt int) Claimed {
				t.Helper()
				jobs, err := p.Claim(ctx, jq(0), 10, time.Minute)
				if err != nil || len(jobs) != 1 || jobs[0].ID != "x" || jobs[0].Attempt != attempt || jobs[0].Lane != lane ||
					jobs[0].Group != group || string(jobs[0].Envelope) != string(it.Envelope) {
					t.Fatalf("claim: %+v %v, want x at attempt %d on %s", jobs, err, attempt, lane)
				}
				return jobs[0]
			}
			counters := func(what, want string) {
				t.Helper()
				if group == "" {
					return
				}
				g := rdb.HGetAll(ctx, k.Group(group)).Val()
				if got := fmt.Sprintf("running=%s delayed=%s failed=%s dead=%s", g["running"], g["delayed"], g["failed"], g["dead"]); got != want {
					t.Fatalf("%s: group %s, want %s", what, got, want)
				}
			}

			j := claim(1)
			if n, err := p.Release(ctx, jq(0), []Claimed{j}); n != 1 || err != nil {
				t.Fatalf("release: %d %v", n, err)
			}
			if n := rdb.Exists(ctx, k.Job("x")).Val(); n != 0 {
				t.Fatal("a release wrote a record")
			}
			counters("released", "running=0 delayed= failed= dead=")
			j = claim(1) // not counted

			next := now.Add(time.Second)
			before := time.Now()
			if res, err := p.Fail(ctx, jq(0), Failure{Job: j, Cause: "e1", NextTry: next}, now, limits); res != FailRetrying || err != nil {
				t.Fatalf("fail with a next try: %d %v", res, err)
			}
			delayed := rdb.ZRangeWithScores(ctx, k.Delayed(), 0, -1).Val()
			if len(delayed) != 1 || delayed[0].Member != Entry(1, "x", lane, it.Envelope) || !dueAfter(time.UnixMilli(int64(delayed[0].Score)), time.Second, before) {
				t.Fatalf("delayed %v, want the entry with 1 attempt counted, due a second after the failure by Redis's clock", delayed)
			}
			h := rdb.HGetAll(ctx, k.Job("x")).Val()
			if h["last_error"] != "e1" || h["attempts"] != "1" || h["state"] != "retrying" || h["failed_ms"] == "" {
				t.Fatalf("record after a failed attempt: %v", h)
			}
			if ttl := rdb.TTL(ctx, k.Job("x")).Val(); ttl <= 0 || ttl > time.Hour {
				t.Fatalf("record kept for %v", ttl)
			}
			counters("failed", "running=0 delayed=1 failed=1 dead=")
			if st := rdb.HGetAll(ctx, k.Stats()).Val(); st["inflight"] != "0" || st["ready"] != "0" || st["retried"] != "1" {
				t.Fatalf("stats: %v", st)
			}

			// The retry is due a second after the failure by Redis's
			// clock, which this machine's is.
			if n, _ := p.Promote(ctx, jq(0), 100, time.Now()); n != 0 {
				t.Fatal("promoted a job before its time")
			}
			if n, err := p.Promote(ctx, jq(0), 100, time.Now().Add(2*time.Second)); n != 1 || err != nil {
				t.Fatalf("promote: %d %v", n, err)
			}
			counters("promoted", "running=0 delayed=0 failed=1 dead=")
			j = claim(2)

			if res, err := p.Fail(ctx, jq(0), Failure{Job: j, Cause: "e2"}, now.Add(2*time.Second), limits); res != FailDead || err != nil {
				t.Fatalf("last attempt: %d %v", res, err)
			}
			h = rdb.HGetAll(ctx, k.Job("x")).Val()
			if h["state"] != "dead" || h["env"] != Entry(2, "x", lane, it.Envelope) || h["last_error"] != "e2" || h["attempts"] != "2" || h["dead_ms"] == "" {
				t.Fatalf("dead record: %v", h)
			}
			if ids := rdb.ZRange(ctx, k.Dead(), 0, -1).Val(); !slices.Equal(ids, []string{"x"}) {
				t.Fatalf("dead set %v", ids)
			}
			counters("dead", "running=0 delayed=0 failed=2 dead=1")
			refs := []DeadRef{{ID: "x"}}
			if err := p.DeadJobs(ctx, jq(0), refs); err != nil || refs[0].Fields["last_error"] != "e2" || refs[0].Fields["attempts"] != "2" {
				t.Fatalf("dead jobs: %+v %v", refs, err)
			}
			if ref, part, ok, err := p.FindDead(ctx, "jobs", "x"); !ok || err != nil || part != jq(0) || ref.At.UnixMilli() != now.Add(2*time.Second).UnixMilli() {
				t.Fatalf("find dead: %+v %s %v %v", ref, part, ok, err)
			}

			if n, err := p.ReplayDead(ctx, jq(0), "x", now.Add(3*time.Second)); n != ReplayDone || err != nil {
				t.Fatalf("replay: %d %v", n, err)
			}
			if l := rdb.LRange(ctx, k.Lane(lane), 0, -1).Val(); !slices.Equal(l, []string{Entry(0, "x", lane, it.Envelope)}) {
				t.Fatalf("lane after the replay %q", l)
			}
			h = rdb.HGetAll(ctx, k.Job("x")).Val()
			if h["state"] != "" || h["env"] != "" || h["replayed_ms"] == "" || h["last_error"] != "e2" {
				t.Fatalf("record after the replay: %v", h)
			}
			counters("replayed", "running=0 delayed=0 failed=2 dead=0")
			f, _ := p.Funnel(ctx, jq(0))
			if f.Milestones["jobs"][MilestoneReplayed] != 1 || f.Ready != 1 || f.Dead != 0 {
				t.Fatalf("funnel after the replay: %+v", f)
			}
			j = claim(1)
			ack(t, p, 0, j)
			counters("done", "running=0 delayed=0 failed=2 dead=0")
			if st := rdb.HGetAll(ctx, k.Stats()).Val(); st["inflight"] != "0" || st["ready"] != "0" || st["done"] != "1" || st["dead"] != "1" {
				t.Fatalf("stats at the end: %v", st)
			}
		})
	}
}

// A deferral (the job could not start yet) waits in delayed without
// counting the attempt or writing a record.
func TestDeferDoesNotCountTheAttempt(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	enqueueGroup(t, p, "g", 1, 1)
	jobs, _ := p.Claim(ctx, jq(0), 1, time.Minute)
	if ok, err := p.Defer(ctx, jq(0), jobs[0], now.Add(time.Second), now); !ok || err != nil {
		t.Fatalf("defer: %v %v", ok, err)
	}
	if ok, _ := p.Defer(ctx, jq(0), jobs[0], now.Add(time.Second), now); ok {
		t.Fatal("deferred a job twice")
	}
	if n := r.Client().Exists(ctx, k.Job("g-0")).Val(); n != 0 {
		t.Fatal("a deferral wrote a record")
	}
	if n, _ := p.Promote(ctx, jq(0), 10, now.Add(time.Second)); n != 1 {
		t.Fatalf("promoted %d", n)
	}
	again, _ := p.Claim(ctx, jq(0), 1, time.Minute)
	if len(again) != 1 || again[0].Attempt != 1 {
		t.Fatalf("after a deferral: %+v", again)
	}
	if g := r.Client().HGetAll(ctx, k.Group("g")).Val(); g["running"] != "1" || g["delayed"] != "0" || g["failed"] != "" {
		t.Fatalf("group %v", g)
	}
}

func TestFailRetriesThenDies(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "g", 3, 1)
	limits := DeadLimits{Max: 2, Keep: time.Hour}
	jobs, _ := p.Claim(ctx, jq(0), 1, time.Minute)
	if res, err := p.Fail(ctx, jq(0), Failure{Job: jobs[0], Cause: "timeout", NextTry: now.Add(time.Second)}, now, limits); res != FailRetrying || err != nil {
		t.Fatalf("fail with a retry: %d %v", res, err)
	}
	if n, err := p.Promote(ctx, jq(0), 100, now.Add(time.Second)); n != 1 || err != nil {
		t.Fatalf("promote: %d %v", n, err)
	}
	again, _ := p.Claim(ctx, jq(0), 1, time.Minute)
	if len(again) != 1 || again[0].ID != jobs[0].ID || again[0].Attempt != 2 {
		t.Fatalf("after the retry: %+v", again)
	}
	if res, _ := p.Fail(ctx, jq(0), Failure{Job: again[0], Cause: "still broken"}, now, limits); res != FailDead {
		t.Fatalf("last attempt: %d", res)
	}
	k := p.Keyspace().Keys(jq(0))
	// The dead set is capped: the oldest goes first.
	for range 2 {
		js, _ := p.Claim(ctx, jq(0), 1, time.Minute)
		p.Fail(ctx, jq(0), Failure{Job: js[0], Cause: "x"}, now.Add(time.Second), limits)
	}
	dead, _ := r.Client().ZRange(ctx, k.Dead(), 0, -1).Result()
	if len(dead) != 2 || dead[0] == jobs[0].ID || dead[1] == jobs[0].ID {
		t.Fatalf("dead set %v, want the 2 newest", dead)
	}
	g, _ := r.Client().HGetAll(ctx, k.Group("g")).Result()
	if g["dead"] != "3" || g["running"] != "0" || g["delayed"] != "0" {
		t.Fatalf("group counters %v", g)
	}
}

func TestReleaseUncountsAndWakeSignals(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	enqueueGroup(t, p, "g", 2, 1)
	if n, _ := r.Client().LLen(ctx, k.Wake()).Result(); n != 1 {
		t.Fatalf("enqueue left %d wake tokens, want 1", n)
	}
	r.Client().Del(ctx, k.Wake())
	jobs, _ := p.Claim(ctx, jq(0), 2, time.Hour)
	if n, err := p.Release(ctx, jq(0), jobs); n != 2 || err != nil {
		t.Fatalf("release: %d %v", n, err)
	}
	if n, _ := r.Client().LLen(ctx, k.Wake()).Result(); n != 1 {
		t.Fatal("a release did not wake a consumer")
	}
	if n := r.Client().Exists(ctx, k.Leases(), k.Lease(jobs[0].Batch), k.Settled(jobs[0].Batch)).Val(); n != 0 {
		t.Fatal("a batch released whole is still leased")
	}
	again, _ := p.Claim(ctx, jq(0), 2, time.Hour)
	if len(again) != 2 || again[0].ID != jobs[0].ID || again[0].Attempt != 1 || again[1].Attempt != 1 {
		t.Fatalf("after a release: %+v (the attempt must not count, the order must hold)", again)
	}
}

// Bulk groups give a claim a quantum of jobs each: a claim of 64 among 100
// equal groups reads 8 of them, 8 jobs each, and over many claims no group
// runs more than a quantum ahead of another.
func TestClaimServesBulkGroupsAQuantumEach(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	for g := range 100 {
		enqueueGroup(t, p, "bulk"+strconv.Itoa(g), 100, 1)
	}
	served := map[string]int{}
	for round := range 60 {
		jobs, err := p.Claim(ctx, jq(0), 64, time.Minute)
		if err != nil || len(jobs) != 64 {
			t.Fatalf("claim %d: %d jobs, %v", round, len(jobs), err)
		}
		per := map[string]int{}
		for _, j := range jobs {
			per[j.Group]++
			served[j.Group]++
		}
		if round == 0 && len(per) != 64/ClaimQuantum {
			t.Fatalf("the first claim took from %d groups, want %d: %v", len(per), 64/ClaimQuantum, per)
		}
		for g, n := range per {
			if n > ClaimQuantum {
				t.Fatalf("claim %d: group %s gave %d jobs, more than the quantum %d", round, g, n, ClaimQuantum)
			}
		}
	}
	lo, hi := 100, 0
	for g := range 100 {
		n := served["bulk"+strconv.Itoa(g)]
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo > ClaimQuantum {
		t.Fatalf("after 3,840 jobs the groups got between %d and %d: more than a quantum apart", lo, hi)
	}
}

// Groups of one job each (the gate's default) fill a claim one group each,
// and a bulk group among them gives no more than the quantum while they can
// give theirs.
func TestClaimFillsFromOneJobGroups(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "bulk", 1000, 1)
	for g := range 100 {
		enqueueGroup(t, p, "one"+strconv.Itoa(g), 1, 1)
	}
	jobs, err := p.Claim(ctx, jq(0), 32, time.Minute)
	if err != nil || len(jobs) != 32 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	bulk := 0
	for _, j := range jobs {
		if j.Group == "bulk" {
			bulk++
		}
	}
	if bulk > ClaimQuantum {
		t.Fatalf("the bulk group gave %d of 32 jobs while one-job groups waited", bulk)
	}
}

// TestAForeignLaneDoesNotBlockClaims: a name in the fair order that is no
// lane's (a hand edit, another program's) is passed over: the lanes
// behind it are still served, from a fresh read and from the candidates
// the last claim returned.
func TestAForeignLaneDoesNotBlockClaims(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	enqueueGroup(t, p, "a", 4, 1)
	r.Client().ZAdd(ctx, k.Lanes(), redis.Z{Score: -1, Member: "not-a-lane"})
	for i := range 4 {
		jobs, err := p.Claim(ctx, jq(0), 1, time.Minute)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim %d behind a foreign name: %+v %v", i, jobs, err)
		}
	}
}

// TestClaimSeesALaneActivatedAfterItsCandidates: the candidates a claim
// returns for the next one miss a lane that becomes active in between;
// the next claim still serves it in its fair turn.
func TestClaimSeesALaneActivatedAfterItsCandidates(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "big", 100, 1)
	if jobs, err := p.Claim(ctx, jq(0), 8, time.Minute); err != nil || len(jobs) != 8 {
		t.Fatalf("first claim: %+v %v", jobs, err)
	}
	enqueueGroup(t, p, "small", 1, 1) // joins at the virtual clock: ahead of big
	jobs, err := p.Claim(ctx, jq(0), 1, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].Group != "small" {
		t.Fatalf("claim after a lane joined: %+v %v, want the small group's job", jobs, err)
	}
}

// A claim says when it drained the queue partition (nothing ready once it
// was made), so that a consumer need not claim again to find out; a job
// readied after that leaves a token on the wake list, where the consumer
// waits next.
func TestClaimSaysWhenItDrainedThePartition(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	enqueueGroup(t, p, "g", 3, 1)
	enqueueOK(t, p, 1, positioned(1, 0, item("plain", "")), now)
	r.Client().Del(ctx, k.Wake())
	for _, c := range []struct {
		max, want int
		drained   bool
	}{{2, 2, false}, {2, 2, true}, {2, 0, true}} {
		jobs, drained, err := p.ClaimDrained(ctx, jq(0), c.max, time.Minute)
		if err != nil || len(jobs) != c.want || drained != c.drained {
			t.Fatalf("claim of %d: %d jobs, drained %v, %v; want %d, %v", c.max, len(jobs), drained, err, c.want, c.drained)
		}
	}
	enqueueOK(t, p, 1, positioned(1, 1, item("later", "")), now)
	if n, _ := r.Client().LLen(ctx, k.Wake()).Result(); n != 1 {
		t.Fatalf("a job readied after the drain left %d wake tokens, want 1", n)
	}
	jobs, drained, err := p.ClaimDrained(ctx, jq(0), 2, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].ID != "later" || !drained {
		t.Fatalf("the claim after the wake-up: %+v, drained %v, %v", jobs, drained, err)
	}
}

// The wake-up token an enqueue leaves names the fair order's head, and a
// consumer that hands it to the pool (Woken) claims in one round trip, not
// a read of the order and then the claim. A stale token (the order moved
// on since) still claims what the order says, and a token naming nothing
// ("1", the other scripts') changes nothing.
func TestAWakeUpTokenNamesTheClaimsCandidates(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	trips := &roundTrips{}
	p.Client(0).AddHook(trips)
	claim := func(token string) ([]Claimed, int64) {
		t.Helper()
		p.Woken(jq(0), token)
		before := trips.n.Load()
		jobs, err := p.Claim(ctx, jq(0), 8, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return jobs, trips.n.Load() - before
	}
	wakeToken := func() string {
		t.Helper()
		token, err := r.Client().LPop(ctx, k.Wake()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return token
	}

	enqueueGroup(t, p, "a", 2, 1)
	token := wakeToken()
	var names []string
	if err := json.Unmarshal([]byte(token), &names); err != nil || !slices.Equal(names, []string{"g/a"}) {
		t.Fatalf("the wake-up token: %q (%v), want the fair order's head as a JSON array", token, err)
	}
	if jobs, n := claim(token); len(jobs) != 2 || n != 1 {
		t.Fatalf("a claim after a wake-up: %d jobs in %d round trips, want 2 in 1", len(jobs), n)
	}

	// Stale: the token names a, whose lane has gone; b's is the order now.
	enqueueGroup(t, p, "a", 1, 1)
	stale := wakeToken()
	if jobs, _ := claim(""); len(jobs) != 1 {
		t.Fatalf("claim of a's last job: %+v", jobs)
	}
	enqueueGroup(t, p, "b", 1, 1)
	if jobs, n := claim(stale); len(jobs) != 1 || jobs[0].Group != "b" || n != 2 {
		t.Fatalf("a claim after a stale token: %+v in %d round trips, want b's job in 2", jobs, n)
	}

	enqueueGroup(t, p, "c", 1, 1)
	if jobs, n := claim("1"); len(jobs) != 1 || n != 2 {
		t.Fatalf("a claim after a token naming nothing: %+v in %d round trips, want c's job in 2 (the order read first)", jobs, n)
	}
}

// An entry the reaper cannot read (a foreign write into a lease) dies with
// the reason instead of holding its batch in the leases, where it came up
// at every reap; the readable jobs of its batch go back to their lanes.
func TestReapBuriesAnEntryItCannotRead(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	rdb := r.Client()
	k := p.Keyspace().Keys(jq(0))
	enqueueOK(t, p, 1, []Item{item("good", ""), item("bad", "")}, now)
	jobs, err := p.Claim(ctx, jq(0), 2, time.Second)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	batch := jobs[0].Batch
	bad := jobs[0]
	if bad.ID != "bad" {
		bad = jobs[1]
	}
	rdb.LSet(ctx, k.Lease(batch), int64(bad.Index), "not an entry at all")
	limits := DeadLimits{Max: 100, Keep: time.Hour}
	expireLeases(t, p, jq(0), batch)
	if n, died, err := p.Reap(ctx, jq(0), 100, limits, nil); n != 1 || died != 1 || err != nil {
		t.Fatalf("reap: %d back, %d dead, %v; want the readable job back, the other dead", n, died, err)
	}
	if n := rdb.Exists(ctx, k.Leases(), k.Lease(batch), k.Settled(batch)).Val(); n != 0 {
		t.Fatal("the batch is still leased: the next reap would find it again")
	}
	// Its id cannot be read: its record is named after its place.
	deadID := "unreadable-" + batch + "-" + strconv.Itoa(bad.Index)
	if ids := rdb.ZRange(ctx, k.Dead(), 0, -1).Val(); len(ids) != 1 || ids[0] != deadID {
		t.Fatalf("dead set %v, want %s", ids, deadID)
	}
	rec := rdb.HGetAll(ctx, k.Job(deadID)).Val()
	if rec["state"] != "dead" || !strings.Contains(rec["last_error"], "could not read") || rec["env"] != "not an entry at all" {
		t.Fatalf("record %v", rec)
	}
	again, err := p.Claim(ctx, jq(0), 2, time.Minute)
	if err != nil || len(again) != 1 || again[0].ID != "good" || again[0].Attempt != 2 {
		t.Fatalf("after the reap: %+v %v, want good again, attempt 2", again, err)
	}
	if st := rdb.HGetAll(ctx, k.Stats()).Val(); st["inflight"] != "1" || st["dead"] != "1" {
		t.Fatalf("stats %v", st)
	}
}
