package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

const (
	topic      = "jobs"
	kParts     = 4
	redisParts = 4
)

// bed is the real test bed a relay runs against.
type bed struct {
	kafka  *testenv.KafkaCluster
	redis  *testenv.RedisServer
	consul *testenv.ConsulServer
	prod   *kafka.Producer
	layout queue.Keyspace
	sent   map[string][]byte // envelope by job id
}

func newBed(t *testing.T, redisOpts ...testenv.RedisOption) *bed {
	return newBedTB(t, kParts, redisOpts...)
}

// newBedTB starts the bed with parts Kafka partitions and as many Redis
// partitions.
func newBedTB(t testing.TB, parts int, redisOpts ...testenv.RedisOption) *bed {
	t.Helper()
	b := &bed{
		kafka:  testenv.Kafka(t, testenv.Topic(topic, int32(parts)), testenv.Topic(topic+".dlq", 1)),
		redis:  testenv.Redis(t, redisOpts...),
		consul: testenv.Consul(t),
		layout: queue.Keyspace{Stage: "test", Partitions: parts},
		sent:   map[string][]byte{},
	}
	kcfg := kafka.Config{Brokers: b.kafka.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none"}
	p, err := kafka.NewProducer(&kcfg, kafka.ProducerOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	b.prod = p
	return b
}

func (b *bed) config(mutate func(*relay.Config)) relay.Config {
	cfg := relay.DefaultConfig()
	cfg.Stage = b.layout.Stage
	cfg.Partitions = b.layout.Partitions
	cfg.Kafka.Brokers = b.kafka.Brokers()
	cfg.ConsulAddr = b.consul.Addr()
	cfg.RedisAddr = b.redis.Addr()
	cfg.LockTTL = 10 * time.Second // Consul's minimum
	cfg.LockDelay = time.Second
	cfg.CommitEvery = 100 * time.Millisecond
	cfg.DurableAfter = 500 * time.Millisecond
	cfg.MemorySample = 20 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	return cfg
}

type running struct {
	relay  *relay.Relay
	cancel context.CancelFunc
	done   chan error
}

func (b *bed) startB(t testing.TB, mutate func(*relay.Config)) *running {
	return b.start(t, "r", mutate)
}

func (b *bed) start(t testing.TB, name string, mutate func(*relay.Config)) *running {
	t.Helper()
	cfg := b.config(mutate)
	log := slog.New(slog.NewTextHandler(testWriter{t, name}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := relay.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{relay: r, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- r.Serve(ctx, ln) }()
	t.Cleanup(func() { run.stop(t) })
	return run
}

func (r *running) stop(t testing.TB) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil {
		t.Errorf("relay.Serve: %v", err)
	}
}

type testWriter struct {
	t    testing.TB
	name string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.name + ": " + strings.TrimSpace(string(p)))
	return len(p), nil
}

// entry finds job id's entry on the lane of group (which must be set) and
// fails the test if it is not there.
func (b *bed) entry(t *testing.T, group, id string) queue.ParsedEntry {
	t.Helper()
	k := b.layout.Keys(queue.Queue{Topic: topic, Part: b.layout.PartitionOf(group)})
	all, err := b.redis.Client().LRange(context.Background(), k.Lane(queue.LaneOf(group, "", topic, 0)), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if pe, err := queue.ParseEntry(e); err == nil && pe.ID == id {
			return pe
		}
	}
	t.Fatalf("job %s is not on group %s's lane (%d entries)", id, group, len(all))
	return queue.ParsedEntry{}
}

// envelope is a job as the gate writes it.
func envelope(id, group string) []byte {
	j := job.Job{ID: id, Topic: topic, Type: "t", Group: group, Payload: []byte(`{"n":"` + id + `","html":"<&>"}`), EnqueuedAt: time.Now()}
	return j.AppendJSON(nil)
}

// produce writes n jobs j<from>..j<from+n-1> in groups of ten.
func (b *bed) produce(t *testing.T, from, n int) {
	t.Helper()
	msgs := make([]kafka.Message, 0, n)
	for i := from; i < from+n; i++ {
		id, group := "j"+strconv.Itoa(i), "g"+strconv.Itoa(i/10)
		b.sent[id] = envelope(id, group)
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(group), Value: b.sent[id], Partition: -1})
	}
	b.produceRaw(t, msgs)
}

