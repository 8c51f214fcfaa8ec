package client_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

const (
	topic      = "jobs"
	kafkaParts = 2
	stage      = "clienttest"
)

// bed is a real gate and relay in process, in front of kfake, Redis and
// Consul: a job the client enqueues can be counted in Kafka and in Redis.
type bed struct {
	kafka  *testenv.KafkaCluster
	redis  *testenv.RedisServer
	gate   *gate.Gate
	relay  *relay.Relay
	url    string
	layout queue.Keyspace

	mu       sync.Mutex
	statuses map[int]int // answers the gate gave, by status
	onStatus func(int)   // called with each answer's status, when set
}

func newBed(t *testing.T, mutate func(*gate.Config)) *bed { return newBedOn(t, nil, mutate) }

// newBedOn serves the gate on ln (nil: a free loopback port).
func newBedOn(t *testing.T, ln net.Listener, mutate func(*gate.Config)) *bed {
	t.Helper()
	b := &bed{
		kafka:    testenv.Kafka(t, testenv.Topic(topic, kafkaParts), testenv.Topic(topic+".dlq", 1), testenv.DataDir(t.TempDir())),
		redis:    testenv.Redis(t),
		layout:   queue.Keyspace{Stage: stage, Partitions: 2},
		statuses: map[int]int{},
	}
	consul := testenv.Consul(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())

	gcfg := gate.DefaultConfig()
	gcfg.Kafka.Brokers = b.kafka.Brokers()
	gcfg.AllowNoAuth = true
	gcfg.MetadataRefresh = time.Second
	gcfg.RetryAfter = time.Second
	gcfg.CallbackAllow = []string{"127.0.0.0/8"} // the tests' receivers
	gcfg.Stage, gcfg.RedisAddr, gcfg.Partitions = stage, b.redis.Addr(), b.layout.Partitions
	if mutate != nil {
		mutate(&gcfg)
	}
	g, err := gate.New(ctx, gcfg, log)
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	b.gate = g
	if ln == nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	b.url = "http://" + ln.Addr().String()
	// The gate's own handler, behind a recorder of the statuses it
	// answers: the tests wait on a 504 or a 503 having happened.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		g.Handler().ServeHTTP(rec, r)
		b.mu.Lock()
		b.statuses[rec.status]++
		hook := b.onStatus
		b.mu.Unlock()
		if hook != nil {
			hook(rec.status)
		}
	})}
	gateDone := make(chan error, 1)
	go func() { gateDone <- g.Run(ctx) }()
	go srv.Serve(ln)

	rcfg := relay.DefaultConfig()
	rcfg.Stage, rcfg.Partitions, rcfg.RedisAddr = stage, b.layout.Partitions, b.redis.Addr()
	rcfg.Kafka.Brokers = b.kafka.Brokers()
	rcfg.ConsulAddr = consul.Addr()
	rcfg.LockTTL, rcfg.LockDelay = 10*time.Second, time.Second
	rcfg.CommitEvery, rcfg.DurableAfter = 100*time.Millisecond, 200*time.Millisecond
	r, err := relay.New(ctx, rcfg, log)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	b.relay = r
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(ctx) }()

	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-relayDone; err != nil {
			t.Errorf("relay.Run: %v", err)
		}
		if err := <-gateDone; err != nil {
			t.Errorf("gate.Run: %v", err)
		}
	})
	return b
}

// client is a client of the bed's gate with a quick retry policy.
func (b *bed) client(t *testing.T, p client.RetryPolicy) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{URL: b.url, Retry: p})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *bed) answered(status int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.statuses[status]
}

func (b *bed) hook(f func(int)) {
	b.mu.Lock()
	b.onStatus = f
	b.mu.Unlock()
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// holdFirstProduce makes kfake hold the next produce request until release
// is closed; the requests after it are answered as usual (once it is).
//
// Only the first call of the control sleeps: a control that does not
// answer stays installed, and kfake calls it again (for the same request
// once it wakes, and for the next ones); sleeping again there raced in
// kfake's own sleep queue (go test -race, 2026-11-25).
func holdFirstProduce(k *testenv.KafkaCluster, release <-chan struct{}) {
	c := k.Cluster()
	var slept atomic.Bool
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if slept.CompareAndSwap(false, true) {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
}

// kafkaIDs counts the job ids of every record in the topic.
func (b *bed) kafkaIDs(t *testing.T) (map[string]int, int) {
	t.Helper()
	cfg := sarama.NewConfig()
	cl, err := sarama.NewClient(b.kafka.Brokers(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ids, records := map[string]int{}, 0
	for p := int32(0); p < kafkaParts; p++ {
		hwm, err := cl.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if hwm == 0 {
			continue
		}
		for _, m := range testenv.ReadRecords(t, b.kafka.Brokers(), topic, p, 0, int(hwm)) {
			records++
			var env struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(m.Value, &env) == nil && env.ID != "" {
				ids[env.ID]++
			}
		}
	}
	return ids, records
}

// relayedAll waits until the relay has read every record of the topic.
func (b *bed) relayedAll(t *testing.T) {
	t.Helper()
	_, records := b.kafkaIDs(t)
	testenv.WaitFor(t, 30*time.Second, "the relay to read every record", func() bool {
		return int(testenv.Metric(t, b.relay.Registry(), "sluice_relay_jobs_total", "topic", topic)) >= records
	})
}

// redisIDs counts the job ids of every entry on the topic's lanes in Redis
// (no worker runs, so every relayed job is ready there).
func (b *bed) redisIDs(t *testing.T) map[string]int {
	t.Helper()
	ctx := context.Background()
	rc := b.redis.Client()
	ids := map[string]int{}
	iter := rc.Scan(ctx, 0, "sluice:{"+stage+":"+topic+":p*}:lane:*", 1000).Iterator()
	for iter.Next(ctx) {
		if typ, _ := rc.Type(ctx, iter.Val()).Result(); typ != "list" {
			continue
		}
		entries, err := rc.LRange(ctx, iter.Val(), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			pe, err := queue.ParseEntry(e)
			if err != nil {
				t.Fatalf("entry %q: %v", e, err)
			}
			ids[pe.ID]++
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// onceEach fails unless Redis holds each of ids exactly once, and nothing
// else.
func (b *bed) onceEach(t *testing.T, ids []string) {
	t.Helper()
	b.relayedAll(t)
	got := b.redisIDs(t)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("job %s is in Redis %d times, want once", id, got[id])
		}
	}
	if len(got) != len(ids) {
		t.Errorf("Redis holds %d distinct jobs, want %d", len(got), len(ids))
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
