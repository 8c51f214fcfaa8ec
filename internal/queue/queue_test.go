package queue

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

var now = time.UnixMilli(1_800_000_000_000)

func newPool(t *testing.T, partitions int, addr string, partAddrs map[int]string) *Pool {
	t.Helper()
	p, err := NewPool(PoolConfig{Keyspace: Keyspace{Stage: "test", Partitions: partitions}, Addr: addr, PartitionAddrs: partAddrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

func item(id, group string) Item {
	return Item{ID: id, Group: group, Topic: "jobs", Weight: 1, Envelope: []byte(`{"id":"` + id + `","type":"t","payload":{"x":"<&>"}}`)}
}

func TestPartitionOfIsFNV1a32(t *testing.T) {
	// Reference values of 32-bit FNV-1a.
	l := Keyspace{Stage: "s", Partitions: 1 << 30}
	for in, want := range map[string]uint32{"": 0x811c9dc5 % (1 << 30), "a": 0xe40c292c % (1 << 30), "foobar": 0xbf9cf968 % (1 << 30)} {
		if got := l.PartitionOf(in); got != int(want) {
			t.Errorf("PartitionOf(%q) = %d, want %d", in, got, want)
		}
	}
	if k := (Keyspace{Stage: "prod", Partitions: 8}).Keys(jq(3)).Job("j1"); k != "sluice:{prod:jobs:p3}:job:j1" {
		t.Errorf("key %q", k)
	}
}

func TestEnqueueWritesEntriesOnTheirLanes(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 4, r.Addr(), nil)
	ctx := context.Background()
	items := positioned(0, 0, item("j1", "g"), item("j2", "g"), item("j3", "other"))
	items[2].GroupTotal = 10
	for i, r := range enqueueOK(t, p, 1, items, now) {
		if r.Outcome != Queued {
			t.Fatalf("item %d: %v %v", i, r.Outcome, r.Err)
		}
	}
	rdb := r.Client()
	pg := p.Keyspace().PartitionOf("g")
	k := p.Keyspace().Keys(jq(pg))
	lane, _ := rdb.LRange(ctx, k.Lane("g/g"), 0, -1).Result()
	want := []string{Entry(0, "j1", "g/g", items[0].Envelope), Entry(0, "j2", "g/g", items[1].Envelope)}
	if !slices.Equal(lane, want) {
		t.Fatalf("lane g/g holds %q, want %q", lane, want)
	}
	if e, err := ParseEntry(lane[0]); err != nil || e.Envelope != string(items[0].Envelope) || e.ID != "j1" || e.Attempts != 0 {
		t.Fatalf("entry %+v %v: the envelope must come back byte for byte", e, err)
	}
	// No key per job.
	for _, id := range []string{"j1", "j2", "j3"} {
		if n := rdb.Exists(ctx, p.Keyspace().Keys(jq(p.Keyspace().PartitionOfJob("g", id))).Job(id)).Val(); n != 0 {
			t.Fatalf("a plain job %s has a record", id)
		}
	}
	if _, err := rdb.ZScore(ctx, k.Lanes(), "g/g").Result(); err != nil {
		t.Fatalf("lane g/g not in the fair order: %v", err)
	}
	ko := p.Keyspace().Keys(jq(p.Keyspace().PartitionOf("other")))
	if total, _ := rdb.HGet(ctx, ko.Group("other"), "total").Result(); total != "10" {
		t.Fatalf("group total %q", total)
	}
	if v, _ := rdb.HGet(ctx, k.Stats(), "inflight").Result(); v != "" && v != "0" {
		t.Fatalf("inflight %q before any claim", v)
	}
	// The watermark: the highest offset applied in this partition.
	wantWM := "1"
	if p.Keyspace().PartitionOf("other") == pg {
		wantWM = "2"
	}
	if wm, _ := rdb.HGet(ctx, k.Watermark(), "0").Result(); wm != wantWM {
		t.Fatalf("watermark %q, want %s", wm, wantWM)
	}

	// The same records again (a redelivery after a failover): nothing changes.
	res := enqueueOK(t, p, 1, items[:2], now)
	if res[0].Outcome != Duplicate || res[1].Outcome != Duplicate {
		t.Fatalf("redelivery: %v", res)
	}
	if n, _ := rdb.LLen(ctx, k.Lane("g/g")).Result(); n != 2 {
		t.Fatalf("lane has %d after a redelivery", n)
	}
	if v, _ := rdb.HGet(ctx, k.Group("g"), "relayed").Result(); v != "2" {
		t.Fatalf("group relayed %q", v)
	}
	if v, _ := rdb.HGet(ctx, k.Stats(), "deduped").Result(); v != "2" {
		t.Fatalf("stats deduped %q", v)
	}
	// An item without a Kafka position (a tool's) is not deduped by it.
	if res := enqueueOK(t, p, 1, []Item{item("j1", "g")}, now); res[0].Outcome != Queued {
		t.Fatalf("an item without a position: %v", res)
	}
}

func TestFenceRefusesAnOlderToken(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	if res, err := p.Enqueue(ctx, 5, []Item{item("a", "g")}, now); err != nil || res[0].Outcome != Queued {
		t.Fatalf("token 5: %v %v", res, err)
	}
	k := p.Keyspace().Keys(jq(0))
	before := dump(t, r.Client(), nil)
	res, err := p.Enqueue(ctx, 3, positioned(0, 9, item("b", "g"), item("c", "")), now)
	if err != nil || res[0].Outcome != Fenced || res[1].Outcome != Fenced {
		t.Fatalf("token 3 after 5: %v %v", res, err)
	}
	// A fenced write changes nothing but the fenced counter: no entry, no
	// watermark.
	after := dump(t, r.Client(), nil)
	if v, _ := r.Client().HGet(ctx, k.Stats(), "fenced").Result(); v != "2" {
		t.Fatalf("stats fenced %q", v)
	}
	delete(after, k.Stats())
	delete(before, k.Stats())
	if !maps.Equal(before, after) {
		t.Fatalf("a fenced write changed Redis:\n%s", diffDumps(before, after))
	}
	if res, err := p.Enqueue(ctx, 7, positioned(0, 9, item("b", "g")), now); err != nil || res[0].Outcome != Queued {
		t.Fatalf("token 7: %v %v", res, err)
	}
	if n := r.Client().LLen(ctx, k.Lane("g/g")).Val(); n != 2 {
		t.Fatalf("lane holds %d", n)
	}
	// Fences are per topic: another topic's relay has tokens of its own.
	other := item("c", "g")
	other.Topic = "emails"
	if res, err := p.Enqueue(ctx, 1, []Item{other}, now); err != nil || res[0].Outcome != Queued {
		t.Fatalf("another topic's token 1: %v %v", res, err)
	}
}

func TestDelayedAndFairOrderEntry(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	rdb := r.Client()
	k := p.Keyspace().Keys(jq(0))
	later := item("later", "g")
	later.RunAt = now.Add(time.Minute)
	res, err := p.Enqueue(ctx, 1, []Item{later}, now)
	if err != nil || res[0].Outcome != Delayed {
		t.Fatalf("run_at in a minute: %v %v", res, err)
	}
	if due, _ := rdb.ZScore(ctx, k.Delayed(), Entry(0, "later", "g/g", later.Envelope)).Result(); int64(due) != now.Add(time.Minute).UnixMilli() {
		t.Fatalf("due %v", due)
	}
	if n, _ := rdb.ZCard(ctx, k.Lanes()).Result(); n != 0 {
		t.Fatal("a lane with only delayed jobs is active")
	}
	if v, _ := rdb.HGet(ctx, k.Group("g"), "delayed").Result(); v != "1" {
		t.Fatalf("group delayed %q", v)
	}
	// A lane becoming active starts at the partition's virtual clock.
	rdb.Set(ctx, k.VirtualTime(), "42.5", 0)
	heavy := item("h1", "heavy")
	heavy.Weight = 10
	shared := item("s1", "")
	shared.Weight = 3
	if _, err := p.Enqueue(ctx, 1, []Item{heavy, item("n1", "new"), shared}, now); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"g/heavy", "g/new", "q/jobs/2"} {
		if s, _ := rdb.ZScore(ctx, k.Lanes(), l).Result(); s != 42.5 {
			t.Fatalf("lane %s enters at %v, want the virtual clock 42.5", l, s)
		}
	}
	if w, _ := rdb.HGet(ctx, k.Group("heavy"), "weight").Result(); w != "10" {
		t.Fatalf("weight %q", w)
	}
}

func TestScriptsReloadAfterRedisForgetsThem(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 2, r.Addr(), nil)
	ctx := context.Background()
	r.Client().ScriptFlush(ctx)
	res, err := p.Enqueue(ctx, 1, []Item{item("a", "g1"), item("b", "g2")}, now)
	if err != nil || res[0].Outcome != Queued || res[1].Outcome != Queued {
		t.Fatalf("after SCRIPT FLUSH: %v %v", res, err)
	}
}