func (b *bed) produceRaw(t *testing.T, msgs []kafka.Message) {
	t.Helper()
	for len(msgs) > 0 {
		chunk := msgs[:min(len(msgs), 1000)]
		msgs = msgs[len(chunk):]
		res, err := b.prod.Produce(context.Background(), kafka.AcksLeader, chunk)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
}

// counts sums what the partitions hold: job hashes, ready ids, and the
// relayed counter.
func (b *bed) counts(t testing.TB) (jobs, ready, relayed int) {
	t.Helper()
	ctx := context.Background()
	rdb := b.redis.Client()
	for p := range b.layout.Partitions {
		k := b.layout.Keys(queue.Queue{Topic: topic, Part: p})
		laneKeys, err := rdb.Keys(ctx, k.Prefix()+"lane:*").Result()
		if err != nil && !strings.Contains(err.Error(), "connection refused") {
			t.Fatal(err)
		}
		for _, lk := range laneKeys {
			n, _ := rdb.LLen(ctx, lk).Result()
			ready += int(n)
		}
		delayed, _ := rdb.ZCard(ctx, k.Delayed()).Result()
		jobs += int(delayed)
		v, _ := rdb.HGet(ctx, k.Stats(), "relayed").Int()
		relayed += v
	}
	jobs += ready
	return
}

// waitCount waits until the partitions' relayed counters reach n: cheap
// enough for benchmarks with hundreds of thousands of jobs.
func (b *bed) waitCount(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	testenv.WaitFor(t, timeout, fmt.Sprintf("%d jobs relayed", n), func() bool {
		total := 0
		for p := range b.layout.Partitions {
			v, _ := b.redis.Client().HGet(ctx, b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Stats(), "relayed").Int()
			total += v
		}
		return total >= n
	})
}

func (b *bed) waitRelayed(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	testenv.WaitFor(t, timeout, fmt.Sprintf("%d jobs in Redis", n), func() bool {
		jobs, _, _ := b.counts(t)
		return jobs >= n
	})
	jobs, ready, relayed := b.counts(t)
	if jobs != n || ready != n || relayed != n {
		t.Fatalf("want every job exactly once: %d jobs held, %d on lanes, %d relayed; want %d each", jobs, ready, relayed, n)
	}
}

func (b *bed) committed(t *testing.T, group string) int64 {
	t.Helper()
	cfg := sarama.NewConfig()
	client, err := sarama.NewClient(b.kafka.Brokers(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2, 3}})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		return 0 // never committed (kfake says so; Kafka answers -1 offsets)
	}
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, blk := range resp.Blocks[topic] {
		if blk.Offset > 0 {
			total += blk.Offset
		}
	}
	return total
}

func TestRelayMovesEveryJobOnceAndCommits(t *testing.T) {
	b := newBed(t)
	b.produce(t, 0, 500)
	r := b.start(t, "r1", nil)
	b.waitRelayed(t, 500, 30*time.Second)
	if !r.relay.Holds(topic) {
		t.Fatal("the only relay does not hold the lock")
	}
	// Byte for byte from Kafka to Redis, as a plain entry: no key of its own.
	if e := b.entry(t, "g4", "j42"); e.Envelope != string(b.sent["j42"]) || e.Attempts != 0 {
		t.Fatalf("entry in Redis %+v, want the Kafka record's bytes %q and no attempt", e, b.sent["j42"])
	}
	k := b.layout.Keys(queue.Queue{Topic: topic, Part: b.layout.PartitionOf("g4")})
	if n, _ := b.redis.Client().Exists(context.Background(), k.Job("j42")).Result(); n != 0 {
		t.Fatal("a plain job got a job:<id> key")
	}
	testenv.WaitFor(t, 10*time.Second, "offsets committed up to the end", func() bool {
		return b.committed(t, "sluice-relay."+topic) == 500
	})
	// A second relay after a restart starts from the committed offsets:
	// nothing is relayed twice (and would be deduped if it were).
	r.stop(t)
	b.produce(t, 500, 100)
	b.start(t, "r2", nil)
	b.waitRelayed(t, 600, 30*time.Second)
}

