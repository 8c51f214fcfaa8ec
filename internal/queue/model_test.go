package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestEntryAndLaneNames(t *testing.T) {
	env := []byte(`{"id":"a b","payload":"x y"}`)
	e := Entry(3, "j1", "t/jobs/2/acme", env)
	if e != `3 j1 t/jobs/2/acme {"id":"a b","payload":"x y"}` {
		t.Fatalf("entry %q", e)
	}
	pe, err := ParseEntry(e)
	if err != nil || pe.Attempts != 3 || pe.ID != "j1" || pe.Lane != "t/jobs/2/acme" || pe.Envelope != string(env) {
		t.Fatalf("parsed %+v %v", pe, err)
	}
	if pe, err := ParseEntry(Entry(0, "j", "g/g", nil)); err != nil || pe.Envelope != "" {
		t.Fatalf("an empty envelope: %+v %v", pe, err)
	}
	for _, bad := range []string{"", "x j g/g {}", "-1 j g/g {}", "1 j", "1  g/g {}", "1 j  {}"} {
		if _, err := ParseEntry(bad); err == nil {
			t.Errorf("ParseEntry(%q) accepted", bad)
		}
	}
	for _, c := range []struct {
		group, tenant, topic string
		prio                 int
		lane                 string
		info                 LaneInfo
	}{
		{"g1", "acme", "jobs", 2, "g/g1", LaneInfo{Name: "g/g1", Group: "g1", Weight: 1}},
		{"", "", "jobs", 0, "q/jobs/0", LaneInfo{Name: "q/jobs/0", Topic: "jobs", Weight: 1}},
		{"", "acme/eu", "emails", 3, "t/emails/3/acme/eu", LaneInfo{Name: "t/emails/3/acme/eu", Topic: "emails", Weight: 4}},
	} {
		l := LaneOf(c.group, c.tenant, c.topic, c.prio)
		info, err := ParseLane(l)
		if l != c.lane || err != nil || info != c.info {
			t.Errorf("LaneOf(%q, %q, %q, %d) = %q, parsed %+v %v; want %q %+v", c.group, c.tenant, c.topic, c.prio, l, info, err, c.lane, c.info)
		}
	}
	for _, bad := range []string{"g/", "q/jobs", "q/jobs/x", "q//0", "t/jobs/0", "q/jobs/0/acme", "x/y"} {
		if _, err := ParseLane(bad); err == nil {
			t.Errorf("ParseLane(%q) accepted", bad)
		}
	}
}

