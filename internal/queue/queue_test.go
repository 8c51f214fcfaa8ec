package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

var now = time.UnixMilli(1_800_000_000_000)

func newPool(t *testing.T, partitions int, addr string, partAddrs map[int]string) *Pool {
	t.Helper()
	p, err := NewPool(PoolConfig{Layout: Layout{Stage: "test", Partitions: partitions}, Addr: addr, PartitionAddrs: partAddrs})
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
	l := Layout{Stage: "s", Partitions: 1 << 30}
	for in, want := range map[string]uint32{"": 0x811c9dc5 % (1 << 30), "a": 0xe40c292c % (1 << 30), "foobar": 0xbf9cf968 % (1 << 30)} {
		if got := l.PartitionOf(in); got != int(want) {
			t.Errorf("PartitionOf(%q) = %d, want %d", in, got, want)
		}
	}
	if k := (Layout{Stage: "prod", Partitions: 8}).Keys(3).Job("j1"); k != "sluice:{prod:p3}:job:j1" {
		t.Errorf("key %q", k)
	}
}

func TestEnqueueWritesTheJobOnce(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 4, r.Addr(), nil)
	ctx := context.Background()
	items := []Item{item("j1", "g"), item("j2", "g"), item("j3", "other")}
	items[2].GroupTotal = 10
	res, err := p.Enqueue(ctx, 1, items, now)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Outcome != Queued {
			t.Fatalf("item %d: %v %v", i, r.Outcome, r.Err)
		}
	}
	rdb := r.Client()
	k := p.Layout().Keys(p.Layout().PartitionOf("g"))
	if env, _ := rdb.HGet(ctx, k.Job("j1"), "env").Result(); env != string(items[0].Envelope) {
		t.Fatalf("envelope in Redis %q, want byte-identical %q", env, items[0].Envelope)
	}
	if ids, _ := rdb.LRange(ctx, k.Ready("g"), 0, -1).Result(); strings.Join(ids, ",") != "j1,j2" {
		t.Fatalf("ready list %v", ids)
	}
	if n, _ := rdb.ZCard(ctx, k.Groups()).Result(); n < 1 {
		t.Fatal("group not active")
	}
	ko := p.Layout().Keys(p.Layout().PartitionOf("other"))
	if total, _ := rdb.HGet(ctx, ko.Group("other"), "total").Result(); total != "10" {
		t.Fatalf("group total %q", total)
	}

	// The same jobs again (a redelivery after failover): nothing changes.
	res, err = p.Enqueue(ctx, 1, items[:2], now)
	if err != nil || res[0].Outcome != Duplicate || res[1].Outcome != Duplicate {
		t.Fatalf("redelivery: %v %v", res, err)
	}
	if n, _ := rdb.LLen(ctx, k.Ready("g")).Result(); n != 2 {
		t.Fatalf("ready list has %d after a redelivery", n)
	}
	if v, _ := rdb.HGet(ctx, k.Group("g"), "relayed").Result(); v != "2" {
		t.Fatalf("group relayed %q", v)
	}
	if v, _ := rdb.HGet(ctx, k.Stats(), "deduped").Result(); v != "2" {
		t.Fatalf("stats deduped %q", v)
	}
}

func TestFenceRefusesAnOlderToken(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	if res, err := p.Enqueue(ctx, 5, []Item{item("a", "g")}, now); err != nil || res[0].Outcome != Queued {
		t.Fatalf("token 5: %v %v", res, err)
	}
	res, err := p.Enqueue(ctx, 3, []Item{item("b", "g")}, now)
	if err != nil || res[0].Outcome != Fenced {
		t.Fatalf("token 3 after 5: %v %v", res, err)
	}
	k := p.Layout().Keys(0)
	if n, _ := r.Client().Exists(ctx, k.Job("b")).Result(); n != 0 {
		t.Fatal("a fenced write left the job behind")
	}
	if v, _ := r.Client().HGet(ctx, k.Stats(), "fenced").Result(); v != "1" {
		t.Fatalf("stats fenced %q", v)
	}
	if res, err := p.Enqueue(ctx, 7, []Item{item("b", "g")}, now); err != nil || res[0].Outcome != Queued {
		t.Fatalf("token 7: %v %v", res, err)
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
	k := p.Layout().Keys(0)
	later := item("later", "g")
	later.RunAt = now.Add(time.Minute)
	res, err := p.Enqueue(ctx, 1, []Item{later}, now)
	if err != nil || res[0].Outcome != Delayed {
		t.Fatalf("run_at in a minute: %v %v", res, err)
	}
	if due, _ := rdb.ZScore(ctx, k.Delayed(), "later").Result(); int64(due) != now.Add(time.Minute).UnixMilli() {
		t.Fatalf("due %v", due)
	}
	if n, _ := rdb.ZCard(ctx, k.Groups()).Result(); n != 0 {
		t.Fatal("a group with only delayed jobs is active")
	}
	// A group becoming active starts at the partition's virtual clock.
	rdb.Set(ctx, k.VirtualTime(), "42.5", 0)
	heavy := item("h1", "heavy")
	heavy.Weight = 10
	if _, err := p.Enqueue(ctx, 1, []Item{heavy, item("n1", "new")}, now); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"heavy", "new"} {
		if s, _ := rdb.ZScore(ctx, k.Groups(), g).Result(); s != 42.5 {
			t.Fatalf("group %s enters at %v, want the virtual clock 42.5", g, s)
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
	l := Layout{Stage: "test", Partitions: 2}
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
	if n, _ := r0.Client().Exists(ctx, l.Keys(0).Job("a")).Result(); n != 1 {
		t.Fatal("partition 0's job is not on its Redis")
	}
	if n, _ := r1.Client().Exists(ctx, l.Keys(1).Job("b")).Result(); n != 1 {
		t.Fatal("partition 1's job is not on its own Redis")
	}
	if n, _ := r0.Client().Exists(ctx, l.Keys(1).Job("b")).Result(); n != 0 {
		t.Fatal("partition 1's job landed on the default Redis")
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