func TestPhysicalPartitions(t *testing.T) {
	r0, r1 := testenv.Redis(t), testenv.Redis(t)
	l := Keyspace{Stage: "test", Partitions: 2}
	var g0, g1 string
	for i := 0; g0 == "" || g1 == ""; i++ {
		g := "g" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if l.PartitionOf(g) == 0 && g0 == "" {
			g0 = g
		} else if l.PartitionOf(g) == 1 && g1 == "" {
			g1 = g
		}
	}
	p := newPool(t, 2, r0.Addr(), map[int]string{1: r1.Addr()})
	ctx := context.Background()
	if _, err := p.Enqueue(ctx, 1, []Item{item("a", g0), item("b", g1)}, now); err != nil {
		t.Fatal(err)
	}
	if n, _ := r0.Client().LLen(ctx, l.Keys(jq(0)).Lane("g/"+g0)).Result(); n != 1 {
		t.Fatal("partition 0's job is not on its Redis")
	}
	if n, _ := r1.Client().LLen(ctx, l.Keys(jq(1)).Lane("g/"+g1)).Result(); n != 1 {
		t.Fatal("partition 1's job is not on its own Redis")
	}
	if n, _ := r0.Client().Exists(ctx, l.Keys(jq(1)).Lane("g/"+g1)).Result(); n != 0 {
		t.Fatal("partition 1's job landed on the default Redis")
	}
	jobs, err := p.Claim(ctx, jq(1), 10, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].ID != "b" {
		t.Fatalf("claim on partition 1: %+v %v", jobs, err)
	}
}