// TestReplayAfterFailoverAppliesNothingTwice: a relay that starts from
// nothing committed (as a new holder after offsets were lost, or a
// rewind) replays the whole topic into a Redis that already holds its
// jobs; the watermark drops every record, however old.
func TestReplayAfterFailoverAppliesNothingTwice(t *testing.T) {
	b := newBed(t)
	b.produce(t, 0, 300)
	r := b.start(t, "r1", nil)
	b.waitRelayed(t, 300, 30*time.Second)
	r.stop(t)
	before, ready, _ := b.counts(t)
	// Another consumer group has no offsets: it reads every partition
	// from the oldest record.
	r2 := b.start(t, "r2", func(c *relay.Config) { c.ConsumerGroup = "replayer" })
	testenv.WaitFor(t, 30*time.Second, "the replay to be read and deduplicated", func() bool {
		return metricLabeled(t, r2.relay, "sluice_relay_jobs_total", "outcome", "duplicate") == 300
	})
	jobs, ready2, relayed := b.counts(t)
	if jobs != before || ready2 != ready || relayed != 300 || jobs != 300 {
		t.Fatalf("after the replay: %d jobs (%d before), %d ready (%d before), relayed %d; want 300 each, unchanged", jobs, before, ready2, ready, relayed)
	}
	deduped := 0
	for p := range b.layout.Partitions {
		n, _ := b.redis.Client().HGet(context.Background(), b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Stats(), "deduped").Int()
		deduped += n
	}
	if deduped != 300 {
		t.Fatalf("deduped %d, want 300", deduped)
	}
	// New records after the replay still go in.
	b.produce(t, 300, 10)
	b.waitRelayed(t, 310, 30*time.Second)
}

func TestPoisonGoesToTheDLQAndGoodJobsFlow(t *testing.T) {
	b := newBed(t)
	msgs := []kafka.Message{
		{Topic: topic, Key: []byte("g"), Value: envelope("good1", "g"), Partition: 0},
		{Topic: topic, Key: []byte("g"), Value: []byte(`{"type":"t",`), Partition: 0},
		{Topic: topic, Key: []byte("g"), Value: []byte(`{"type":"has space","id":"x"}`), Partition: 0},
		{Topic: topic, Key: []byte("g"), Value: []byte(`not json at all`), Partition: 0},
		{Topic: topic, Key: []byte("g"), Value: envelope("good2", "g"), Partition: 0},
		// No id: the relay derives one from the record's place in Kafka.
		{Topic: topic, Key: []byte("g"), Value: []byte(`{"type":"t","group":"g"}`), Partition: 0},
	}
	b.produceRaw(t, msgs)
	b.start(t, "r1", nil)
	b.waitRelayed(t, 3, 30*time.Second)
	for _, id := range []string{"good1", "good2", topic + "-0-5"} {
		if e := b.entry(t, "g", id); e.ID != id {
			t.Fatalf("good job %s not on its lane", id)
		}
	}
	var reasons []string
	for _, m := range testenv.ReadRecords(t, b.kafka.Brokers(), topic+".dlq", 0, sarama.OffsetOldest, 3) {
		reason, source := header(m, kafka.HeaderDLQReason), header(m, kafka.HeaderSource)
		if reason == "" || !strings.HasPrefix(source, topic+"/0/") {
			t.Fatalf("DLQ record without reason or source: %q %q", reason, source)
		}
		reasons = append(reasons, reason)
	}
	joined := strings.Join(reasons, "|")
	for _, want := range []string{"unexpected end of input", `field "type"`, "invalid character 'o'"} {
		if !strings.Contains(joined, want) {
			t.Fatalf("DLQ reasons %q lack %q", joined, want)
		}
	}
	// The stage funnel counts both kinds, summed over the partitions.
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: b.layout, Addr: b.redis.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	stages := map[string]int64{}
	for p := range b.layout.Partitions {
		f, err := pool.Funnel(context.Background(), queue.Queue{Topic: topic, Part: p})
		if err != nil {
			t.Fatal(err)
		}
		for stage, n := range f.Milestones[topic] {
			stages[stage] += n
		}
	}
	if stages[queue.MilestoneRelayed] != 3 || stages[queue.MilestoneDeadLettered] != 3 {
		t.Fatalf("funnel %v: want 3 relayed and 3 dead-lettered", stages)
	}
}

