package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// consumer stands in for a worker's consumer of one partition, speaking
// the worker's side of the protocol through the same Redis calls: it takes
// commands off the cmd list and checkpoints them, sends a heartbeat every
// 10 ms and follows the checkpoint. (The coordinator's tests may not import
// the worker; loadtest runs the real pair.) Its slots are busy busyShare of
// the time.
type consumer struct {
	id        string
	workers   atomic.Int64
	busyShare atomic.Int64 // percent
	mu        sync.Mutex
	got       []queue.Command
	stop      func()
}

func (b *bed) consumer(t *testing.T, part, workers int) *consumer {
	t.Helper()
	c := &consumer{id: fmt.Sprintf("test-%d-%d", part, time.Now().UnixNano())}
	c.workers.Store(int64(workers))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	k, rdb := b.layout.PartKeys(part), b.pool.Client(part)
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var busy time.Duration
		last := time.Now()
		for {
			for {
				raw, err := rdb.LPop(ctx, k.Cmd()).Result()
				if err != nil {
					break
				}
				var cmd queue.Command
				if err := json.Unmarshal([]byte(raw), &cmd); err != nil || cmd.Partition != part {
					t.Errorf("partition %d got the command %s", part, raw)
					continue
				}
				c.mu.Lock()
				c.got = append(c.got, cmd)
				c.mu.Unlock()
				rdb.Set(ctx, k.WorkerCount(), cmd.TargetWorkers, 0)
				c.workers.Store(int64(cmd.TargetWorkers))
			}
			now := time.Now()
			busy += time.Duration(float64(c.workers.Load()) * float64(now.Sub(last)) * float64(c.busyShare.Load()) / 100)
			last = now
			if cp, err := b.pool.Heartbeat(ctx, part, c.id, int(c.workers.Load()), busy); err == nil && cp > 0 {
				c.workers.Store(int64(cp))
			}
			select {
			case <-ctx.Done():
				b.pool.Leave(context.Background(), part, c.id)
				return
			case <-tick.C:
			}
		}
	}()
	c.stop = func() { cancel(); <-done }
	t.Cleanup(c.stop)
	return c
}

func (c *consumer) commands() []queue.Command {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]queue.Command(nil), c.got...)
}

// backlog puts n jobs of topic jobs in partition part's ready lanes;
// nobody claims them unless the test does.
func (b *bed) backlog(t *testing.T, part, n int) {
	t.Helper()
	b.backlogOf(t, "jobs", part, n)
}

