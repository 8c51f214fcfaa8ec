package queue

import (
	"context"
	"strconv"
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
		jobs, err := p.Claim(ctx, 0, 10, now.Add(time.Minute))
		if err != nil || len(jobs) != 10 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		for _, j := range jobs {
			p.Ack(ctx, 0, j, nil, now, time.Hour)
		}
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
		jobs, err := p.Claim(ctx, 0, 16, now.Add(time.Minute))
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
			if ok, err := p.Ack(ctx, 0, j, nil, now, time.Hour); !ok || err != nil {
				t.Fatalf("ack %v: %v %v", j, ok, err)
			}
		}
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
		jobs, err := p.Claim(ctx, 0, 10, now.Add(time.Minute))
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

func TestAckCountsOnceAndKeepsTheResult(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "g", 1, 1)
	jobs, err := p.Claim(ctx, 0, 5, now.Add(time.Minute))
	if err != nil || len(jobs) != 1 || jobs[0].Attempt != 1 || jobs[0].ID != "g-0" {
		t.Fatalf("claim: %+v %v", jobs, err)
	}
	if env, err := p.Envelope(ctx, 0, jobs[0].ID); err != nil || len(env) == 0 {
		t.Fatalf("envelope: %q %v", env, err)
	}
	if ok, err := p.Ack(ctx, 0, jobs[0], []byte(`{"sent":true}`), now, time.Hour); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if ok, _ := p.Ack(ctx, 0, jobs[0], nil, now, time.Hour); ok {
		t.Fatal("a second ack counted")
	}
	k := p.Layout().Keys(0)
	h, _ := r.Client().HGetAll(ctx, k.Job("g-0")).Result()
	// The envelope's bytes are given back; its field stays for the relay's
	// dedupe.
	if env, kept := h["env"]; h["state"] != "done" || h["result"] != `{"sent":true}` || h["attempts"] != "1" || !kept || env != "" {
		t.Fatalf("job after ack: %v", h)
	}
	if codes, err := p.Enqueue(ctx, 1, []Item{item("g-0", "g")}, now); err != nil || codes[0].Outcome != Duplicate {
		t.Fatalf("a done job relayed again: %v %v, want a duplicate", codes, err)
	}
	if ttl, _ := r.Client().TTL(ctx, k.Job("g-0")).Result(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("job kept for %v", ttl)
	}
	g, _ := r.Client().HGetAll(ctx, k.Group("g")).Result()
	if g["running"] != "0" || g["done"] != "1" {
		t.Fatalf("group after ack: %v", g)
	}
	// The relay still dedupes it: its env field is there.
	if res, err := p.Enqueue(ctx, 1, []Item{item("g-0", "g")}, now); err != nil || res[0].Outcome != Duplicate {
		t.Fatalf("redelivery of a done job: %v %v", res, err)
	}
}

// One AckMany over two groups, with a job acked twice and one whose lease
// was reaped: each counts once, per group and in the partition's stats.
func TestAckManyCountsEachLeasedJobOncePerGroup(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "a", 3, 1)
	enqueueGroup(t, p, "b", 2, 1)
	jobs, err := p.Claim(ctx, 0, 5, now.Add(time.Second))
	if err != nil || len(jobs) != 5 {
		t.Fatalf("claim: %+v %v", jobs, err)
	}
	var reaped Claimed
	for _, j := range jobs {
		if j.Group == "b" {
			reaped = j
		}
	}
	k := p.Layout().Keys(0)
	// The reaper takes one lease back, as if it had expired.
	r.Client().ZAdd(ctx, k.Inflight(), redis.Z{Score: 0, Member: reaped.ID})
	if n, err := p.Reap(ctx, 0, 10, now); n != 1 || err != nil {
		t.Fatalf("reap: %d %v", n, err)
	}
	done := []Done{}
	for _, j := range jobs {
		done = append(done, Done{Job: j, Result: []byte("r-" + j.ID)})
	}
	done = append(done, Done{Job: jobs[0]}) // the same job again
	ok, err := p.AckMany(ctx, 0, done, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for i, d := range done {
		want := d.Job.ID != reaped.ID && i < len(jobs)
		if ok[i] != want {
			t.Fatalf("ack %d (%s): %v, want %v", i, d.Job.ID, ok[i], want)
		}
		if ok[i] {
			acked++
			h, _ := r.Client().HGetAll(ctx, k.Job(d.Job.ID)).Result()
			if h["state"] != "done" || h["result"] != "r-"+d.Job.ID || h["attempts"] != "1" {
				t.Fatalf("job %s after ack: %v", d.Job.ID, h)
			}
		}
	}
	ga, _ := r.Client().HGetAll(ctx, k.Group("a")).Result()
	gb, _ := r.Client().HGetAll(ctx, k.Group("b")).Result()
	if ga["running"] != "0" || ga["done"] != "3" || gb["running"] != "0" || gb["done"] != "1" {
		t.Fatalf("groups after acks: a %v, b %v", ga, gb)
	}
	if n, _ := r.Client().HGet(ctx, k.Stats(), "done").Int(); n != acked || acked != 4 {
		t.Fatalf("stats count %d done, acked %d", n, acked)
	}
	if n, _ := r.Client().HLen(ctx, k.Leases()).Result(); n != 0 {
		t.Fatalf("%d leases left", n)
	}
	if n, _ := r.Client().HLen(ctx, k.Attempts()).Result(); n != 1 {
		t.Fatalf("%d attempt counters left, want the reaped job's", n)
	}
}