// A client's resend of a job whose id it chose is a new Kafka record (a
// new offset, maybe another Kafka partition) with the same id: a duplicate
// for the dedupe TTL, whatever became of the job meanwhile (done, retried,
// retained for less). A gate-assigned id is unique: its only duplicates
// are replays, which the watermark catches.
func TestClientChosenIDResendIsADuplicateWithinTheTTL(t *testing.T) {
	r := testenv.Redis(t)
	p, err := NewPool(PoolConfig{Keyspace: Keyspace{Stage: "test", Partitions: 1}, Addr: r.Addr(), IDDedupeTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx := context.Background()
	rdb := r.Client()
	k := p.Keyspace().Keys(jq(0))
	given := func(id string, kp int32, off int64) Item {
		it := item(id, "")
		it.IDGiven = true
		return positioned(kp, off, it)[0]
	}
	wantOutcome := func(what string, it Item, want Outcome) {
		t.Helper()
		if res := enqueueOK(t, p, 1, []Item{it}, now); res[0].Outcome != want {
			t.Fatalf("%s: %v %v, want %v", what, res[0].Outcome, res[0].Err, want)
		}
	}
	wantTTL := func(what, id string) {
		t.Helper()
		if ttl := rdb.TTL(ctx, k.Job(id)).Val(); ttl < 59*time.Minute || ttl > time.Hour {
			t.Fatalf("%s: %s's record expires in %v, want the dedupe TTL (1h)", what, id, ttl)
		}
	}

	wantOutcome("first send", given("order-42", 0, 10), Queued)
	if h := rdb.HGetAll(ctx, k.Job("order-42")).Val(); h["relayed_ms"] != strconv.FormatInt(now.UnixMilli(), 10) {
		t.Fatalf("record %v", h)
	}
	wantTTL("queued", "order-42")
	wantOutcome("resend", given("order-42", 0, 11), Duplicate)
	wantOutcome("resend through another Kafka partition", given("order-42", 1, 3), Duplicate)
	wantOutcome("another id", given("order-43", 0, 12), Queued)
	gate := positioned(0, 13, item("01JGATE", ""))
	wantOutcome("a gate-assigned id", gate[0], Queued)
	gate = positioned(0, 14, item("01JGATE", ""))
	wantOutcome("the same gate-assigned id in a new record", gate[0], Queued)
	if n := rdb.Exists(ctx, k.Job("01JGATE")).Val(); n != 0 {
		t.Fatal("a gate-assigned id has a record")
	}
	if n := rdb.LLen(ctx, k.Lane("q/jobs/0")).Val(); n != 4 {
		t.Fatalf("the lane holds %d entries, want 4", n)
	}
	st := rdb.HGetAll(ctx, k.Stats()).Val()
	if st["relayed"] != "4" || st["deduped"] != "2" {
		t.Fatalf("stats %v", st)
	}

	jobs, err := p.Claim(ctx, jq(0), 10, time.Minute)
	if err != nil || len(jobs) != 4 {
		t.Fatalf("claim: %+v %v", jobs, err)
	}
	byID := map[string]Claimed{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	// Done at the first attempt: the record stays for the TTL.
	ack(t, p, 0, byID["order-42"])
	wantTTL("done", "order-42")
	wantOutcome("resend of a done job", given("order-42", 0, 15), Duplicate)

	// A failed attempt, kept for less than the TTL, then done with a short
	// retain: the dedupe still lasts the TTL.
	limits := DeadLimits{Max: 10, Keep: time.Minute}
	if res, err := p.Fail(ctx, jq(0), Failure{Job: byID["order-43"], Cause: "e", NextTry: now.Add(time.Second)}, now, limits); res != FailRetrying || err != nil {
		t.Fatalf("fail: %d %v", res, err)
	}
	wantTTL("retrying", "order-43")
	if n, _ := p.Promote(ctx, jq(0), 10, now.Add(time.Second)); n != 1 {
		t.Fatalf("promoted %d", n)
	}
	again, _ := p.Claim(ctx, jq(0), 1, time.Minute)
	if len(again) != 1 || again[0].ID != "order-43" || again[0].Attempt != 2 {
		t.Fatalf("claim: %+v", again)
	}
	if ok, err := p.Ack(ctx, jq(0), Done{Job: again[0], Result: []byte("r"), Retain: time.Minute}, now, time.Minute); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if h := rdb.HGetAll(ctx, k.Job("order-43")).Val(); h["state"] != "done" || h["result"] != "r" || h["last_error"] != "e" {
		t.Fatalf("record %v", h)
	}
	wantTTL("done after a retry, retained a minute", "order-43")
	wantOutcome("resend of a retried job", given("order-43", 0, 16), Duplicate)
}

// Jobs without a group live on their id's partition, on a shared lane of
// their topic and priority (their tenant's when they name one), and share
// the partition fairly with a big group and with each other.
func TestJobsWithoutAGroupShareLanesFairly(t *testing.T) {
	t.Run("placement", func(t *testing.T) {
		r := testenv.Redis(t)
		p := newPool(t, 4, r.Addr(), nil)
		ctx := context.Background()
		var items []Item
		for i := range 200 {
			it := item("solo-"+strconv.Itoa(i), "")
			if i%2 == 1 {
				it.Tenant = "acme"
			}
			items = append(items, it)
		}
		enqueueOK(t, p, 1, items, now)
		used := map[int]int{}
		for _, it := range items {
			part := p.Keyspace().PartitionOfJob("", it.ID)
			if part != p.Keyspace().PartitionOf(it.ID) {
				t.Fatalf("a job without a group goes by its id")
			}
			used[part]++
			lane := LaneOf("", it.Tenant, "jobs", 0)
			if _, err := r.Client().LPos(ctx, p.Keyspace().Keys(jq(part)).Lane(lane), Entry(0, it.ID, lane, it.Envelope), redis.LPosArgs{}).Result(); err != nil {
				t.Fatalf("%s not on lane %s of partition %d: %v", it.ID, lane, part, err)
			}
		}
		if len(used) != 4 {
			t.Fatalf("jobs without a group spread over %d of 4 partitions: %v", len(used), used)
		}
		for part := range 4 {
			lanes := r.Client().ZRange(ctx, p.Keyspace().Keys(jq(part)).Lanes(), 0, -1).Val()
			if strings.Join(lanes, ",") != "q/jobs/0,t/jobs/0/acme" && strings.Join(lanes, ",") != "t/jobs/0/acme,q/jobs/0" {
				t.Fatalf("partition %d's lanes %v", part, lanes)
			}
		}
	})

	t.Run("against a big group", func(t *testing.T) {
		p, _ := onePartition(t)
		ctx := context.Background()
		enqueueGroup(t, p, "big", 20000, 1)
		for range 5 {
			jobs, _ := p.Claim(ctx, jq(0), 16, time.Minute)
			ack(t, p, 0, jobs...)
		}
		var items []Item
		for i := range 300 {
			it := item("solo-"+strconv.Itoa(i), "")
			if i%3 == 1 {
				it.Tenant = "acme"
			} else if i%3 == 2 {
				it.Tenant = "globex"
			}
			items = append(items, it)
		}
		enqueueOK(t, p, 1, items, now)
		claimed, big, left := 0, 0, len(items)
		for left > 0 {
			jobs, err := p.Claim(ctx, jq(0), 16, time.Minute)
			if err != nil || len(jobs) == 0 {
				t.Fatalf("claim: %v %v", jobs, err)
			}
			for _, j := range jobs {
				claimed++
				if j.Group == "big" {
					big++
				} else {
					left--
				}
			}
			ack(t, p, 0, jobs...)
		}
		// Shared lanes of 100 jobs weigh 4 against the big group's 1.
		if claimed > 420 || big < 20 {
			t.Fatalf("the 300 jobs without a group took %d claims (%d from the 20,000-job group)", claimed, big)
		}
		t.Logf("300 jobs without a group done after %d claims, %d of them from the big group", claimed, big)
	})

	t.Run("tenants", func(t *testing.T) {
		p, _ := onePartition(t)
		ctx := context.Background()
		var heavy, light []Item
		for i := range 5000 {
			it := item("h-"+strconv.Itoa(i), "")
			it.Tenant = "heavy"
			heavy = append(heavy, it)
		}
		for i := range 20 {
			it := item("l-"+strconv.Itoa(i), "")
			it.Tenant = "light"
			light = append(light, it)
		}
		for b := 0; b < len(heavy); b += 1000 {
			enqueueOK(t, p, 1, heavy[b:b+1000], now)
		}
		enqueueOK(t, p, 1, light, now)
		claimed, left := 0, len(light)
		for left > 0 {
			jobs, _ := p.Claim(ctx, jq(0), 8, time.Minute)
			if len(jobs) == 0 {
				t.Fatal("nothing to claim")
			}
			for _, j := range jobs {
				claimed++
				if strings.HasPrefix(j.ID, "l-") {
					left--
				}
			}
			ack(t, p, 0, jobs...)
		}
		if claimed > 48 {
			t.Fatalf("a light tenant's 20 jobs took %d claims behind a heavy tenant's 5,000", claimed)
		}
	})
}

// A plain job that succeeded leaves no key behind: once every job of a
// partition is done, only its fixed keys are left (and a one-job group's
// hash, set to expire).
func TestAPlainJobLeavesNoKeyBehind(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 4, r.Addr(), nil)
	ctx := context.Background()
	var items []Item
	for i := range 300 {
		id := "01J" + strconv.Itoa(1e6+i)
		switch i % 3 {
		case 0:
			items = append(items, item(id, ""))
		case 1:
			it := item(id, "")
			it.Tenant = "t" + strconv.Itoa(i%4)
			items = append(items, it)
		case 2:
			items = append(items, item(id, "one-"+id)) // a group of its own
		}
	}
	enqueueOK(t, p, 1, positioned(0, 0, items...), now)
	for part := range 4 {
		for {
			jobs, err := p.Claim(ctx, jq(part), 64, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) == 0 {
				break
			}
			ack(t, p, part, jobs...)
		}
	}
	fixed := map[string]bool{"stats": true, "vt": true, "wm": true, "shared": true, "fence": true, "wake": true}
	keys := r.Client().Keys(ctx, "*").Val()
	groups := 0
	for _, key := range keys {
		_, name, ok := strings.Cut(key, "}:")
		if !ok {
			t.Fatalf("key %q outside the layout", key)
		}
		if fixed[name] {
			continue
		}
		if strings.HasPrefix(name, "group:one-") {
			if ttl := r.Client().TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Hour {
				t.Fatalf("%s is kept for %v, want up to the keep (1h)", key, ttl)
			}
			groups++
			continue
		}
		t.Errorf("key %q left behind", key)
	}
	if groups != 100 {
		t.Fatalf("%d one-job group hashes, want 100", groups)
	}
	for part := range 4 {
		st := r.Client().HGetAll(ctx, p.Keyspace().Keys(jq(part)).Stats()).Val()
		if st["ready"] != "0" || st["inflight"] != "0" {
			t.Fatalf("partition %d's stats %v", part, st)
		}
	}
}

// A queued plain job costs Redis about its envelope: its entry adds the
// attempts, the id and the lane's name, and the list's own overhead is a
// few bytes per entry. On a shared lane, with a ULID, that is within 64
// bytes of the envelope; on a group's lane the entry also repeats the
// group's name.
func TestAQueuedJobCostsAboutItsEnvelope(t *testing.T) {
	for _, group := range []string{"", "newsletter-42"} {
		t.Run("group="+group, func(t *testing.T) {
			r := testenv.Redis(t)
			p := newPool(t, 1, r.Addr(), nil)
			ctx := context.Background()
			const n = 10000
			envOf := func(id string) []byte {
				return []byte(`{"id":"` + id + `","topic":"jobs","type":"email.send","tenant":"acme","payload":{"to":"someone@example.test","subject":"Your order has shipped <3>","order":123456789},"enqueued_at":"2026-11-21T12:00:00.123Z"}`)
			}
			envLen := len(envOf(fmt.Sprintf("01JD%022d", 0)))
			used := func() int64 {
				info := r.Client().Info(ctx, "memory").Val()
				for _, line := range strings.Split(info, "\n") {
					if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
						n, _ := strconv.ParseInt(v, 10, 64)
						return n
					}
				}
				t.Fatal("INFO memory has no used_memory")
				return 0
			}
			// The partition's fixed keys first, so they are not counted.
			enqueueOK(t, p, 1, positioned(0, 0, Item{ID: "warm", Group: group, Topic: "jobs", Weight: 1, Envelope: envOf("warm")}), now)
			before := used()
			items := make([]Item, 0, 1000)
			for i := range n {
				id := fmt.Sprintf("01JD%022d", i)
				items = append(items, Item{ID: id, Group: group, Topic: "jobs", Weight: 1, Envelope: envOf(id)})
				if len(items) == cap(items) {
					enqueueOK(t, p, 1, positioned(0, int64(i+2-len(items)), items...), now)
					items = items[:0]
				}
			}
			after := used()
			lane := p.Keyspace().Keys(jq(0)).Lane(LaneOf(group, "", "jobs", 0))
			if l := r.Client().LLen(ctx, lane).Val(); l != n+1 {
				t.Fatalf("lane holds %d", l)
			}
			usage, err := r.Client().MemoryUsage(ctx, lane, 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			perLane, perUsed := float64(usage)/n, float64(after-before)/n
			entryLen := len(Entry(0, fmt.Sprintf("01JD%022d", 0), LaneOf(group, "", "jobs", 0), envOf(fmt.Sprintf("01JD%022d", 0))))
			t.Logf("envelope %d bytes, entry %d; per queued job: lane %.1f bytes (MEMORY USAGE), used_memory %.1f bytes", envLen, entryLen, perLane, perUsed)
			// The list's overhead: a few bytes per entry, and the allocator's
			// rounding of its 8 kB nodes.
			if limit := float64(entryLen + 32); perLane > limit || perUsed > limit {
				t.Fatalf("a queued job costs %.1f bytes (lane) / %.1f (used_memory), more than its entry (%d) + 32", perLane, perUsed, entryLen)
			}
			if limit := float64(envLen + 64); group == "" && (perLane > limit || perUsed > limit) {
				t.Fatalf("a queued job costs %.1f bytes (lane) / %.1f (used_memory), more than its envelope (%d) + 64", perLane, perUsed, envLen)
			}
		})
	}
}
