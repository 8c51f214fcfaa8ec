package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/stack"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// afterCleanup runs fn in a subtest and returns what it recorded, once the
// subtest and so all its cleanups have finished.
func afterCleanup[T any](t *testing.T, fn func(t *testing.T) T) T {
	t.Helper()
	var v T
	if !t.Run("use", func(t *testing.T) { v = fn(t) }) {
		t.FailNow()
	}
	return v
}

type leftovers struct {
	addrs []string
	dir   string
}

func assertReleased(t *testing.T, what string, l leftovers) {
	t.Helper()
	for _, addr := range l.addrs {
		if err := stack.CheckAddrFree(addr, what, ""); err != nil {
			t.Errorf("after cleanup: %v", err)
		}
	}
	if l.dir == "" {
		return
	}
	if _, err := os.Stat(l.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after cleanup, %s dir %s still exists (stat: %v)", what, l.dir, err)
	}
}

func TestRedis(t *testing.T) {
	l := afterCleanup(t, func(t *testing.T) leftovers {
		s := Redis(t)
		ctx := ctxFor(t)
		c := s.Client()
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("GET k = %q, %v", got, err)
		}

		// Stop and Restart without AOF: the server comes back, empty.
		s.Stop()
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("PING succeeded on a stopped server")
		}
		s.Restart()
		if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET k after a restart without AOF: %v, want redis.Nil", err)
		}
		return leftovers{addrs: []string{s.Addr()}, dir: s.Dir()}
	})
	assertReleased(t, "redis", l)
}

func TestRedisAOFSurvivesKill(t *testing.T) {
	s := Redis(t, WithAOF())
	ctx := ctxFor(t)
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	s.Restart()
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k after kill -9 and restart = %q, %v; want v", got, err)
	}
	if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Restart()
	if got, err := c.MGet(ctx, "k", "k2").Result(); err != nil || len(got) != 2 || got[0] != "v" || got[1] != "v2" {
		t.Fatalf("MGET after stop and restart = %v, %v", got, err)
	}
}

func TestRedisMaxMemory(t *testing.T) {
	s := Redis(t, WithMaxMemory("2mb"))
	ctx := ctxFor(t)
	big := strings.Repeat("x", 64<<10)
	for i := range 200 {
		err := s.Client().Set(ctx, "k"+string(rune('a'+i%26))+strings.Repeat("y", i), big, 0).Err()
		if err == nil {
			continue
		}
		if !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("SET failed with %v, want an OOM error", err)
		}
		return
	}
	t.Fatal("wrote 12 MiB into a 2mb server without an OOM error (noeviction)")
}

