package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/worker"
)

// A relay and a worker on a 3-master Redis Cluster (--redis-cluster): while
// jobs flow from Kafka through the relay to the worker, the slot of the
// busiest queue partition moves to another master, its keys MIGRATEd ten
// at a time between batches of new jobs; then the slot of that partition's
// shared keys, while a coordinator command waits on its list. Every job runs, once: the relay
// applied no Kafka record twice (a second entry would run again, with
// attempt 1) and no claim or ack went twice. The ledger counts each call
// of the handler, as the chaos suite's does.
func TestRelayAndWorkerOnAClusterWhileASlotMoves(t *testing.T) {
	const (
		topic  = "jobs"
		kParts = 4
		parts  = 4
		total  = 4000
		chunk  = 100
	)
	k := testenv.Kafka(t, testenv.Topic(topic, kParts), testenv.Topic(topic+".dlq", 1))
	consul := testenv.Consul(t)
	cluster := testenv.NewRedisCluster(t, 3)
	loc := queue.StageRedis{Stage: "test", RedisAddr: cluster.Seeds(), Partitions: parts, RedisCluster: true}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// The ledger: every call of the handler.
	var (
		mu    sync.Mutex
		calls = map[string][]int{} // job id -> attempts it ran with
	)
	wcfg := worker.DefaultConfig()
	wcfg.StageRedis = loc
	wcfg.ConsulAddr = consul.Addr()
	wcfg.Workers = 8
	wcfg.Backoff, wcfg.MaxBackoff = 20*time.Millisecond, 100*time.Millisecond
	wcfg.Maintain = 50 * time.Millisecond
	wcfg.Drain = 200 * time.Millisecond
	w, err := worker.New(wcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("t", worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		calls[j.ID] = append(calls[j.ID], j.Attempt)
		mu.Unlock()
		return nil, nil
	}))
	wctx, wstop := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() {
		wstop()
		if err := <-wdone; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()

	rcfg := relay.DefaultConfig()
	rcfg.StageRedis = loc
	rcfg.Topics = []string{topic}
	rcfg.Kafka.Brokers = k.Brokers()
	rcfg.ConsulAddr = consul.Addr()
	rcfg.LockTTL = 10 * time.Second // Consul's minimum
	rcfg.LockDelay = time.Second
	rcfg.CommitEvery = 100 * time.Millisecond
	rcfg.DurableAfter = 500 * time.Millisecond
	rcfg.MemorySample = 50 * time.Millisecond
	r, err := relay.New(ctx, rcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rctx, rstop := context.WithCancel(ctx)
	rdone := make(chan error, 1)
	go func() { rdone <- r.Serve(rctx, ln) }()
	defer func() {
		rstop()
		if err := <-rdone; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()

	kcfg := kafka.Config{Brokers: k.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none"}
	prod, err := kafka.NewProducer(&kcfg, kafka.ProducerOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// Groups of ten: one in three on partition 0, whose slot moves.
	layout := loc.Keyspace()
	var busy []string
	for g := 0; len(busy) < 40; g++ {
		if name := "g" + strconv.Itoa(g); layout.PartitionOf(name) == 0 {
			busy = append(busy, name)
		}
	}
	sent := 0
	produce := func() {
		t.Helper()
		msgs := make([]kafka.Message, 0, chunk)
		for i := sent; i < sent+chunk; i++ {
			group := "g" + strconv.Itoa(i/10)
			if i%3 == 0 {
				group = busy[(i/10)%len(busy)]
			}
			id := "j" + strconv.Itoa(i)
			env := job.Job{ID: id, Topic: topic, Type: "t", Group: group, Payload: []byte(`{"n":"` + id + `"}`), EnqueuedAt: time.Now()}
			msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(group), Value: env.AppendJSON(nil), Partition: -1})
		}
		res, err := prod.Produce(ctx, kafka.AcksAll, msgs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		sent += chunk
	}
	ran := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(calls)
	}

	for sent < total/4 {
		produce()
	}
	// The first move: partition 0's queue of the topic, while new jobs
	// arrive for it.
	slot := cluster.Slot(layout.Keys(queue.Queue{Topic: topic, Part: 0}).Lanes())
	from := cluster.Owner(slot)
	testenv.WaitFor(t, 20*time.Second, "jobs to flow through partition 0", func() bool {
		n, _ := cluster.Node(from).ClusterCountKeysInSlot(ctx, slot).Result()
		return ran() > 0 && n > 0
	})
	to := other(cluster, from)
	m := cluster.StartMigration(slot, to)
	for m.Step(10) > 0 || sent < total/2 {
		if sent < total/2 {
			produce() // new jobs while the slot is split between two masters
		}
	}
	m.Finish(10)

	// The second: partition 0's shared keys (the workers' heartbeats and
	// checkpoint, the coordinator's command list, which idle consumers
	// poll), with a coordinator command pushed as it starts.
	pool, err := queue.NewPool(loc.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	shared := cluster.Slot(layout.PartKeys(0).Cmd())
	sharedTo := other(cluster, cluster.Owner(shared))
	m2 := cluster.StartMigration(shared, sharedTo)
	if err := pool.PushCommand(ctx, queue.Command{Type: queue.ScaleUp, Partition: 0, TargetWorkers: 11, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	for m2.Step(1) > 0 || sent < total*3/4 {
		if sent < total*3/4 {
			produce()
		}
	}
	m2.Finish(1)
	for sent < total {
		produce()
	}
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("all %d jobs to run", total), func() bool { return ran() >= total })
	testenv.WaitFor(t, 10*time.Second, "the worker to apply the command", func() bool {
		n, _ := pool.Client(0).Get(ctx, layout.PartKeys(0).WorkerCount()).Int()
		return n == 11
	})
	if got := cluster.Owner(slot); got != to {
		t.Fatalf("slot %d on %s after the move, want %s", slot, got, to)
	}
	if got := cluster.Owner(shared); got != sharedTo {
		t.Fatalf("slot %d on %s after the move, want %s", shared, got, sharedTo)
	}
	if m.Moved == 0 || m2.Moved == 0 {
		t.Fatalf("the migrations moved %d and %d keys", m.Moved, m2.Moved)
	}

	mu.Lock()
	defer mu.Unlock()
	var lost, twiceApplied, reran []string
	for i := range total {
		id := "j" + strconv.Itoa(i)
		a := calls[id]
		firsts := 0
		for _, attempt := range a {
			if attempt == 1 {
				firsts++
			}
		}
		switch {
		case len(a) == 0:
			lost = append(lost, id)
		case firsts > 1:
			twiceApplied = append(twiceApplied, id)
		case len(a) > 1:
			reran = append(reran, id)
		}
	}
	if len(calls) != total {
		t.Errorf("%d jobs ran, %d sent", len(calls), total)
	}
	if len(lost) > 0 || len(twiceApplied) > 0 || len(reran) > 0 {
		t.Fatalf("lost %d %.10v; applied twice by the relay (two first attempts) %d %.10v; run again %d %.10v",
			len(lost), lost, len(twiceApplied), twiceApplied, len(reran), reran)
	}
	t.Logf("%d jobs ran once each; %d keys of slot %d moved from %s to %s mid-flow, then %d of slot %d", total, m.Moved, slot, from, to, m2.Moved, shared)
}

// other is a master of c other than addr.
func other(c *testenv.RedisCluster, addr string) string {
	if a := c.Addrs()[0]; a != addr {
		return a
	}
	return c.Addrs()[1]
}

// testLog writes a part's log lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
