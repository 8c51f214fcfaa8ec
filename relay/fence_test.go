package relay_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

// groupIn is a group name whose jobs go to Redis partition part.
func (b *bed) groupIn(part int) string {
	for i := 0; ; i++ {
		if g := "g" + strconv.Itoa(i); b.layout.PartitionOf(g) == part {
			return g
		}
	}
}

// fence reads the topic's fence in Redis partition part ("" when unset).
func (b *bed) fence(part int) string {
	v, _ := b.redis.Client().Get(context.Background(), b.layout.Keys(queue.Queue{Topic: topic, Part: part}).Fence()).Result()
	return v
}

// depose raises the topic's fence in every partition past any token Consul
// hands out in a test: a newer holder has taken the lock, while the relay
// still finds its lease valid (as one paused past its TTL does until it
// reads the clock again).
func (b *bed) depose(t *testing.T) {
	t.Helper()
	for p := range b.layout.Partitions {
		if err := b.redis.Client().Set(context.Background(), b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Fence(), 1<<40, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// pool is a queue pool on the bed's Redis, as another relay holds one.
func (b *bed) pool(t *testing.T) *queue.Pool {
	t.Helper()
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: b.layout, Addr: b.redis.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue 29: the new holder raises the fence in every partition before its
// first write, so the old holder's late write is refused in a partition the
// new one has not written to. The old holder A writes to partition 0 only
// and stops (its loop ends; its lease is gone). B takes the lock and writes
// to partition 0. A's write that was on its way when it was deposed (sent
// with A's token after its last lease check, as from a process paused in
// between) lands in partition 1: it must be fenced. Before the fix B
// raised the fence only where it wrote, and A's write went in.
func TestANewHolderFencesEveryPartitionBeforeItWrites(t *testing.T) {
	b := newBed(t)
	g0, g1 := b.groupIn(0), b.groupIn(1)
	b.produceRaw(t, []kafka.Message{{Topic: topic, Key: []byte(g0), Value: envelope("a1", g0), Partition: 0}})
	a := b.start(t, "A", nil)
	b.waitRelayed(t, 1, 30*time.Second)
	tokenA, err := strconv.ParseUint(b.fence(0), 10, 64)
	if err != nil {
		t.Fatalf("A's fence in partition 0: %v", err)
	}
	a.stop(t)

	rb := b.start(t, "B", nil)
	testenv.WaitFor(t, 20*time.Second, "B to hold the lock", func() bool { return rb.relay.Holds(topic) })
	b.produceRaw(t, []kafka.Message{{Topic: topic, Key: []byte(g0), Value: envelope("b1", g0), Partition: 0}})
	b.waitRelayed(t, 2, 30*time.Second)
	tokenB := b.fence(0)
	if tb, _ := strconv.ParseUint(tokenB, 10, 64); tb <= tokenA {
		t.Fatalf("B's token %s is not newer than A's %d", tokenB, tokenA)
	}
	for p := range b.layout.Partitions {
		if f := b.fence(p); f != tokenB {
			t.Errorf("partition %d's fence is %q once B writes, want B's token %s", p, f, tokenB)
		}
	}

	late := queue.Item{ID: "a-late", Group: g1, Topic: topic, Weight: 1, Envelope: envelope("a-late", g1),
		KafkaPartition: 1, Offset: 7, HasPosition: true}
	res, err := b.pool(t).Enqueue(context.Background(), tokenA, []queue.Item{late}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != queue.Fenced {
		t.Fatalf("the deposed holder's write to partition 1 was %v, want fenced", res[0].Outcome)
	}
	if jobs, _, _ := b.counts(t); jobs != 2 {
		t.Fatalf("%d jobs in Redis, want B's and A's first only", jobs)
	}
}

// Issue 29: a holder that cannot fence every partition (one partition's
// Redis is down) writes nothing, not even to the partitions it could
// fence, keeps the lock, and relays once the Redis is back. Before the fix
// it wrote to the partitions that answered.
func TestAHolderThatCannotFenceEveryPartitionWritesNothing(t *testing.T) {
	b := newBed(t)
	r2 := testenv.Redis(t)
	g0 := b.groupIn(0)
	b.produceRaw(t, []kafka.Message{{Topic: topic, Key: []byte(g0), Value: envelope("j0", g0), Partition: 0}})
	// Another session holds the lock while partition 3's Redis goes down,
	// so that the relay's first act as holder meets it down.
	lockKey, _ := consul.Key(b.layout.Stage, "relay", topic, "lock")
	blocker, err := consul.Acquire(context.Background(), consul.LockConfig{Client: b.consul.Client(), Key: lockKey, LockDelay: consul.NoLockDelay})
	if err != nil {
		t.Fatal(err)
	}
	r := b.start(t, "r", func(c *relay.Config) {
		c.PartitionAddrs = map[int]string{3: r2.Addr()}
		// Else the wait for every Redis's run_id (durable.go) would
		// hold the writes back too, and hide what the fence does.
		c.DurableAfter = 0
	})
	r2.Stop()
	if err := blocker.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the holder to retry fencing partition 3, or to write", func() bool {
		jobs, _, _ := b.counts(t)
		return jobs > 0 || metricLabeled(t, r.relay, "sluice_relay_redis_retries_total", "topic", topic) >= 2
	})
	if jobs, _, _ := b.counts(t); jobs != 0 {
		t.Fatalf("the holder wrote %d jobs before it could fence every partition", jobs)
	}
	if !r.relay.Holds(topic) {
		t.Fatal("the holder gave up the lock while a Redis was down")
	}
	if f := b.fence(0); f == "" {
		t.Fatal("the partitions that answered were not fenced meanwhile")
	}
	r2.Restart()
	b.waitRelayed(t, 1, 30*time.Second)
}

// Issue 29: a token older than a fence at acquisition means a newer holder
// exists (or Consul lost its state): the relay writes nothing and gives up
// the lock. Before the fix it wrote to every partition whose fence was
// older (here partition 0) and kept the lock.
func TestAnOlderTokenThanAFenceAtAcquisitionGivesUpTheLock(t *testing.T) {
	b := newBed(t)
	g0 := b.groupIn(0)
	if err := b.redis.Client().Set(context.Background(), b.layout.Keys(queue.Queue{Topic: topic, Part: 2}).Fence(), 1<<40, 0).Err(); err != nil {
		t.Fatal(err)
	}
	b.produceRaw(t, []kafka.Message{{Topic: topic, Key: []byte(g0), Value: envelope("j0", g0), Partition: 0}})
	r := b.start(t, "r", nil)
	testenv.WaitFor(t, 20*time.Second, "the relay to give up the lock and contend again, or to write", func() bool {
		jobs, _, _ := b.counts(t)
		return jobs > 0 || metricLabeled(t, r.relay, "sluice_relay_lock_acquisitions_total", "topic", topic) >= 2
	})
	if jobs, _, _ := b.counts(t); jobs != 0 {
		t.Fatalf("a relay older than a partition's fence wrote %d jobs", jobs)
	}
}

// Issue 29: a deposed relay's group cancel is fenced. The relay relayed a
// bulk group's jobs; then a newer holder takes over (the fences rise) while
// this relay still finds its lease valid, and the group's cancel record
// comes. Before the fix the cancel went in: only the enqueue was fenced.
func TestADeposedRelayCancelsNoGroup(t *testing.T) {
	b := newBed(t)
	r := b.start(t, "r", nil)
	b.produce(t, 0, 10) // groups g0: j0..j9
	b.waitRelayed(t, 10, 30*time.Second)
	b.depose(t)
	c, err := json.Marshal(job.GroupClose{Group: "g0", Cancel: true})
	if err != nil {
		t.Fatal(err)
	}
	b.produceRaw(t, []kafka.Message{{Topic: topic, Key: []byte("g0"), Value: c, Partition: -1,
		Headers: []sarama.RecordHeader{{Key: []byte(job.ControlHeader), Value: []byte(job.GroupCloseControl)}}}})
	gk := b.layout.Keys(queue.Queue{Topic: topic, Part: b.layout.PartitionOf("g0")}).Group("g0")
	ctx := context.Background()
	testenv.WaitFor(t, 20*time.Second, "the cancel to be fenced, or applied", func() bool {
		return b.redis.Client().HExists(ctx, gk, "cancelled_ms").Val() ||
			metricLabeled(t, r.relay, "sluice_relay_jobs_total", "outcome", "fenced") > 0
	})
	if b.redis.Client().HExists(ctx, gk, "cancelled_ms").Val() {
		t.Fatal("a deposed relay cancelled a group")
	}
	if jobs, _, _ := b.counts(t); jobs != 10 {
		t.Fatalf("%d jobs in Redis after a deposed relay's cancel, want the 10", jobs)
	}
}

// Issue 29: a deposed relay produces no dead letter and counts none in the
// funnel: before each produce it checks the fence, which every new holder
// raises before it writes. Before the fix only the lease was checked, and
// a relay whose lease still looked valid produced and counted.
func TestADeposedRelayDeadLettersAndCountsNothing(t *testing.T) {
	b := newBed(t)
	r := b.start(t, "r", nil)
	b.produce(t, 0, 1)
	b.waitRelayed(t, 1, 30*time.Second)
	b.depose(t)
	b.produceRaw(t, []kafka.Message{{Topic: topic, Key: []byte("g0"), Value: []byte("not json"), Partition: -1}})
	dlqEnd := func() int64 {
		client, err := sarama.NewClient(b.kafka.Brokers(), sarama.NewConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		end, err := client.GetOffset(topic+".dlq", 0, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		return end
	}
	testenv.WaitFor(t, 20*time.Second, "the dead letter to be fenced, or produced", func() bool {
		return dlqEnd() > 0 || metricLabeled(t, r.relay, "sluice_relay_jobs_total", "outcome", "fenced") > 0
	})
	if n := dlqEnd(); n != 0 {
		t.Fatalf("a deposed relay produced %d dead letters", n)
	}
	pool := b.pool(t)
	for p := range b.layout.Partitions {
		f, err := pool.Funnel(context.Background(), queue.Queue{Topic: topic, Part: p})
		if err != nil {
			t.Fatal(err)
		}
		if n := f.Milestones[topic][queue.MilestoneDeadLettered]; n != 0 {
			t.Fatalf("a deposed relay counted %d dead letters in partition %d", n, p)
		}
	}
}