// backlogOf is backlog for topic.
func (b *bed) backlogOf(t *testing.T, topic string, part, n int) {
	t.Helper()
	var group string
	for i := 0; ; i++ {
		if group = "backlog-" + strconv.Itoa(i); b.layout.PartitionOf(group) == part {
			break
		}
	}
	items := make([]queue.Item, n)
	for i := range items {
		id := job.BulkID(group, int64(i))
		items[i] = queue.Item{ID: id, Group: group, Topic: topic, Weight: 1, Envelope: []byte(`{"id":"` + id + `","type":"t"}`)}
	}
	if _, err := b.pool.Enqueue(context.Background(), 1, items, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// drain claims every ready job of topic jobs' partition part: the backlog
// is gone.
func (b *bed) drain(t *testing.T, part int) {
	t.Helper()
	for {
		jobs, err := b.pool.Claim(context.Background(), queue.Queue{Topic: "jobs", Part: part}, 1000, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			return
		}
	}
}

// scaling sets fast cycles and the given parameters.
func scaling(p coordinator.Params) func(*coordinator.Config) {
	return func(c *coordinator.Config) {
		c.ScaleEvery = 50 * time.Millisecond
		c.ConsumerTTL = time.Second
		c.Scaling = p
	}
}

func fastParams() coordinator.Params {
	return coordinator.Params{Threshold: 5, Cycles: 2, Base: 2, MaxFactor: 4, HalfLife: time.Hour}
}

func (r *running) cycles(t *testing.T) float64 {
	return testenv.Metric(t, r.c.Registry(), "sluice_coordinator_scaling_cycles_total")
}

// waitCycles waits until the coordinator has run n more scaling cycles.
func (r *running) waitCycles(t *testing.T, n float64) {
	t.Helper()
	from := r.cycles(t)
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("%g scaling cycles", n), func() bool { return r.cycles(t) >= from+n })
}

// A backlog in partition 1 of 4 scales partition 1 to the max, doubling
// from the base, with the seed's reason; the other partitions get no
// command and stay at the base.
func TestScalerScalesTheLoadedPartitionOnly(t *testing.T) {
	b := newBed(t, 4)
	var cs []*consumer
	for part := range 4 {
		cs = append(cs, b.consumer(t, part, 2))
	}
	r := b.start(t, "a", scaling(fastParams()))
	r.waitHolding(t)
	b.backlog(t, 1, 1000)
	testenv.WaitFor(t, 10*time.Second, "partition 1 at the max of 8", func() bool { return cs[1].workers.Load() == 8 })
	r.waitCycles(t, 5)
	got := cs[1].commands()
	if len(got) != 2 || got[0].Type != queue.ScaleUp || got[0].TargetWorkers != 4 || got[1].TargetWorkers != 8 {
		t.Fatalf("partition 1's commands: %+v", got)
	}
	if !strings.HasPrefix(got[0].Reason, "PWQD threshold exceeded for 2 consecutive cycles") {
		t.Errorf("reason %q", got[0].Reason)
	}
	for _, part := range []int{0, 2, 3} {
		if n := cs[part].workers.Load(); n != 2 || len(cs[part].commands()) != 0 {
			t.Errorf("partition %d: %d workers, commands %+v", part, n, cs[part].commands())
		}
	}
	reg := r.c.Registry()
	if v := testenv.Metric(t, reg, "sluice_coordinator_scaling_decisions_total", "partition", "1", "type", queue.ScaleUp); v != 2 {
		t.Errorf("SCALE_UP decisions for partition 1: %v", v)
	}
	if v := testenv.Metric(t, reg, "sluice_coordinator_scaling_decisions_total"); v != 2 {
		t.Errorf("decisions in all: %v", v)
	}
	if v := testenv.Metric(t, reg, "sluice_coordinator_scaling_pwqd", "partition", "1"); v != 1000.0/8 {
		t.Errorf("PWQD of partition 1: %v, want 125", v)
	}
	if v := testenv.Metric(t, reg, "sluice_coordinator_scaling_target_workers", "partition", "0"); v != 2 {
		t.Errorf("target of partition 0: %v", v)
	}
}

// The leader scales a partition up and stops; the standby takes over from
// the checkpoint (no command while the backlog lasts: it is at the max
// already), and once the backlog is gone it is the one that decays the
// workers back to the base.
func TestScalerFailoverGoesOnFromTheCheckpoint(t *testing.T) {
	b := newBed(t, 2)
	c0 := b.consumer(t, 0, 2)
	c0.busyShare.Store(100)
	p := fastParams()
	p.HalfLife = 300 * time.Millisecond
	a := b.start(t, "a", scaling(p))
	a.waitHolding(t)
	standby := b.start(t, "b", scaling(p))
	b.backlog(t, 0, 1000)
	testenv.WaitFor(t, 10*time.Second, "partition 0 at the max", func() bool { return c0.workers.Load() == 8 })
	a.stop(t)
	standby.waitHolding(t)
	standby.waitCycles(t, 5)
	if n := len(c0.commands()); n != 2 || c0.workers.Load() != 8 {
		t.Fatalf("after the failover, under load: %d workers, commands %+v", c0.workers.Load(), c0.commands())
	}
	b.drain(t, 0)
	c0.busyShare.Store(0)
	testenv.WaitFor(t, 10*time.Second, "the new leader to decay partition 0 to the base", func() bool { return c0.workers.Load() == 2 })
	if v := testenv.Metric(t, standby.c.Registry(), "sluice_coordinator_scaling_decisions_total", "type", queue.ScaleDown); v < 1 {
		t.Fatalf("the new leader made %v SCALE_DOWN decisions", v)
	}
	for _, c := range c0.commands()[2:] {
		if c.Type != queue.ScaleDown || c.TargetWorkers < 2 {
			t.Fatalf("decay command %+v", c)
		}
	}
}

// A restarted coordinator resumes the partitions' counts (the
// checkpoints) instead of resetting them; a consumer that missed its
// command is sent it again.
func TestScalerRestartKeepsCountsAndResendsMissedCommands(t *testing.T) {
	b := newBed(t, 2)
	c0 := b.consumer(t, 0, 2)
	c0.busyShare.Store(100)
	a := b.start(t, "a", scaling(fastParams()))
	a.waitHolding(t)
	b.backlog(t, 0, 1000)
	testenv.WaitFor(t, 10*time.Second, "partition 0 at the max", func() bool { return c0.workers.Load() == 8 })
	a.stop(t)
	b.drain(t, 0)
	again := b.start(t, "a-again", scaling(fastParams()))
	again.waitHolding(t)
	again.waitCycles(t, 5)
	if n := len(c0.commands()); n != 2 || c0.workers.Load() != 8 {
		t.Fatalf("after a restart: %d workers, commands %+v", c0.workers.Load(), c0.commands())
	}
	// A second consumer starts with a count of its own and no checkpoint
	// to follow (it was lost): the target is sent again.
	b.redis.Client().Del(context.Background(), b.layout.PartKeys(0).WorkerCount())
	c1 := b.consumer(t, 0, 3)
	c1.busyShare.Store(100)
	testenv.WaitFor(t, 10*time.Second, "the new consumer at the target 8", func() bool { return c1.workers.Load() == 8 })
	var resent queue.Command
	for _, c := range append(c0.commands(), c1.commands()...) {
		if strings.Contains(c.Reason, "sent again") {
			resent = c
		}
	}
	if resent.Type != queue.ScaleUp || resent.TargetWorkers != 8 {
		t.Fatalf("resent command %+v", resent)
	}
}

// The parameters in Consul apply live: a higher base raises every
// partition; an invalid value keeps the last ones; a paused scaler
// commands nothing; without the key the flags' defaults are back.
func TestScalerFollowsItsParametersInConsul(t *testing.T) {
	b := newBed(t, 2)
	cs := []*consumer{b.consumer(t, 0, 2), b.consumer(t, 1, 2)}
	r := b.start(t, "a", scaling(fastParams()))
	r.waitHolding(t)
	kv := b.consul.Client().KV()
	put := func(v string) {
		t.Helper()
		if _, err := kv.Put(&consulapi.KVPair{Key: "sluice/test/scaling", Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(`{"base": 3}`)
	testenv.WaitFor(t, 10*time.Second, "both partitions at the new base 3", func() bool {
		return cs[0].workers.Load() == 3 && cs[1].workers.Load() == 3
	})
	if c := cs[0].commands(); len(c) != 1 || c[0].Type != queue.ScaleUp || !strings.Contains(c[0].Reason, "base") {
		t.Fatalf("commands %+v", c)
	}
	put(`{"base": "three"}`)
	put(`{"base": 3, "paused": true}`)
	testenv.WaitFor(t, 10*time.Second, "the scaler paused", func() bool { return r.c.Params().Paused })
	b.backlog(t, 0, 1000)
	r.waitCycles(t, 5)
	if n := cs[0].workers.Load(); n != 3 {
		t.Fatalf("a paused scaler changed partition 0 to %d", n)
	}
	if _, err := kv.Delete("sluice/test/scaling", nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the defaults back, and partition 0 scaled up from 3", func() bool {
		return r.c.Params() == fastParams() && cs[0].workers.Load() >= 6
	})
	if p := r.c.Params(); p.Base != 2 {
		t.Fatalf("params %+v", p)
	}
}

// With no worker attached, the scaler says so in one line for all the
// partitions, not a line per partition (issue 32: 32 lines in 3 minutes in
// sluice dev --worker=false), and one more when a consumer appears.
func TestScalerLogsIdlePartitionsOnce(t *testing.T) {
	b := newBed(t, 8)
	r := b.start(t, "a", scaling(fastParams()))
	r.waitHolding(t)
	r.waitCycles(t, 5)
	count := func(s string) int { return strings.Count(r.logs.String(), s) }
	if n := count("no live consumer"); n != 1 || !strings.Contains(r.logs.String(), "partitions=\"[0 1 2 3 4 5 6 7]\"") {
		t.Fatalf("%d lines about partitions without a live consumer, want 1 naming all 8:\n%s", n, r.logs.String())
	}
	b.consumer(t, 3, 2)
	testenv.WaitFor(t, 10*time.Second, "a line without partition 3", func() bool {
		return strings.Contains(r.logs.String(), "partitions=\"[0 1 2 4 5 6 7]\"")
	})
	r.waitCycles(t, 5)
	if n := count("no live consumer"); n != 2 {
		t.Errorf("%d lines about partitions without a live consumer, want 2:\n%s", n, r.logs.String())
	}
}
