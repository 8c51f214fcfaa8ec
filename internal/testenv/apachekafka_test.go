package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestApacheKafkaOneBroker drives one real broker through what the test bed
// offers: produce and consume, no auto-creation, topic deletion and
// recreation (a new log from offset 0), kill -9 and restart keeping the
// data, and a pause that stalls a client until the resume.
func TestApacheKafkaOneBroker(t *testing.T) {
	start := time.Now()
	l := afterCleanup(t, func(t *testing.T) leftovers {
		k := Kafka(t, ApacheKafka(), Topic("orders", 3))
		t.Logf("one broker started in %s", time.Since(start).Round(time.Millisecond))
		if !k.IsApache() || k.Cluster() != nil {
			t.Fatal("ApacheKafka() gave a kfake cluster")
		}
		brokers := k.Brokers()
		cl := newKafkaClient(t, brokers)
		ctx := ctxFor(t)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 2, Value: []byte("hello")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if recs := consumeAll(t, brokers, "orders", 1); string(recs[0].Value) != "hello" || recs[0].Partition != 2 {
			t.Fatalf("consumed %q from partition %d", recs[0].Value, recs[0].Partition)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := cl.ProduceSync(pctx, &kgo.Record{Topic: "missing", Value: []byte("x")}).FirstErr(); err == nil {
			t.Fatal("produced to a topic nobody created: auto-creation is on")
		}

		// Deleted and made again with another partition count: a new
		// log, whose offsets start again at 0.
		k.DeleteTopic("orders")
		k.CreateTopic("orders", 2)
		if n := partitions(t, cl, "orders"); n != 2 {
			t.Fatalf("recreated orders has %d partitions, want 2", n)
		}
		// A fresh client: franz-go's old one keeps the deleted topic's id
		// and is answered UNKNOWN_TOPIC_ID.
		cl = newKafkaClient(t, brokers)
		r := &kgo.Record{Topic: "orders", Partition: 1, Value: []byte("again")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("producing to the recreated topic: %v", err)
		}
		if r.Offset != 0 {
			t.Fatalf("first record of the recreated topic at offset %d, want 0", r.Offset)
		}

		// kill -9 and back, on the same address, with the data.
		k.KillBroker(1)
		k.StartBroker(1)
		if got := k.Brokers(); got[0] != brokers[0] {
			t.Fatalf("broker at %s after the restart, want %s", got[0], brokers[0])
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 1, Value: []byte("after")}).FirstErr(); err != nil {
			t.Fatalf("producing after the restart: %v", err)
		}
		if recs := consumeAll(t, brokers, "orders", 2); string(recs[0].Value) != "again" || string(recs[1].Value) != "after" {
			t.Fatalf("after kill -9 and restart: %q, %q", recs[0].Value, recs[1].Value)
		}

		// Paused, nothing answers; resumed, it serves again.
		k.PauseBroker(1)
		pctx, cancel = context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(pctx, newKafkaClient(t, brokers)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("metadata from a paused broker: %v, want no answer", err)
		}
		k.ResumeBroker(1)
		// A new client: the old one's requests sent during the pause wait
		// out its 10 s request timeout.
		if err := newKafkaClient(t, brokers).ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 0, Value: []byte("resumed")}).FirstErr(); err != nil {
			t.Fatalf("producing after the resume: %v", err)
		}
		a := k.be.(*apacheKafka)
		return leftovers{addrs: brokers, dir: a.dir}
	})
	assertReleased(t, "kafka", l)
}

// TestApacheKafkaThreeBrokers: three brokers with replication factor 3 and
// min.insync.replicas 2; a killed leader is replaced and acks=all writes go
// on with two in-sync replicas, and the restarted broker catches up.
func TestApacheKafkaThreeBrokers(t *testing.T) {
	start := time.Now()
	k := Kafka(t, ApacheKafka(), Brokers(3), Topic("spread", 3))
	t.Logf("three brokers started in %s", time.Since(start).Round(time.Millisecond))
	st := k.Partition("spread", 0)
	if len(st.ISR) != 3 {
		t.Fatalf("spread/0: in-sync replicas %v, want 3", st.ISR)
	}
	cl := newKafkaClient(t, k.Brokers()[:1]) // acks=all, idempotent: kgo's defaults
	ctx := ctxFor(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "spread", Partition: 0, Value: []byte("one")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	old := st.Leader
	k.KillBroker(old)
	WaitFor(t, 30*time.Second, "a new leader of spread/0", func() bool {
		st = k.Partition("spread", 0)
		return st.Leader > 0 && st.Leader != old
	})
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "spread", Partition: 0, Value: []byte("two")}).FirstErr(); err != nil {
		t.Fatalf("acks=all with a broker down: %v", err)
	}
	k.StartBroker(old)
	WaitFor(t, 30*time.Second, "the restarted broker back in spread/0's in-sync set", func() bool {
		return len(k.Partition("spread", 0).ISR) == 3
	})
	if recs := consumeAll(t, k.Brokers(), "spread", 2); string(recs[0].Value) != "one" || string(recs[1].Value) != "two" {
		t.Fatalf("records %q, %q", recs[0].Value, recs[1].Value)
	}
}
