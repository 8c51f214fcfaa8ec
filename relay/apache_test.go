package relay_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestApacheKafkaRelay runs the relay against one real Apache Kafka broker
// (bin/kafka, `make kafka`), started once for its subtests; each subtest
// gets the topic made anew (so its own log, from offset 0) and its own
// Redis and Consul. What the real broker adds over kfake: offsets committed
// to and fetched from its group coordinator, topic ids, and topic deletion.
func TestApacheKafkaRelay(t *testing.T) {
	start := time.Now()
	k := testenv.Kafka(t, testenv.ApacheKafka(), testenv.Topic(topic, kParts), testenv.Topic(topic+".dlq", 1))
	t.Logf("the broker started in %s", time.Since(start).Round(time.Millisecond))

	t.Run("consume and commit", func(t *testing.T) {
		b := apacheBed(t, k)
		b.produce(t, 0, 500)
		r := b.start(t, "r1", nil)
		b.waitRelayed(t, 500, 30*time.Second)
		testenv.WaitFor(t, 10*time.Second, "offsets committed up to the end", func() bool {
			return b.committed(t, "sluice-relay."+topic) == 500
		})
		// The next relay starts from the coordinator's offsets: nothing
		// is read twice.
		r.stop(t)
		b.produce(t, 500, 100)
		r2 := b.start(t, "r2", nil)
		b.waitRelayed(t, 600, 30*time.Second)
		if d := metricLabeled(t, r2.relay, "sluice_relay_jobs_total", "outcome", "duplicate"); d != 0 {
			t.Fatalf("the second relay read %v records again: it did not start at the committed offsets", d)
		}
	})

	// Two relays on one topic: the holder relays and commits; stopped, it
	// hands over to the standby, which goes on from the holder's last
	// commit in the coordinator.
	t.Run("failover", func(t *testing.T) {
		b := apacheBed(t, k)
		r1 := b.start(t, "r1", nil)
		testenv.WaitFor(t, 10*time.Second, "r1 to hold the lock", func() bool { return r1.relay.Holds(topic) })
		r2 := b.start(t, "r2", nil)
		b.produce(t, 0, 300)
		b.waitRelayed(t, 300, 30*time.Second)
		testenv.WaitFor(t, 10*time.Second, "r1's offsets committed", func() bool {
			return b.committed(t, "sluice-relay."+topic) == 300
		})
		r1.stop(t)
		testenv.WaitFor(t, 15*time.Second, "r2 to take over", func() bool { return r2.relay.Holds(topic) })
		b.produce(t, 300, 200)
		b.waitRelayed(t, 500, 30*time.Second)
		if d := metricLabeled(t, r2.relay, "sluice_relay_jobs_total", "outcome", "duplicate"); d != 0 {
			t.Fatalf("r2 read %v of r1's records again", d)
		}
		testenv.WaitFor(t, 10*time.Second, "r2's offsets committed", func() bool {
			return b.committed(t, "sluice-relay."+topic) == 500
		})
	})

	// The topic deleted and made again under a running relay: a new log
	// whose offsets start at 0 again, under a new topic id. Its jobs are
	// new jobs: none may be taken for the old log's records the watermark
	// has seen. Reruns are the documented price (docs/relay.md, "reruns,
	// never drops"); drops were what the relay did before it kept the
	// topic id (50 of these 100 jobs, on the real broker).
	t.Run("topic recreated", func(t *testing.T) {
		b := apacheBed(t, k)
		r := b.start(t, "r1", nil)
		b.produce(t, 0, 100)
		b.waitRelayed(t, 100, 30*time.Second)
		k.DeleteTopic(topic)
		k.CreateTopic(topic, kParts)
		b.produce(t, 100, 100)
		missing := func() []string {
			var out []string
			for i := 100; i < 200; i++ {
				id, group := "j"+strconv.Itoa(i), "g"+strconv.Itoa(i/10)
				if !b.onLane(t, group, id) {
					out = append(out, id)
				}
			}
			return out
		}
		var gone []string
		testenv.WaitFor(t, 60*time.Second, "every job of the recreated topic in Redis", func() bool {
			gone = missing()
			return len(gone) == 0
		})
		if n := metricLabeled(t, r.relay, "sluice_relay_watermark_log_changes_total", "", ""); n == 0 {
			t.Fatal("the relay did not count the new log (sluice_relay_watermark_log_changes_total 0)")
		}
		jobs, _, _ := b.counts(t)
		t.Logf("%d jobs held for 200 sent: %d reruns of the new log's jobs", jobs, jobs-200)
	})
}

// onLane reports whether job id is on the lane of group.
func (b *bed) onLane(t *testing.T, group, id string) bool {
	t.Helper()
	k := b.layout.Keys(queue.Queue{Topic: topic, Part: b.layout.PartitionOf(group)})
	all, err := b.redis.Client().LRange(context.Background(), k.Lane(queue.LaneOf(group, "", topic, 0)), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if pe, err := queue.ParseEntry(e); err == nil && pe.ID == id {
			return true
		}
	}
	return false
}

// apacheBed is newBed on the shared cluster k: the topic is deleted and
// created again, so the subtest has its own log and no committed offsets
// (Kafka drops a deleted topic's offsets), with a Redis and a Consul of its
// own.
func apacheBed(t *testing.T, k *testenv.KafkaCluster) *bed {
	t.Helper()
	k.DeleteTopic(topic)
	k.CreateTopic(topic, kParts)
	b := &bed{
		kafka:  k,
		redis:  testenv.Redis(t),
		consul: testenv.Consul(t),
		layout: queue.Keyspace{Stage: "test", Partitions: kParts},
		sent:   map[string][]byte{},
	}
	kcfg := kafka.Config{Brokers: k.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none"}
	p, err := kafka.NewProducer(&kcfg, kafka.ProducerOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	b.prod = p
	return b
}