func TestConsul(t *testing.T) {
	l := afterCleanup(t, func(t *testing.T) leftovers {
		s := Consul(t)
		kv := s.Client().KV()
		if _, err := kv.Put(&consulapi.KVPair{Key: "sluice/k", Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
		p, _, err := kv.Get("sluice/k", nil)
		if err != nil || p == nil || string(p.Value) != "v" {
			t.Fatalf("get sluice/k = %v, %v", p, err)
		}

		s.Stop()
		if _, err := s.Client().Status().Leader(); err == nil {
			t.Fatal("a stopped agent answered")
		}
		s.Restart()
		leader, err := s.Client().Status().Leader()
		if err != nil || leader == "" {
			t.Fatalf("leader after restart = %q, %v", leader, err)
		}
		// Dev mode: the restarted agent starts with an empty KV store.
		if p, _, err := kv.Get("sluice/k", nil); err != nil || p != nil {
			t.Fatalf("get sluice/k after restart = %v, %v; want nothing", p, err)
		}
		if _, err := kv.Put(&consulapi.KVPair{Key: "sluice/k", Value: []byte("v2")}, nil); err != nil {
			t.Fatal(err)
		}
		return leftovers{addrs: []string{s.Addr()}, dir: s.Dir()}
	})
	assertReleased(t, "consul", l)
}

func newKafkaClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryTimeout(20 * time.Second),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeAll reads topic from the start until it has n records.
func consumeAll(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := newKafkaClient(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := ctxFor(t)
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records from %s: %v", len(recs), n, topic, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetching %s/%d: %v", topic, p, err) })
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// partitions asks the cluster, as a client would, how many partitions topic has.
func partitions(t *testing.T, cl *kgo.Client, topic string) int {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxFor(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("metadata for %s: %+v", topic, resp.Topics)
	}
	return len(resp.Topics[0].Partitions)
}

func TestKafka(t *testing.T) {
	l := afterCleanup(t, func(t *testing.T) leftovers {
		k := Kafka(t, Topic("orders", 3))
		cl := newKafkaClient(t, k.Brokers())
		ctx := ctxFor(t)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 2, Value: []byte("hello")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		recs := consumeAll(t, k.Brokers(), "orders", 1)
		if string(recs[0].Value) != "hello" || recs[0].Partition != 2 {
			t.Fatalf("consumed %q from partition %d", recs[0].Value, recs[0].Partition)
		}
		// No auto-creation: producing to a missing topic must fail.
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if err := cl.ProduceSync(pctx, &kgo.Record{Topic: "missing", Value: []byte("x")}).FirstErr(); err == nil {
			t.Fatal("produced to a topic nobody created")
		}
		k.CreateTopic("late", 2)
		if n := partitions(t, cl, "late"); n != 2 {
			t.Fatalf("topic late has %d partitions, want 2", n)
		}
		return leftovers{addrs: k.Brokers()}
	})
	assertReleased(t, "kafka", l)
}

func TestKafkaRestartFromDataDir(t *testing.T) {
	k := Kafka(t, Topic("events", 4), DataDir(t.TempDir()))
	brokers := k.Brokers()
	ctx := ctxFor(t)
	// One producer across the restart, as a service would have.
	prod := newKafkaClient(t, brokers)
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "events", Partition: 3, Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	k.Restart()
	if got := k.Brokers(); strings.Join(got, ",") != strings.Join(brokers, ",") {
		t.Fatalf("brokers %v after restart, want %v", got, brokers)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "events", Partition: 3, Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("producing after restart: %v", err)
	}
	recs := consumeAll(t, brokers, "events", 2)
	if string(recs[0].Value) != "before" || string(recs[1].Value) != "after" || recs[0].Offset != 0 || recs[1].Offset != 1 {
		t.Fatalf("records after restart: %q@%d, %q@%d", recs[0].Value, recs[0].Offset, recs[1].Value, recs[1].Offset)
	}
	if n := partitions(t, newKafkaClient(t, brokers), "events"); n != 4 {
		t.Fatalf("events has %d partitions after restart, want 4", n)
	}
}

func TestKafkaThreeBrokers(t *testing.T) {
	if m, _ := mode(); m == modeDocker {
		t.Skip("the docker test bed runs one broker and has no fault injection")
	}
	k := Kafka(t, Brokers(3), Topic("spread", 6))
	if n := len(k.Brokers()); n != 3 {
		t.Fatalf("%d brokers, want 3", n)
	}
	// kfake picks leaders at random; put two on each broker so the
	// client has to talk to all three.
	for p := range int32(6) {
		k.MoveTopicPartition("spread", p, p%3)
	}
	// Only the first broker as seed: the client must find the others.
	cl := newKafkaClient(t, k.Brokers()[:1])
	ctx := ctxFor(t)
	for p := range int32(6) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "spread", Partition: p, Value: []byte{byte(p)}}).FirstErr(); err != nil {
			t.Fatalf("producing to partition %d: %v", p, err)
		}
	}
	// Moving a leader is a fault the client must follow.
	k.MoveTopicPartition("spread", 0, 1)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "spread", Partition: 0, Value: []byte("moved")}).FirstErr(); err != nil {
		t.Fatalf("producing after the leader moved: %v", err)
	}
	if recs := consumeAll(t, k.Brokers(), "spread", 7); len(recs) != 7 {
		t.Fatalf("consumed %d records, want 7", len(recs))
	}
}

// fatalTB records Fatalf instead of failing the real test.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// runFatal calls fn with a TB whose Fatalf ends fn, and returns the message.
func runFatal(t *testing.T, fn func(tb testing.TB)) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	return tb.msg
}

// A missing binary fails the test with how to get it; it never skips.
func TestMissingBinaryFails(t *testing.T) {
	if m, _ := mode(); m != modeProcess {
		t.Skip("binaries matter only to the process test bed")
	}
	t.Run("redis", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		msg := runFatal(t, func(tb testing.TB) { Redis(tb) })
		if !strings.Contains(msg, "apt-get install redis-server") {
			t.Fatalf("Fatalf(%q), want the install hint", msg)
		}
	})
	t.Run("consul", func(t *testing.T) {
		t.Setenv("SLUICE_CONSUL_BIN", "/nonexistent/consul")
		msg := runFatal(t, func(tb testing.TB) { Consul(tb) })
		if !strings.Contains(msg, "make consul") {
			t.Fatalf("Fatalf(%q), want the build hint", msg)
		}
	})
}

func TestStartVariants(t *testing.T) {
	r, err := StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Client().Ping(ctxFor(t)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	assertReleased(t, "redis", leftovers{addrs: []string{r.Addr()}, dir: r.Dir()})

	k, err := StartKafka(Topic("t", 1))
	if err != nil {
		t.Fatal(err)
	}
	brokers := k.Brokers()
	k.Close()
	assertReleased(t, "kafka", leftovers{addrs: brokers})

	// Without a test to fail, control methods panic.
	if m, _ := mode(); m == modeDocker {
		return // a container restarts without DataDir
	}
	k, err = StartKafka()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Restart without DataDir did not panic")
			}
		}()
		k.Restart()
	}()
}

func TestUnknownMode(t *testing.T) {
	t.Setenv(EnvMode, "vm")
	if _, err := StartRedis(); err == nil || !strings.Contains(err.Error(), "SLUICE_TESTENV") {
		t.Fatalf("err = %v, want one naming SLUICE_TESTENV", err)
	}
}