func TestTwoRelaysOneHolderAndGracefulHandOver(t *testing.T) {
	b := newBed(t)
	r1 := b.start(t, "r1", nil)
	testenv.WaitFor(t, 10*time.Second, "r1 to hold the lock", func() bool { return r1.relay.Holds(topic) })
	r2 := b.start(t, "r2", nil)
	b.produce(t, 0, 300)
	b.waitRelayed(t, 300, 30*time.Second)
	if r2.relay.Holds(topic) {
		t.Fatal("both relays hold the lock")
	}
	// A graceful stop hands over at once, well under lock-delay + TTL.
	start := time.Now()
	r1.stop(t)
	testenv.WaitFor(t, 10*time.Second, "r2 to take over", func() bool { return r2.relay.Holds(topic) })
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("graceful hand-over took %s", took)
	}
	b.produce(t, 300, 200)
	b.waitRelayed(t, 500, 30*time.Second)
}

func TestADeposedRelayWritesNothing(t *testing.T) {
	b := newBed(t)
	b.start(t, "r1", nil)
	b.produce(t, 0, 10)
	b.waitRelayed(t, 10, 30*time.Second)
	// A newer holder has written somewhere: raise every fence.
	ctx := context.Background()
	for p := range b.layout.Partitions {
		b.redis.Client().Set(ctx, b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Fence(), 1<<40, 0)
	}
	b.produce(t, 10, 10)
	testenv.WaitFor(t, 10*time.Second, "the fence to refuse the relay", func() bool {
		refused := 0
		for p := range b.layout.Partitions {
			v, _ := b.redis.Client().HGet(ctx, b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Stats(), "fenced").Int()
			refused += v
		}
		return refused > 0
	})
	if jobs, _, _ := b.counts(t); jobs != 10 {
		t.Fatalf("a fenced relay wrote: %d jobs", jobs)
	}
}

func TestRateFromConsulAppliesLive(t *testing.T) {
	b := newBed(t)
	kv := b.consul.Client().KV()
	key := "sluice/test/relay/" + topic + "/rate"
	if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: []byte(`{"rate":200,"burst":20}`)}, nil); err != nil {
		t.Fatal(err)
	}
	b.produce(t, 0, 3000)
	r := b.start(t, "r1", func(c *relay.Config) { c.BatchSize = 16 })
	// inForce waits (at most a second, the bound) until the relay
	// reports the new value in force.
	inForce := func(metric string, want float64) {
		t.Helper()
		testenv.WaitFor(t, time.Second, fmt.Sprintf("%s = %v within a second", metric, want), func() bool {
			return metricLabeled(t, r.relay, metric, "topic", topic) == want
		})
	}
	measure := func(d time.Duration) float64 {
		_, _, before := b.counts(t)
		start := time.Now()
		time.Sleep(d) // the measurement window, not synchronisation
		_, _, after := b.counts(t)
		return float64(after-before) / time.Since(start).Seconds()
	}
	testenv.WaitFor(t, 10*time.Second, "relaying to start", func() bool { _, _, n := b.counts(t); return n > 0 })
	if got := measure(2 * time.Second); got < 180 || got > 220 {
		t.Fatalf("rate %.0f/s with 200/s configured", got)
	}
	if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: []byte(`500`)}, nil); err != nil {
		t.Fatal(err)
	}
	inForce("sluice_relay_rate_limit_jobs_per_second", 500)
	if got := measure(2 * time.Second); got < 450 || got > 550 {
		t.Fatalf("rate %.0f/s after changing it to 500/s", got)
	}
	if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: []byte(`paused`)}, nil); err != nil {
		t.Fatal(err)
	}
	inForce("sluice_relay_rate_paused", 1)
	if got := measure(time.Second); got > 20 { // a batch in hand may finish
		t.Fatalf("rate %.0f/s while paused", got)
	}
}

func TestRedisRestartMidStreamLosesAndDoublesNothing(t *testing.T) {
	b := newBed(t, testenv.WithAOF())
	b.start(t, "r1", func(c *relay.Config) { c.BatchSize = 32 })
	b.produce(t, 0, 200)
	b.waitRelayed(t, 200, 30*time.Second)
	b.redis.Stop()
	b.produce(t, 200, 300) // arrives while Redis is down
	b.redis.Restart()
	b.waitRelayed(t, 500, 60*time.Second)
}

