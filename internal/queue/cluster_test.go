package queue

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

// clusterPool is a pool of partitions on the Redis Cluster c, its clock
// fixed at now (batch names carry their claim time).
func clusterPool(t *testing.T, c *testenv.RedisCluster, partitions int) *Pool {
	t.Helper()
	p, err := NewPool(PoolConfig{Keyspace: Keyspace{Stage: "test", Partitions: partitions}, Addr: c.Seeds(), Cluster: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// dumpCluster is dump over every master of c: each key lives on one.
func dumpCluster(t *testing.T, c *testenv.RedisCluster, drop func(key, field string) bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, addr := range c.Addrs() {
		maps.Copy(out, dump(t, c.Node(addr), drop))
	}
	return out
}

// flushScripts empties every master's script cache, as a restart or a new
// master does.
func flushScripts(t *testing.T, c *testenv.RedisCluster) {
	t.Helper()
	for _, addr := range c.Addrs() {
		if err := c.Node(addr).ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// The same work on a 3-master Redis Cluster and on one Redis leaves the same
// keys with the same contents: relayed records of every kind (groups,
// shared lanes, delayed, client-chosen ids, a bulk group and its close),
// claims, acks, retries, deaths, promotes, reaps, a replay of every record
// (all duplicates), idempotency keys, rate-limit schedules and a finished
// group's transaction. The
// partitions' slots are spread over the masters, so pipelines span nodes,
// and the script caches are flushed midway (NOSCRIPT: reloaded).
func TestClusterEndsAsOneRedisDoes(t *testing.T) {
	c := testenv.NewRedisCluster(t, 3)
	r := testenv.Redis(t)
	const parts = 8
	p := clusterPool(t, c, parts)
	ref, err := NewPool(PoolConfig{Keyspace: Keyspace{Stage: "test", Partitions: parts}, Addr: r.Addr(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ref.batchPrefix = p.batchPrefix // the same batch names, claim for claim
	ctx := context.Background()

	masters := map[string]bool{}
	for part := range parts {
		masters[c.Owner(c.Slot(p.Keyspace().Keys(jq(part)).Lanes()))] = true
		masters[c.Owner(c.Slot(p.Keyspace().PartKeys(part).Cmd()))] = true
	}
	if len(masters) < 2 {
		t.Fatalf("every partition on one master (%v): the test would not span nodes", masters)
	}
	if !p.Cluster() || ref.Cluster() {
		t.Fatal("Cluster() does not tell the pools apart")
	}
	if err := p.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if ep, err := p.Epoch(ctx); err != nil || strings.Count(ep, ",") != 2 {
		t.Fatalf("epoch %q %v: want the 3 masters' run ids", ep, err)
	}

	recs := append(kafkaPartition(3, 300), kafkaPartition(5, 60)...)
	limits := DeadLimits{Max: 100, Keep: time.Hour}
	for _, pool := range []*Pool{p, ref} {
		// The cluster's cache is flushed after the first batch: the
		// pipelined EVALSHAs of the next one meet NOSCRIPT on every
		// master and are loaded and sent again.
		for b := 0; b < len(recs); b += 100 {
			if b == 100 && pool == p {
				flushScripts(t, c)
			}
			for i, res := range enqueueOK(t, pool, 1, recs[b:min(b+100, len(recs))], now) {
				if res.Outcome == Failed || res.Outcome == Fenced {
					t.Fatalf("record %d: %v %v", b+i, res.Outcome, res.Err)
				}
			}
		}
		work(t, pool)
		if pool == p {
			flushScripts(t, c) // script.run falls back to EVAL
		}
		for part := range parts {
			if _, err := pool.Promote(ctx, jq(part), 100, now.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			// Every batch left in flight expires: the reap takes it back
			// (deadlines are each Redis's own clock, which the two do not
			// share, so none may be left in the dumps).
			leased, err := pool.Client(part).ZRange(ctx, pool.Keyspace().Keys(jq(part)).Leases(), 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(leased) > 0 {
				expireLeases(t, pool, jq(part), leased...)
			}
			if _, _, err := pool.Reap(ctx, jq(part), 100, limits, nil); err != nil {
				t.Fatal(err)
			}
			jobs, err := pool.Claim(ctx, jq(part), 10, 3*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if kept, err := pool.Extend(ctx, jq(part), []string{"gone"}, 4*time.Minute); err != nil || len(kept) != 1 || kept[0] {
				t.Fatalf("extend: %v %v", kept, err)
			}
			ack(t, pool, part, jobs...)
			dead, err := pool.DeadPage(ctx, jq(part), 1<<62, "", 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range dead {
				if _, err := pool.ReplayDead(ctx, jq(part), d.ID, now); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, res := range enqueueOK(t, pool, 2, recs, now.Add(time.Minute)) {
			if res.Outcome != Duplicate {
				t.Fatalf("replayed record: %v %v", res.Outcome, res.Err)
			}
		}
		if st, err := pool.GroupStatus(ctx, "jobs", "bulk"); err != nil || !st.Found || st.Relayed == 0 {
			t.Fatalf("bulk group: %+v %v", st, err)
		}
		for i := range 20 {
			key := fmt.Sprintf("key-%d", i)
			if begun, err := pool.IdempotencyBegin(ctx, key, "j", 1, time.Hour); err != nil || !begun.Run {
				t.Fatalf("idempotency %s: %+v %v", key, begun, err)
			}
			if _, err := pool.IdempotencyEnd(ctx, key, "j", 1, i%2 == 0, time.Hour); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Reserve(ctx, Reservation{Resource: fmt.Sprintf("res-%d", i), Job: "j", Limit: "10/s", Interval: 100 * time.Millisecond, Burst: 1, Hold: time.Second}, now); err != nil {
				t.Fatal(err)
			}
		}
		// The coordinator's one MULTI/EXEC, on the bulk group's slot.
		if err := pool.FinishCompleted(ctx, "jobs", "bulk", map[string]any{"callback": "delivered"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := pool.RegisterTopics(ctx, []string{"jobs"}, now); err != nil {
			t.Fatal(err)
		}
	}
	got, want := dumpCluster(t, c, nil), dump(t, r.Client(), nil)
	if len(want) < 100 {
		t.Fatalf("the reference holds %d keys: the work did too little", len(want))
	}
	if !maps.Equal(got, want) {
		t.Fatalf("the cluster differs from one Redis:\n%s", diffDumps(want, got))
	}

	// A SCAN for a queue partition's keys (the console's listing of bulk
	// groups) asks the master of its slot and finds them all there.
	scanned := 0
	for part := range parts {
		prefix := p.Keyspace().Keys(jq(part)).Group("")
		m, err := p.MasterOf(ctx, part, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		it := m.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for it.Next(ctx) {
			got = append(got, it.Val())
		}
		want, err := r.Client().Keys(ctx, prefix+"*").Result()
		if err != nil || it.Err() != nil {
			t.Fatal(err, it.Err())
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("partition %d's groups: SCAN of its master found %v, one Redis holds %v", part, got, want)
		}
		scanned += len(got)
	}
	if scanned == 0 {
		t.Fatal("no group to scan for")
	}

	// What reads a partition's shared keys by the server's clock.
	for part := range parts {
		if _, err := p.Heartbeat(ctx, part, "w1", 3, 0); err != nil {
			t.Fatal(err)
		}
		load, err := p.Load(ctx, part, []string{"jobs"}, time.Minute)
		if err != nil || load.Consumers["w1"].Workers != 3 {
			t.Fatalf("load of partition %d: %+v %v", part, load, err)
		}
	}
}

// A queue partition's slot moves to another master while a relay-like
// writer enqueues and a worker-like reader claims and acks on it (and on
// the other partitions). Every job is acked exactly once; the calls that
// Redis refused during the move (TRYAGAIN, a split multi-key script) came
// back as Transient errors and went through when retried.
func TestClusterSlotMigrationLosesAndRepeatsNothing(t *testing.T) {
	c := testenv.NewRedisCluster(t, 3)
	const parts, total = 4, 3000
	p := clusterPool(t, c, parts)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	// Partition 0's queue keys: the slot that moves.
	slot := c.Slot(p.Keyspace().Keys(jq(0)).Lanes())
	from := c.Owner(slot)
	to := c.Addrs()[0]
	if to == from {
		to = c.Addrs()[1]
	}

	var (
		mu        sync.Mutex
		acked     = map[string]int{}
		transient = map[string]int{} // what was retried, by call
		enqueued  = make(chan struct{})
	)
	retry := func(what string, err error) bool {
		if err == nil {
			return false
		}
		if !Transient(err) || ctx.Err() != nil {
			t.Errorf("%s: %v", what, err)
			cancel()
			return false
		}
		mu.Lock()
		transient[what]++
		mu.Unlock()
		return true
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the relay: batches of 50 at Kafka positions, retried whole
		defer wg.Done()
		defer close(enqueued)
		for b := 0; b < total && ctx.Err() == nil; b += 50 {
			batch := make([]Item, 0, 50)
			for i := b; i < b+50; i++ {
				batch = append(batch, item(fmt.Sprintf("j%d", i), fmt.Sprintf("g%d", i%37)))
			}
			positioned(0, int64(b), batch...)
			for {
				res, err := p.Enqueue(ctx, 1, batch, now)
				if retry("enqueue", err) {
					continue
				}
				for i, r := range res {
					if r.Outcome != Queued && r.Outcome != Duplicate {
						t.Errorf("enqueue %s: %v %v", batch[i].ID, r.Outcome, r.Err)
					}
				}
				break
			}
		}
	}()
	for part := range parts {
		wg.Add(1)
		go func() { // a consumer: claim, ack, each retried while Transient
			defer wg.Done()
			idle := false
			for ctx.Err() == nil {
				jobs, err := p.Claim(ctx, jq(part), 20, time.Hour)
				if retry("claim", err) {
					continue
				}
				if len(jobs) == 0 {
					if idle {
						return // the writer was done before this empty claim
					}
					select {
					case <-enqueued:
						idle = true
					default:
					}
					continue
				}
				done := make([]Done, len(jobs))
				for i, j := range jobs {
					done[i] = Done{Job: j}
				}
				for {
					ok, err := p.AckMany(ctx, jq(part), done, now, time.Hour)
					if retry("ack", err) {
						continue
					}
					mu.Lock()
					for i, o := range ok {
						if o {
							acked[jobs[i].ID]++
						}
					}
					mu.Unlock()
					break
				}
			}
		}()
	}
	// Move the slot in steps of 10 keys while the traffic flows.
	testenv.WaitFor(t, 10*time.Second, "partition 0 to hold jobs", func() bool {
		n, _ := c.Node(from).ClusterCountKeysInSlot(ctx, slot).Result()
		return n > 5
	})
	m := c.StartMigration(slot, to)
	for m.Step(10) > 0 && ctx.Err() == nil {
	}
	m.Finish(10)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the traffic did not end: %v", context.Cause(ctx))
	}
	if got := c.Owner(slot); got != to {
		t.Fatalf("slot %d on %s, want %s", slot, got, to)
	}
	if m.Moved == 0 {
		t.Fatal("the migration moved no key")
	}
	for i := range total {
		if n := acked[fmt.Sprintf("j%d", i)]; n != 1 {
			t.Errorf("job j%d acked %d times", i, n)
		}
	}
	if len(acked) != total {
		t.Errorf("%d jobs acked, want %d", len(acked), total)
	}
	t.Logf("moved %d keys of slot %d from %s to %s; calls retried after a transient error: %v", m.Moved, slot, from, to, transient)
}

// A command whose answer is lost (the master stalls past the client's read
// timeout) comes back to the caller as a transient error and is not sent
// again by the cluster client: it may have run, and a script would run
// twice. It ran once, when the master woke.
func TestClusterClientDoesNotResendACommandThatMayHaveRun(t *testing.T) {
	c := testenv.NewRedisCluster(t, 3)
	p := clusterPool(t, c, 1)
	ctx := context.Background()
	key := p.Keyspace().PartKeys(0).Cmd()
	if err := p.Client(0).Set(ctx, key, 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	tight, err := NewPool(PoolConfig{Keyspace: p.Keyspace(), Addr: c.Seeds(), Cluster: true,
		Options: func(o *redis.Options) { o.ReadTimeout = 300 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	defer tight.Close()
	if err := tight.Client(0).Get(ctx, key).Err(); err != nil { // it knows the slots
		t.Fatal(err)
	}
	owner := c.Owner(c.Slot(key))
	probe := redis.NewClient(&redis.Options{Addr: owner, ReadTimeout: 50 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	slept := make(chan error, 1)
	go func() { slept <- c.Node(owner).Do(ctx, "DEBUG", "SLEEP", "2").Err() }()
	testenv.WaitFor(t, 5*time.Second, "the master to stall", func() bool {
		return probe.Ping(ctx).Err() != nil
	})
	if err := tight.Client(0).Incr(ctx, key).Err(); err == nil || !Transient(err) {
		t.Fatalf("INCR on a stalled master: %v, want a transient error", err)
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	// The master runs what it had read once it wakes.
	testenv.WaitFor(t, 5*time.Second, "the INCR to run", func() bool {
		v, err := p.Client(0).Get(ctx, key).Int()
		return err == nil && v > 0
	})
	if v, err := p.Client(0).Get(ctx, key).Int(); err != nil || v != 1 {
		t.Fatalf("counter %d %v after one INCR: want 1 (more: the client resent it)", v, err)
	}
	if stats := c.Node(owner).Info(ctx, "commandstats").Val(); !strings.Contains(stats, "cmdstat_incr:calls=1,") {
		t.Fatalf("INCR ran other than once:\n%s", stats)
	}
}

// --redis-cluster makes the pool a cluster's; it excludes partition
// addresses.
func TestLocationClusterFlag(t *testing.T) {
	l := DefaultStageRedis()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	l.RegisterFlags(fs)
	if f := fs.Lookup("redis-cluster"); f == nil || f.DefValue != "false" {
		t.Fatalf("--redis-cluster: %+v, want default false", f)
	}
	if err := fs.Parse([]string{"--redis-cluster", "--redis-addr", "a:1,b:2"}); err != nil {
		t.Fatal(err)
	}
	if pc := l.PoolConfig(); !pc.Cluster || pc.Addr != "a:1,b:2" {
		t.Fatalf("PoolConfig = %+v", pc)
	}
	l.PartitionAddrs = map[int]string{1: "c:3"}
	if err := l.Validate(); err == nil || !strings.HasPrefix(err.Error(), "PartitionAddrs: ") {
		t.Fatalf("Validate() = %v, want PartitionAddrs refused with RedisCluster", err)
	}
}

// On a cluster, WaitReplicas WAITs on the master of each queue partition's
// slot, after an INCR in that slot: the writes it vouches for went there.
func TestClusterWaitReplicasAsksEachQueuesMaster(t *testing.T) {
	c := testenv.NewRedisCluster(t, 3)
	p := clusterPool(t, c, 4)
	ctx := context.Background()
	err := p.WaitReplicas(ctx, []Queue{jq(2)}, 1, 50*time.Millisecond)
	var behind *ReplicasBehindError
	want := "cluster master " + c.Owner(c.Slot(p.Keyspace().Keys(jq(2)).Lanes()))
	if !errors.As(err, &behind) || behind.Server != want || behind.Acked != 0 {
		t.Fatalf("WaitReplicas with no replica = %v, want a ReplicasBehindError from %s", err, want)
	}
	if n, _ := p.Client(2).Get(ctx, p.Keyspace().Keys(jq(2)).Prefix()+"wait").Int(); n != 1 {
		t.Fatalf("the wait key in the queue's slot is %d, want 1", n)
	}
	if err := p.WaitReplicas(ctx, []Queue{jq(0), jq(1), jq(2), jq(3)}, 0, 50*time.Millisecond); err != nil {
		t.Fatalf("WaitReplicas for 0 replicas = %v", err)
	}
}

// The login (--redis-user, --redis-password) applies to every node of a
// cluster, its discovery included; a wrong password is named as such.
func TestClusterLogsInAsTheACLUserOnEveryNode(t *testing.T) {
	c := testenv.NewRedisCluster(t, 3)
	ctx := context.Background()
	for _, addr := range c.Addrs() {
		if err := c.Node(addr).Do(ctx, "ACL", "SETUSER", "sluice", "on", ">s3cret", "~sluice:*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
	}
	loc := StageRedis{Stage: "test", Partitions: 4, RedisAddr: c.Seeds(), RedisCluster: true, RedisUser: "sluice"}
	loc.RedisPassword.Value = "wr0ng"
	bad, err := NewPool(loc.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Ping(ctx); err == nil || !Misconfigured(err) || !strings.Contains(err.Error(), "--redis-password") || strings.Contains(err.Error(), "wr0ng") {
		t.Fatalf("a wrong password: %v, want a login error that names the flag, not the password", err)
	}
	loc.RedisPassword.Value = "s3cret"
	p, err := NewPool(loc.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	var items []Item
	for i := range 40 {
		items = append(items, item(fmt.Sprintf("j%d", i), fmt.Sprintf("g%d", i)))
	}
	enqueueOK(t, p, 1, positioned(0, 0, items...), now)
	for _, addr := range c.Addrs() {
		list, err := c.Node(addr).ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(list, "user=sluice") {
			t.Fatalf("no connection of user sluice on %s:\n%s", addr, list)
		}
	}
}