func TestRedisDownIsTransientAndOOMToo(t *testing.T) {
	r := testenv.Redis(t, testenv.WithMaxMemory("1mb"))
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	big := item("big", "g")
	big.Envelope = make([]byte, 2<<20)
	_, err := p.Enqueue(ctx, 1, []Item{big}, now)
	if err == nil || !Transient(err) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("over maxmemory: %v", err)
	}
	r.Stop()
	_, err = p.Enqueue(ctx, 1, []Item{item("a", "g")}, now)
	if err == nil || !Transient(err) {
		t.Fatalf("Redis stopped: %v", err)
	}
	r.Restart()
	testenv.WaitFor(t, 5*time.Second, "Redis back", func() bool {
		res, err := p.Enqueue(ctx, 1, []Item{item("a", "g")}, now)
		return err == nil && res[0].Outcome == Queued
	})
	if Transient(redis.Nil) {
		t.Fatal("redis.Nil is not transient")
	}
}

func TestParsePartitionAddrs(t *testing.T) {
	m, err := ParsePartitionAddrs("0=a:1, 3=b:2", 4)
	if err != nil || m[0] != "a:1" || m[3] != "b:2" || len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"4=a:1", "x=a", "1", "1=a,1=b"} {
		if _, err := ParsePartitionAddrs(bad, 4); err == nil {
			t.Errorf("ParsePartitionAddrs(%q) accepted", bad)
		}
	}
}

// A topic is a queue: its jobs live in keys of their own, a claim on one
// topic's partition sees none of another's, and an item whose topic cannot
// name a queue is refused alone.
func TestEachTopicIsAQueueOfItsOwn(t *testing.T) {
	p := newPool(t, 1, testenv.Redis(t).Addr(), nil)
	ctx := context.Background()
	a, b, bad := item("a1", ""), item("b1", ""), item("x1", "")
	b.Topic, bad.Topic = "emails", "no{tag}"
	res, err := p.Enqueue(ctx, 1, []Item{a, b, bad}, now)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != Queued || res[1].Outcome != Queued || res[2].Outcome != Failed || res[2].Err == nil {
		t.Fatalf("results %+v", res)
	}
	emails := Queue{Topic: "emails", Part: 0}
	if k := p.Keyspace().Keys(emails).Lanes(); k != "sluice:{test:emails:p0}:lanes" {
		t.Fatalf("lanes key %q", k)
	}
	for _, tc := range []struct {
		q    Queue
		want string
	}{{jq(0), "a1"}, {emails, "b1"}} {
		jobs, err := p.Claim(ctx, tc.q, 10, time.Minute)
		if err != nil || len(jobs) != 1 || jobs[0].ID != tc.want {
			t.Fatalf("claim on %s: %+v %v, want only %s", tc.q, jobs, err, tc.want)
		}
		if ok, err := p.Ack(ctx, tc.q, Done{Job: jobs[0]}, now, time.Hour); !ok || err != nil {
			t.Fatalf("ack on %s: %v %v", tc.q, ok, err)
		}
		f, err := p.Funnel(ctx, tc.q)
		if err != nil || f.Completed != 1 || f.Milestones[tc.q.Topic][MilestoneCompleted] != 1 || len(f.Milestones) != 1 {
			t.Fatalf("funnel of %s: %+v %v", tc.q, f, err)
		}
	}
}

// Relays register their topics; readers of every queue list them.
func TestTopicsRegisteredByRelaysAreListed(t *testing.T) {
	p := newPool(t, 2, testenv.Redis(t).Addr(), nil)
	ctx := context.Background()
	if got, err := p.Topics(ctx); err != nil || len(got) != 0 {
		t.Fatalf("before any relay: %v %v", got, err)
	}
	if err := p.RegisterTopics(ctx, []string{"jobs", "emails"}, now); err != nil {
		t.Fatal(err)
	}
	if err := p.RegisterTopics(ctx, []string{"bad topic"}, now); err == nil {
		t.Fatal("registered a topic that cannot name a queue")
	}
	if got, err := p.Topics(ctx, "jobs", "critical"); err != nil || !slices.Equal(got, []string{"critical", "emails", "jobs"}) {
		t.Fatalf("topics %v %v", got, err)
	}
}