func TestMemoryGuardKeepsRedisFromOOM(t *testing.T) {
	b := newBed(t, testenv.WithMaxMemory("8mb"))
	r := b.start(t, "r1", func(c *relay.Config) { c.BatchSize = 64 })
	// Each job is ~1.2 KiB in Redis: 20k would need ~25 MiB.
	msgs := make([]kafka.Message, 0, 20000)
	pad := strings.Repeat("x", 1000)
	for i := range 20000 {
		id, group := "j"+strconv.Itoa(i), "g"+strconv.Itoa(i%50)
		j := job.Job{ID: id, Topic: topic, Type: "t", Group: group, Payload: []byte(`"` + pad + `"`)}
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(group), Value: j.AppendJSON(nil), Partition: -1})
	}
	b.produceRaw(t, msgs)
	testenv.WaitFor(t, 30*time.Second, "the memory guard to pause relaying", func() bool {
		return metric(t, r.relay, "sluice_relay_memory_guard_paused") == 1
	})
	jobs, _, _ := b.counts(t)
	if jobs >= 20000 {
		t.Fatal("everything fit: the test proves nothing")
	}
	// Workers drain: delete what was relayed (keeping the fences and
	// stats), and the relay goes on until everything passed through.
	seen := map[string]bool{}
	testenv.WaitFor(t, 2*time.Minute, "every job to pass through Redis", func() bool {
		for p := range b.layout.Partitions {
			for _, id := range drain(t, b.redis.Client(), b.layout.Keys(queue.Queue{Topic: topic, Part: p})) {
				seen[id] = true
			}
		}
		return len(seen) == 20000
	})
	if v := metric(t, r.relay, "sluice_relay_redis_retries_total"); v != 0 {
		t.Fatalf("the relay met %v Redis refusals (OOM): the guard must keep it below maxmemory", v)
	}
	_, _, relayed := b.counts(t)
	if relayed != 20000 {
		t.Fatalf("relayed %d, want 20000", relayed)
	}
}

// drain takes every entry off the partition's lanes, as workers finishing
// them would, and returns their ids.
func drain(t *testing.T, rdb *redis.Client, k queue.Keys) []string {
	ctx := context.Background()
	laneKeys, _ := rdb.Keys(ctx, k.Prefix()+"lane:*").Result()
	var ids []string
	for _, lk := range laneKeys {
		entries, err := rdb.LPopCount(ctx, lk, 100000).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			pe, err := queue.ParseEntry(e)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, pe.ID)
		}
	}
	return ids
}

func TestShadowWritesNothing(t *testing.T) {
	b := newBed(t)
	r := b.start(t, "r1", func(c *relay.Config) { c.Shadow = true })
	b.produce(t, 0, 50)
	testenv.WaitFor(t, 20*time.Second, "the shadow relay to read everything", func() bool {
		return metricLabeled(t, r.relay, "sluice_relay_jobs_total", "outcome", "shadowed") == 50
	})
	if jobs, _, _ := b.counts(t); jobs != 0 {
		t.Fatalf("shadow relay wrote %d jobs", jobs)
	}
	if c := b.committed(t, "sluice-relay."+topic); c != 0 {
		t.Fatalf("shadow relay committed offsets up to %d", c)
	}
}

// metric sums a metric's values over its labels.
func metric(t *testing.T, r *relay.Relay, name string) float64 {
	return metricLabeled(t, r, name, "", "")
}

// metricLabeled sums a metric's values whose label has value (any when label is "").
func metricLabeled(t *testing.T, r *relay.Relay, name, label, value string) float64 {
	t.Helper()
	if label == "" {
		return testenv.Metric(t, r.Registry(), name)
	}
	return testenv.Metric(t, r.Registry(), name, label, value)
}