func TestReapReturnsExpiredLeasesWithTheAttemptCounted(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "g", 2, 1)
	jobs, _ := p.Claim(ctx, 0, 1, now.Add(time.Second))
	// Extend tells a live lease from one that is gone, per id.
	if kept, err := p.Extend(ctx, 0, []string{"no-such-job", jobs[0].ID}, now.Add(2*time.Second)); err != nil || len(kept) != 2 || kept[0] || !kept[1] {
		t.Fatalf("extend a live lease: %v %v", kept, err)
	}
	if n, err := p.Reap(ctx, 0, 100, now.Add(time.Second)); n != 0 || err != nil {
		t.Fatalf("reaped an extended lease: %d %v", n, err)
	}
	if n, err := p.Reap(ctx, 0, 100, now.Add(3*time.Second)); n != 1 || err != nil {
		t.Fatalf("reap: %d %v", n, err)
	}
	if kept, _ := p.Extend(ctx, 0, []string{jobs[0].ID}, now.Add(time.Minute)); len(kept) != 1 || kept[0] {
		t.Fatal("extended a reaped lease")
	}
	if n, _ := p.Client(0).ZCard(ctx, p.Layout().Keys(0).Inflight()).Result(); n != 0 {
		t.Fatalf("extending a reaped lease put it back in flight (%d)", n)
	}
	if ok, _ := p.Ack(ctx, 0, jobs[0], nil, now, time.Hour); ok {
		t.Fatal("acked a reaped lease")
	}
	// Back at the front of its group, attempt counted.
	again, _ := p.Claim(ctx, 0, 1, now.Add(time.Minute))
	if len(again) != 1 || again[0].ID != jobs[0].ID || again[0].Attempt != 2 {
		t.Fatalf("after reaping: %+v", again)
	}
}

func TestFailRetriesThenDies(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "g", 3, 1)
	limits := DeadLimits{Max: 2, Keep: time.Hour}
	groupOf := func(string) (string, error) { return "g", nil }
	jobs, _ := p.Claim(ctx, 0, 1, now.Add(time.Minute))
	if res, err := p.Fail(ctx, 0, jobs[0], "timeout", now.Add(time.Second), now, limits); res != FailRetrying || err != nil {
		t.Fatalf("fail with a retry: %d %v", res, err)
	}
	if n, _ := p.Promote(ctx, 0, 100, now, groupOf); n != 0 {
		t.Fatal("promoted a job before its time")
	}
	if n, err := p.Promote(ctx, 0, 100, now.Add(time.Second), groupOf); n != 1 || err != nil {
		t.Fatalf("promote: %d %v", n, err)
	}
	again, _ := p.Claim(ctx, 0, 1, now.Add(time.Minute))
	if len(again) != 1 || again[0].ID != jobs[0].ID || again[0].Attempt != 2 {
		t.Fatalf("after the retry: %+v", again)
	}
	if res, _ := p.Fail(ctx, 0, again[0], "still broken", time.Time{}, now, limits); res != FailDead {
		t.Fatalf("last attempt: %d", res)
	}
	k := p.Layout().Keys(0)
	h, _ := r.Client().HGetAll(ctx, k.Job(jobs[0].ID)).Result()
	if h["state"] != "dead" || h["last_error"] != "still broken" || h["attempts"] != "2" || h["dead_ms"] == "" {
		t.Fatalf("dead job: %v", h)
	}
	// The dead set is capped: the oldest goes first.
	for range 2 {
		js, _ := p.Claim(ctx, 0, 1, now.Add(time.Minute))
		p.Fail(ctx, 0, js[0], "x", time.Time{}, now.Add(time.Second), limits)
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
	k := p.Layout().Keys(0)
	enqueueGroup(t, p, "g", 2, 1)
	if n, _ := r.Client().LLen(ctx, k.Wake()).Result(); n != 1 {
		t.Fatalf("enqueue left %d wake tokens, want 1", n)
	}
	r.Client().Del(ctx, k.Wake())
	jobs, _ := p.Claim(ctx, 0, 2, now.Add(time.Hour))
	if n, err := p.Release(ctx, 0, jobs); n != 2 || err != nil {
		t.Fatalf("release: %d %v", n, err)
	}
	if n, _ := r.Client().LLen(ctx, k.Wake()).Result(); n != 1 {
		t.Fatal("a release did not wake a consumer")
	}
	again, _ := p.Claim(ctx, 0, 2, now.Add(time.Hour))
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
		jobs, err := p.Claim(ctx, 0, 64, now.Add(time.Minute))
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
	jobs, err := p.Claim(ctx, 0, 32, now.Add(time.Minute))
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
