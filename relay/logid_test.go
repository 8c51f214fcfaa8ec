package relay_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

// recreateTopic deletes the test topic and creates it again with as many
// partitions, through Kafka's admin API, waiting until Kafka no longer
// lists the old one.
func (b *bed) recreateTopic(t *testing.T) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin(b.kafka.Brokers(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteTopic(topic); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the topic to be gone", func() bool {
		topics, err := admin.ListTopics()
		_, listed := topics[topic]
		return err == nil && !listed
	})
	b.kafka.CreateTopic(topic, kParts)
}

// A topic deleted and created again starts a new log at offset 0, under a
// new topic id, below the old log's watermarks: every job of the new log
// reaches Redis, none is dropped as a duplicate of the old log, and the
// change is counted (stats and metric).
func TestATopicCreatedAgainHasEveryNewJobRelayed(t *testing.T) {
	b := newBed(t)
	r := b.start(t, "r1", nil)
	b.produce(t, 0, 400)
	b.waitRelayed(t, 400, 30*time.Second)

	b.recreateTopic(t)
	// Fewer records than the old log had in each partition: each of them
	// is at or below the old watermark of its partition.
	b.produce(t, 1000, 100)
	b.waitRelayed(t, 500, 60*time.Second)
	for i := 1000; i < 1100; i++ {
		id := "j" + strconv.Itoa(i)
		if e := b.entry(t, "g"+strconv.Itoa(i/10), id); e.Envelope != string(b.sent[id]) {
			t.Fatalf("job %s of the new log: %+v", id, e)
		}
	}

	changed := 0
	for p := range b.layout.Partitions {
		n, _ := b.redis.Client().HGet(context.Background(), b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Stats(), "wm_log_changed").Int()
		changed += n
	}
	if changed == 0 {
		t.Fatal("stats wm_log_changed is 0 in every partition")
	}
	if n := metric(t, r.relay, "sluice_relay_watermark_log_changes_total"); n != float64(changed) {
		t.Fatalf("sluice_relay_watermark_log_changes_total %v, want %d (the partitions' wm_log_changed)", n, changed)
	}
}

// The new log outgrows the old one before the relay reads it: the
// partition consumers, which fetch by name, go on at the old log's offsets
// and would skip the new log's start. The relay notices the new topic id
// and relays the new log again from its start: every job of it reaches
// Redis; the ones read before the relay noticed run twice (a rerun, never
// a drop), the old log's none.
func TestATopicCreatedAgainAndFilledPastTheOldOffsetsLosesNothing(t *testing.T) {
	b := newBed(t)
	b.start(t, "r1", nil)
	b.produce(t, 0, 100)
	b.waitRelayed(t, 100, 30*time.Second)

	b.recreateTopic(t)
	b.produce(t, 1000, 400)
	var held map[string]int
	testenv.WaitFor(t, 60*time.Second, "every job of the new log in Redis", func() bool {
		held = b.heldIDs(t)
		for i := 1000; i < 1400; i++ {
			if held["j"+strconv.Itoa(i)] == 0 {
				return false
			}
		}
		return true
	})
	reruns := 0
	for id, n := range held {
		if n > 1 && !strings.HasPrefix(id, "j1") {
			t.Fatalf("job %s of the old log is in Redis %d times", id, n)
		}
		reruns += n - 1
	}
	t.Logf("%d jobs of the new log were relayed twice: read under the old topic id before the relay noticed", reruns)
}

// heldIDs counts the job ids on the lanes of every partition.
func (b *bed) heldIDs(t *testing.T) map[string]int {
	t.Helper()
	ctx := context.Background()
	rdb := b.redis.Client()
	ids := map[string]int{}
	for p := range b.layout.Partitions {
		k := b.layout.Keys(queue.Queue{Topic: topic, Part: p})
		lanes, err := rdb.Keys(ctx, k.Prefix()+"lane:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lanes {
			for _, e := range rdb.LRange(ctx, l, 0, -1).Val() {
				if pe, err := queue.ParseEntry(e); err == nil {
					ids[pe.ID]++
				}
			}
		}
	}
	return ids
}

// A relay that speaks a Kafka version before topic ids (--kafka-version
// before 2.8.0) learns none: it says so once, in a warning that names the
// flag, and the watermark compares offsets alone, as before ids.
func TestWithoutATopicIDTheWatermarkComparesOffsetsAndSaysSo(t *testing.T) {
	b := newBed(t)
	b.produce(t, 0, 50)
	cfg := b.config(func(c *relay.Config) { c.Kafka.Version = "2.7.0" })
	var logs testenv.LogBuffer
	r, err := relay.New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	b.waitRelayed(t, 50, 30*time.Second)
	if n := strings.Count(logs.String(), "relaying without the topic's id"); n != 1 || !strings.Contains(logs.String(), "--kafka-version") {
		t.Fatalf("the warning is logged %d times (want 1, naming --kafka-version):\n%s", n, logs.String())
	}
	for p := range b.layout.Partitions {
		wm := b.redis.Client().HGetAll(context.Background(), b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Watermark()).Val()
		for field := range wm {
			if strings.HasSuffix(field, ":topic_id") {
				t.Fatalf("partition %d's watermark has a topic id without one known: %v", p, wm)
			}
		}
	}
}

// A log truncated below records the relay applied (an unclean leader
// election) ends before the watermark: Kafka writes its next records at
// offsets the watermark holds. The state is made by raising every
// watermark past the logs' ends while no relay runs, as a truncation
// leaves it (kfake cannot truncate a log). The next holder lowers the
// watermarks before it relays (counted and logged), so every new record
// reaches Redis instead of being dropped as a duplicate.
func TestALogTruncatedBelowTheWatermarkHasItsNewRecordsRelayed(t *testing.T) {
	b := newBed(t)
	r := b.start(t, "r1", nil)
	b.produce(t, 0, 400)
	b.waitRelayed(t, 400, 30*time.Second)
	// The relay resumes at the committed offsets and applies everything
	// from there: wait for them, or the old records run again too.
	testenv.WaitFor(t, 30*time.Second, "every offset committed", func() bool { return b.committed(t, "sluice-relay."+topic) == 400 })
	r.stop(t)

	ctx := context.Background()
	rdb := b.redis.Client()
	raised := 0
	for p := range b.layout.Partitions {
		wm := b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Watermark()
		fields, err := rdb.HGetAll(ctx, wm).Result()
		if err != nil {
			t.Fatal(err)
		}
		for f := range fields {
			if strings.Contains(f, ":") { // the topic id beside the offset
				continue
			}
			if err := rdb.HIncrBy(ctx, wm, f, 1000).Err(); err != nil {
				t.Fatal(err)
			}
			raised++
		}
	}
	if raised == 0 {
		t.Fatal("no watermark to raise")
	}
	b.produce(t, 1000, 100)
	r2 := b.start(t, "r2", nil)
	b.waitRelayed(t, 500, 60*time.Second)
	for i := 1000; i < 1100; i++ {
		id := "j" + strconv.Itoa(i)
		if e := b.entry(t, "g"+strconv.Itoa(i/10), id); e.Envelope != string(b.sent[id]) {
			t.Fatalf("job %s written after the truncation: %+v", id, e)
		}
	}
	if n := metric(t, r2.relay, "sluice_relay_watermark_truncations_total"); n != float64(raised) {
		t.Fatalf("sluice_relay_watermark_truncations_total %v, want %d (one per raised watermark)", n, raised)
	}
}
