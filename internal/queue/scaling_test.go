package queue

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// readyTruth is the ready depth counted the slow way: the entries on the
// active lanes.
func readyTruth(t *testing.T, p *Pool, part int) int64 {
	t.Helper()
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(part))
	lanes, err := p.Client(part).ZRange(ctx, k.Lanes(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range lanes {
		l, _ := p.Client(part).LLen(ctx, k.Lane(l)).Result()
		n += l
	}
	return n
}

func wantReady(t *testing.T, p *Pool, what string, want int64) {
	t.Helper()
	l, err := p.Load(context.Background(), 0, []string{"jobs"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if truth := readyTruth(t, p, 0); l.Ready != want || truth != want {
		t.Fatalf("%s: ready depth %d, lists hold %d, want %d", what, l.Ready, truth, want)
	}
}

// The ready counter follows every script that moves entries onto or off
// the lanes: enqueue (ready, not delayed), claim, fail (to delayed),
// promote, reap, release, ack, cancel and replay; and the inflight
// counter follows the leases.
func TestReadyDepthFollowsEveryMove(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	wantReady(t, p, "empty", 0)
	enqueueGroup(t, p, "a", 10, 1)
	enqueueGroup(t, p, "b", 5, 1)
	later := item("later", "a")
	later.RunAt = now.Add(time.Hour)
	if _, err := p.Enqueue(ctx, 1, positioned(0, 0, later, item("s", "")), now); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, 1, positioned(0, 1, item("s", "")), now); err != nil {
		t.Fatal(err)
	}
	wantReady(t, p, "enqueued 16 ready, 1 delayed, 1 duplicate", 16)
	inflight := func(what string, want int64) {
		t.Helper()
		f, err := p.Funnel(ctx, jq(0))
		if err != nil || f.Inflight != want {
			t.Fatalf("%s: in flight %d %v, want %d", what, f.Inflight, err, want)
		}
	}

	jobs, _ := p.Claim(ctx, jq(0), 6, time.Second)
	wantReady(t, p, "claimed 6", 10)
	inflight("claimed 6", 6)
	limits := DeadLimits{Max: 10, Keep: time.Hour}
	p.Fail(ctx, jq(0), Failure{Job: jobs[0], Cause: "retry", NextTry: now.Add(time.Second)}, now, limits)
	p.Fail(ctx, jq(0), Failure{Job: jobs[1], Cause: "dead"}, now, limits)
	p.AckMany(ctx, jq(0), []Done{{Job: jobs[2]}}, now, time.Hour)
	wantReady(t, p, "failed, dead and acked", 10)
	inflight("failed, dead and acked", 3)
	if n, _ := p.Promote(ctx, jq(0), 10, now.Add(2*time.Hour)); n != 2 {
		t.Fatalf("promoted %d, want 2", n)
	}
	wantReady(t, p, "promoted 2", 12)
	if n, _ := p.Release(ctx, jq(0), jobs[5:]); n != 1 {
		t.Fatalf("released %d", n)
	}
	wantReady(t, p, "released 1", 13)
	inflight("released 1", 2)
	expireLeases(t, p, jq(0), jobs[0].Batch)
	if n, _, _ := p.Reap(ctx, jq(0), 10, DeadLimits{Max: 100, Keep: time.Hour}, nil); n != 2 {
		t.Fatalf("reaped %d, want 2 (jobs[3], jobs[4])", n)
	}
	wantReady(t, p, "reaped 2", 15)
	inflight("reaped 2", 0)
	if n, _ := p.ReplayDead(ctx, jq(0), jobs[1].ID, now); n != ReplayDone {
		t.Fatalf("replay: %d", n)
	}
	wantReady(t, p, "replayed 1", 16)
	ready := readyTruth(t, p, 0)
	bLeft, _ := p.Client(0).LLen(ctx, p.Keyspace().Keys(jq(0)).Lane("g/b")).Result()
	if _, err := p.CancelGroup(ctx, "jobs", "b", now); err != nil {
		t.Fatal(err)
	}
	wantReady(t, p, "cancelled b", ready-bLeft)
	for {
		js, err := p.Claim(ctx, jq(0), 100, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(js) == 0 {
			break
		}
	}
	wantReady(t, p, "claimed the rest", 0)
	inflight("claimed the rest", ready-bLeft)
}

// A counter that drifted (jobs queued before it existed, a hand edit) is
// set back to 0 once no lane is active: then nothing is ready.
func TestReadyDepthHealsWhenNothingIsActive(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	r.Client().HSet(ctx, k.Stats(), "ready", 42)
	wantReady(t, p, "drifted, nothing active", 0)
	if v, _ := r.Client().HGet(ctx, k.Stats(), "ready").Result(); v != "0" {
		t.Fatalf("stored counter %q, want 0", v)
	}
	// A negative drift reads as 0 while lanes are active.
	enqueueGroup(t, p, "g", 3, 1)
	r.Client().HIncrBy(ctx, k.Stats(), "ready", -10)
	if l, _ := p.Load(ctx, 0, []string{"jobs"}, time.Minute); l.Ready != 0 {
		t.Fatalf("negative counter read as %d", l.Ready)
	}
}

func TestHeartbeatsAndLoad(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().PartKeys(0)
	if cp, err := p.Heartbeat(ctx, 0, "w1", 4, 1500*time.Millisecond); err != nil || cp != 0 {
		t.Fatalf("first heartbeat: %d %v", cp, err)
	}
	r.Client().Set(ctx, k.WorkerCount(), 6, 0)
	if cp, err := p.Heartbeat(ctx, 0, "w2", 6, 0); err != nil || cp != 6 {
		t.Fatalf("heartbeat with a checkpoint: %d %v", cp, err)
	}
	// A consumer that died long ago, and garbage: both forgotten.
	old := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
	r.Client().HSet(ctx, k.Consumers(), "dead", "8:"+old+":0", "junk", "x")
	l, err := p.Load(ctx, 0, []string{"jobs"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Checkpoint != 6 || len(l.Consumers) != 2 || l.Consumers["w1"].Workers != 4 || l.Consumers["w1"].Busy != 1500*time.Millisecond || l.Consumers["w2"].Workers != 6 {
		t.Fatalf("load: %+v", l)
	}
	// Redis's clock stamps the heartbeats and the read alike.
	if age := l.Now.Sub(l.Consumers["w1"].At); age < 0 || age > 5*time.Second || time.Since(l.Now).Abs() > 5*time.Second {
		t.Fatalf("heartbeat at %s, read at %s", l.Consumers["w1"].At, l.Now)
	}
	if left, _ := r.Client().HKeys(ctx, k.Consumers()).Result(); len(left) != 2 {
		t.Fatalf("heartbeats left: %v", left)
	}
	if err := p.Leave(ctx, 0, "w1"); err != nil {
		t.Fatal(err)
	}
	if l, _ := p.Load(ctx, 0, []string{"jobs"}, time.Minute); len(l.Consumers) != 1 {
		t.Fatalf("after leaving: %+v", l.Consumers)
	}
}

func TestPushCommandIsTheSeedsForm(t *testing.T) {
	p := newPool(t, 4, testenv.Redis(t).Addr(), nil)
	ctx := context.Background()
	c := Command{Type: ScaleUp, Partition: 2, TargetWorkers: 24, Reason: "PWQD threshold exceeded for 3 consecutive cycles"}
	if err := p.PushCommand(ctx, c); err != nil {
		t.Fatal(err)
	}
	got, _ := p.Client(2).LRange(ctx, p.Keyspace().PartKeys(2).Cmd(), 0, -1).Result()
	want := `{"type":"SCALE_UP","partition":2,"targetWorkers":24,"reason":"PWQD threshold exceeded for 3 consecutive cycles"}`
	if len(got) != 1 || got[0] != want {
		t.Fatalf("cmd list %q, want %q", got, want)
	}
	if err := p.PushCommand(ctx, Command{Type: ScaleUp, Partition: 4, TargetWorkers: 1}); err == nil {
		t.Fatal("a command for partition 4 of 4 was pushed")
	}
}
