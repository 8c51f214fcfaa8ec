package queue

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
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
		rs := p.ReadMaintenance(ctx, []PartMaintenance{{Part: 0, Beat: &beat, Queues: []Queue{jq(0)}}}, at)
		if len(rs) != 1 || rs[0].Err != nil || len(rs[0].Due) != 1 || rs[0].Due[0].Queue != jq(0) {
			t.Fatalf("round: %+v", rs)
		}
		return rs[0]
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
	light := p.ReadMaintenance(ctx, []PartMaintenance{{Part: 0, Queues: []Queue{jq(0)}}}, now.Add(time.Second))[0]
	if light.Err != nil || light.Checkpoint != 0 {
		t.Fatalf("light round: %+v", light)
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

	if r := p.ReadMaintenance(ctx, []PartMaintenance{{Part: 0, Beat: &beat, Queues: []Queue{{Topic: "jobs", Part: 1}}}}, now)[0]; r.Err == nil {
		t.Fatal("a round on partition 0 took another partition's queue")
	}
}

// A round over several partitions is one round trip per Redis server that
// holds them, however many partitions it holds; each partition's answer is
// its own, and one whose server does not answer fails alone.
func TestAMaintenanceRoundIsOneRoundTripPerServer(t *testing.T) {
	r0, r1 := testenv.Redis(t), testenv.Redis(t)
	// Partitions 0, 1 and 3 on r0; 2 on r1.
	p := newPool(t, 4, r0.Addr(), map[int]string{2: r1.Addr()})
	ctx := context.Background()
	trips0, trips1 := &roundTrips{}, &roundTrips{}
	p.Client(0).AddHook(trips0)
	p.Client(2).AddHook(trips1)
	if p.Client(0) != p.Client(1) || p.Client(0) != p.Client(3) || p.Client(0) == p.Client(2) {
		t.Fatal("the pool does not share one client per server")
	}
	for part := range 4 {
		if err := p.CheckpointWorkers(ctx, part, 10+part); err != nil {
			t.Fatal(err)
		}
	}
	// A due retry on partition 3 only.
	q3 := Queue{Topic: "jobs", Part: 3}
	if err := p.Client(3).ZAdd(ctx, p.Keyspace().Keys(q3).Delayed(), redis.Z{Score: float64(now.UnixMilli() - 1), Member: "entry"}).Err(); err != nil {
		t.Fatal(err)
	}
	asks := make([]PartMaintenance, 4)
	for part := range 4 {
		asks[part] = PartMaintenance{Part: part, Beat: &ConsumerBeat{Consumer: "c", Workers: 1}, Queues: []Queue{{Topic: "jobs", Part: part}, {Topic: "mail", Part: part}}}
	}
	p.ReadMaintenance(ctx, asks, now) // connections made (HELLO), not counted below
	trips0.n.Store(0)
	trips1.n.Store(0)
	rounds := p.ReadMaintenance(ctx, asks, now)
	if a, b := trips0.n.Load(), trips1.n.Load(); a != 1 || b != 1 {
		t.Errorf("round trips: %d to the server of three partitions, %d to the other's; want 1 and 1", a, b)
	}
	for part, r := range rounds {
		if r.Part != part || r.Err != nil || r.Checkpoint != 10+part || len(r.Due) != 2 {
			t.Fatalf("partition %d's round: %+v", part, r)
		}
		if due := !r.Due[0].Empty(); due != (part == 3) || !r.Due[1].Empty() {
			t.Errorf("partition %d: jobs due %v, mail due %v; want only partition 3's jobs", part, due, !r.Due[1].Empty())
		}
	}
	r1.Stop()
	rounds = p.ReadMaintenance(ctx, asks, now)
	for part, r := range rounds {
		if failed := r.Err != nil; failed != (part == 2) {
			t.Errorf("partition %d with its server stopped=%v: err %v", part, part == 2, r.Err)
		}
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
