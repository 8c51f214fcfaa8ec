package relay_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

// TestSentinelFailoverLosesNoJob relays into Redis under Sentinel (a
// master, one replica, three Sentinels) with --durable-after replicas:1
// while a consumer claims and acks through a pool of its own:
//
//   - with the replica down, WAIT finds no replica: the relay writes the
//     batch in hand again and again and commits no offset;
//   - with the replica back, the jobs flow and their offsets are committed;
//   - then the master is killed (SIGKILL) mid-flow; the Sentinels promote
//     the replica, the relay's and the consumer's pools follow it, the old
//     master comes back as the new one's replica, and every job produced
//     to Kafka is claimed at least once.
func TestSentinelFailoverLosesNoJob(t *testing.T) {
	g := testenv.Sentinel(t)
	b := &bed{
		kafka:  testenv.Kafka(t, testenv.Topic(topic, kParts), testenv.Topic(topic+".dlq", 1)),
		redis:  g.Servers[0], // unused: the relay finds the master through the Sentinels
		consul: testenv.Consul(t),
		layout: queue.Keyspace{Stage: "test", Partitions: redisParts},
		sent:   map[string][]byte{},
	}
	kcfg := kafka.Config{Brokers: b.kafka.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none"}
	prod, err := kafka.NewProducer(&kcfg, kafka.ProducerOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close() })
	b.prod = prod

	sentinel := func(l *queue.StageRedis) {
		l.RedisAddr = "127.0.0.1:1" // not used with Sentinel: a wrong one proves it
		l.SentinelAddrs, l.SentinelMaster = g.Sentinels, testenv.SentinelMaster
	}
	r := b.start(t, "r1", func(c *relay.Config) {
		sentinel(&c.StageRedis)
		c.DurableAfter, c.DurableReplicas = 0, 1
		c.BatchSize = 16
	})

	// The consumer: claims every partition's ready jobs, acks them, and
	// notes each id it ran.
	loc := queue.StageRedis{Stage: b.layout.Stage, Partitions: b.layout.Partitions}
	sentinel(&loc)
	pool, err := queue.NewPool(loc.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	var (
		mu  sync.Mutex
		ran = map[string]int{}
	)
	ctx, cancel := context.WithCancel(context.Background())
	consumerDone := make(chan struct{})
	t.Cleanup(func() { cancel(); <-consumerDone })
	go func() {
		defer close(consumerDone)
		for ctx.Err() == nil {
			got := 0
			for p := range b.layout.Partitions {
				q := queue.Queue{Topic: topic, Part: p}
				claimed, err := pool.Claim(ctx, q, 64, time.Minute)
				if err != nil {
					continue // Redis failing over: try again
				}
				for _, c := range claimed {
					mu.Lock()
					ran[c.ID]++
					mu.Unlock()
					pool.Ack(ctx, q, queue.Done{Job: c}, time.Now(), 0)
				}
				got += len(claimed)
			}
			if got == 0 {
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond): // poll pace, not a wait for a condition
				}
			}
		}
	}()
	ranAll := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for i := range n {
				if ran["j"+strconv.Itoa(i)] == 0 {
					return false
				}
			}
			return true
		}
	}
	group := "sluice-relay." + topic

	b.produce(t, 0, 100)
	testenv.WaitFor(t, 20*time.Second, "the first 100 jobs run", ranAll(100))
	testenv.WaitFor(t, 10*time.Second, "the first 100 offsets committed", func() bool { return b.committed(t, group) == 100 })

	// No replica: a batch reaches the master, but WAIT finds nobody to
	// acknowledge it, so the relay writes it again and commits nothing.
	g.Servers[1].Stop()
	failedWaits := metricLabeled(t, r.relay, "sluice_relay_replica_waits_failed_total", "topic", topic)
	b.produce(t, 100, 50)
	testenv.WaitFor(t, 10*time.Second, "a WAIT to find no replica, twice", func() bool {
		return metricLabeled(t, r.relay, "sluice_relay_replica_waits_failed_total", "topic", topic) >= failedWaits+2
	})
	if c := b.committed(t, group); c != 100 {
		t.Fatalf("committed %d offsets while no replica acknowledged the writes after the 100th, want 100", c)
	}
	g.Servers[1].Restart()
	testenv.WaitFor(t, 20*time.Second, "the next 50 jobs run once the replica is back", ranAll(150))
	testenv.WaitFor(t, 20*time.Second, "their offsets committed", func() bool { return b.committed(t, group) == 150 })

	// The master dies mid-flow.
	b.produce(t, 150, 200)
	old := g.KillMaster()
	b.produce(t, 350, 150)
	promoted := g.WaitFailover(old, 20*time.Second)
	b.produce(t, 500, 100)
	// The new master has no replica until the old one comes back (as its
	// replica, which the Sentinels see to): replicas:1 holds every commit
	// until then.
	old.Restart()
	testenv.WaitFor(t, 40*time.Second, "all 600 jobs run at least once after the failover", ranAll(600))
	testenv.WaitFor(t, 20*time.Second, "every offset committed", func() bool { return b.committed(t, group) == 600 })
	mu.Lock()
	twice := 0
	for _, n := range ran {
		if n > 1 {
			twice++
		}
	}
	mu.Unlock()
	t.Logf("new master %s; %d jobs ran more than once (a failover may replay; none may be lost)", promoted.Addr(), twice)
}