func TestJobSpecificRedisErrorRequeuesThenDeadLetters(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	// The group's lane key holds a string: Redis refuses its jobs, and
	// only its jobs.
	bad := b.layout.Keys(queue.Queue{Topic: topic, Part: b.layout.PartitionOf("broken")})
	b.redis.Client().Set(ctx, bad.Lane(queue.LaneOf("broken", "", topic, 0)), "not a list", 0)
	b.produceRaw(t, []kafka.Message{
		{Topic: topic, Key: []byte("broken"), Value: envelope("victim", "broken"), Partition: 1},
		{Topic: topic, Key: []byte("fine"), Value: envelope("ok1", "fine"), Partition: 1},
	})
	r := b.start(t, "r1", func(c *relay.Config) { c.MaxRequeues = 2 })
	b.waitRelayed(t, 1, 30*time.Second)
	m := testenv.ReadRecords(t, b.kafka.Brokers(), topic+".dlq", 0, sarama.OffsetOldest, 1)[0]
	if reason := header(m, kafka.HeaderDLQReason); !strings.Contains(reason, "3 times") || !strings.Contains(reason, "wrong type") || !strings.Contains(string(m.Value), `"id":"victim"`) {
		t.Fatalf("dead letter %s with reason %q", m.Value, reason)
	}
	if n := metricLabeled(t, r.relay, "sluice_relay_jobs_total", "outcome", "requeued"); n != 2 {
		t.Fatalf("requeued %v times, want 2", n)
	}
	if n := metricLabeled(t, r.relay, "sluice_relay_jobs_total", "outcome", "dead_lettered"); n != 1 {
		t.Fatalf("dead-lettered %v, want 1", n)
	}
	if n, _ := b.redis.Client().HGet(ctx, bad.Group("broken"), "relayed").Int(); n != 0 {
		t.Fatalf("a refused job was counted relayed (%d)", n)
	}
}

// header is the value of a record's header, "" if absent.
func header(m *sarama.ConsumerMessage, key string) string {
	for _, h := range m.Headers {
		if string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// A relay that cannot write (paused here) shows its lag growing, read from
// Kafka's end offsets; a relay that stops relaying the topic removes its
// lag series, so only the holder reports lag.
func TestLagShowsWhilePausedAndGoesWithTheRelay(t *testing.T) {
	b := newBed(t)
	kv := b.consul.Client().KV()
	key := "sluice/test/relay/" + topic + "/rate"
	if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: []byte(`paused`)}, nil); err != nil {
		t.Fatal(err)
	}
	r := b.start(t, "r1", func(c *relay.Config) { c.LagEvery = 50 * time.Millisecond })
	testenv.WaitFor(t, 10*time.Second, "the relay to hold the lock", func() bool { return r.relay.Holds(topic) })
	b.produce(t, 0, 50)
	testenv.WaitFor(t, 10*time.Second, "a lag of 50 while paused", func() bool {
		return metricLabeled(t, r.relay, "sluice_relay_lag_messages", "topic", topic) == 50
	})
	if _, err := kv.Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	b.waitRelayed(t, 50, 30*time.Second)
	testenv.WaitFor(t, 10*time.Second, "the lag back to 0", func() bool {
		return metricLabeled(t, r.relay, "sluice_relay_lag_messages", "topic", topic) == 0
	})
	r.stop(t)
	mfs, err := r.relay.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_relay_lag_messages" && len(mf.GetMetric()) > 0 {
			t.Fatalf("a stopped relay still reports lag for %d partitions", len(mf.GetMetric()))
		}
	}
}

// Regression (issue 32: a job sent while its topic's rate was paused
// looked up as not-found): the relays record the pause in Redis, so the
// lookup says the job waits in Kafka on the paused rate; once resumed and
// relayed, it is on its lane.
func TestLookupSaysAPausedRateHoldsTheJob(t *testing.T) {
	b := newBed(t)
	kv := b.consul.Client().KV()
	key := "sluice/test/relay/" + topic + "/rate"
	if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: []byte(`paused`)}, nil); err != nil {
		t.Fatal(err)
	}
	r := b.start(t, "r1", nil)
	testenv.WaitFor(t, 10*time.Second, "the relay to hold the lock", func() bool { return r.relay.Holds(topic) })
	b.produce(t, 0, 1) // j0, group g0
	pool := b.pool(t)
	look := func() queue.JobWhereabouts {
		w, err := pool.FindJob(context.Background(), queue.JobLookup{Topic: topic, ID: "j0", Group: "g0"})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	testenv.WaitFor(t, 10*time.Second, "the lookup to say the rate holds the job", func() bool { return look().Where == queue.WhereRatePaused })
	if v := look().View(queue.JobLookup{Topic: topic, ID: "j0"}); !strings.Contains(v.Note, "paused") || v.Until == nil {
		t.Fatalf("the paused job's view: %+v", v)
	}
	if _, err := kv.Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the job relayed once resumed", func() bool { return look().Where == queue.WhereReady })
	if paused, err := pool.TopicPaused(context.Background(), topic); err != nil || !paused.IsZero() {
		t.Fatalf("the pause after the resume: %v %v", paused, err)
	}
}
