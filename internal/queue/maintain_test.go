package queue

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A maintenance round reads the heartbeat's answer, the expired leases and
// the due delayed jobs in one round trip, and acting on it reaps and
// promotes as Reap and Promote do; a round that finds nothing due costs
// that one round trip and nothing more, and a Redis that lost its scripts
// (SCRIPT FLUSH, as after a restart without them) is served all the same.
func TestAMaintenanceRoundIsOneRoundTrip(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	rdb := r.Client()
	k := p.Keyspace().Keys(jq(0))
	beat := ConsumerBeat{Consumer: "c1", Workers: 4, Busy: time.Second}
	trips := &roundTrips{}
	p.byPart[0].AddHook(trips)
	round := func(at time.Time) MaintenanceRound {
		t.Helper()
		m, err := p.ReadMaintenance(ctx, 0, &beat, []Queue{jq(0)}, at)
		if err != nil || len(m.Due) != 1 || m.Due[0].Queue != jq(0) {
			t.Fatalf("round: %+v %v", m, err)
		}
		return m
	}

	// Nothing due: the heartbeat lands, and acting on the round is free.
	if err := p.CheckpointWorkers(ctx, 0, 6); err != nil {
		t.Fatal(err)
	}
	round(now) // the client's connection made (HELLO), not counted below
	trips.n.Store(0)
	m := round(now)
	if m.Checkpoint != 6 || !m.Due[0].Empty() {
		t.Fatalf("an empty partition's round: %+v", m)
	}
	if _, _, _, err := p.Maintain(ctx, m.Due[0], DeadLimits{Max: 10, Keep: time.Hour}, nil, now); err != nil {
		t.Fatal(err)
	}
	if n := trips.n.Load(); n != 1 {
		t.Errorf("%d round trips for a round that found nothing; want 1", n)
	}
	if hb := rdb.HGet(ctx, p.Keyspace().PartKeys(0).Consumers(), "c1").Val(); !strings.HasPrefix(hb, "4:") || !strings.HasSuffix(hb, ":1000") {
		t.Fatalf("heartbeat %q", hb)
	}

	// An expired lease and a due retry: both found, both acted on.
	enqueueGroup(t, p, "g", 2, 1)
	jobs, err := p.Claim(ctx, jq(0), 2, time.Minute)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	if res, err := p.Fail(ctx, jq(0), Failure{Job: jobs[0], Cause: "boom", NextTry: now.Add(time.Second)}, now, DeadLimits{Max: 10, Keep: time.Hour}); res != FailRetrying || err != nil {
		t.Fatalf("fail: %d %v", res, err)
	}
	expireLeases(t, p, jq(0), jobs[1].Batch)
	trips.n.Store(0)
	// A light round (no heartbeat) looks at the delayed jobs alone.
	light, err := p.ReadMaintenance(ctx, 0, nil, []Queue{jq(0)}, now.Add(time.Second))
	if err != nil || light.Checkpoint != 0 {
		t.Fatalf("light round: %+v %v", light, err)
	}
	back, died, promoted, err := p.Maintain(ctx, light.Due[0], DeadLimits{Max: 10, Keep: time.Hour}, nil, now.Add(time.Second))
	if back != 0 || died != 0 || promoted != 1 || err != nil {
		t.Fatalf("maintain after a light round: %d back, %d died, %d promoted, %v; want 0, 0, 1", back, died, promoted, err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	trips.n.Store(0)
	m = round(now.Add(time.Second))
	if n := trips.n.Load(); n != 4 {
		t.Errorf("%d round trips for a round after SCRIPT FLUSH; want 4: NOSCRIPT, two scripts loaded, the round again", n)
	}
	if m.Due[0].Empty() {
		t.Fatalf("nothing due after a lease expired: %+v", m)
	}
	back, died, promoted, err = p.Maintain(ctx, m.Due[0], DeadLimits{Max: 10, Keep: time.Hour}, nil, now.Add(time.Second))
	if back != 1 || died != 0 || promoted != 0 || err != nil {
		t.Fatalf("maintain: %d back, %d died, %d promoted, %v; want 1, 0, 0", back, died, promoted, err)
	}
	if n := rdb.ZCard(ctx, k.Delayed()).Val() + rdb.ZCard(ctx, k.Leases()).Val(); n != 0 {
		t.Fatalf("%d delayed or leased after the round", n)
	}
	if again, _ := p.Claim(ctx, jq(0), 2, time.Minute); len(again) != 2 {
		t.Fatalf("claimed %d after the round, want both jobs back", len(again))
	}

	if _, err := p.ReadMaintenance(ctx, 0, &beat, []Queue{{Topic: "jobs", Part: 1}}, now); err == nil {
		t.Fatal("a round on partition 0 took another partition's queue")
	}
}

// roundTrips counts a client's round trips: a command, or a pipeline.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}
