package queue

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// kafkaPartition is one Kafka partition's records as a relay reads them:
// jobs of groups, jobs without a group (with and without a tenant), delayed
// jobs, client-chosen ids, a bulk group and its close, at consecutive
// offsets from 1000.
func kafkaPartition(kp int32, n int) []Item {
	var recs []Item
	for i := range n {
		id := fmt.Sprintf("k%d-%04d", kp, i)
		var it Item
		switch i % 5 {
		case 0:
			it = item(id, "g"+strconv.Itoa(i%7))
		case 1:
			it = item(id, "")
		case 2:
			it = item(id, "")
			it.Tenant = "acme"
		case 3:
			it = item(id, "bulk")
		case 4:
			it = item(id, "g"+strconv.Itoa(i%7))
			if i%20 == 4 {
				it.RunAt = now.Add(time.Hour)
			}
		}
		if i%30 == 7 {
			it.IDGiven = true
		}
		recs = append(recs, it)
	}
	recs = append(recs, closeItem("bulk", int64(n/5)))
	return positioned(kp, 1000, recs...)
}

// enqueueIn enqueues items in batches of size, as one relay would read
// them, and returns the outcomes.
func enqueueIn(t *testing.T, p *Pool, token uint64, items []Item, size int, at time.Time) []Result {
	t.Helper()
	var out []Result
	for b := 0; b < len(items); b += size {
		out = append(out, enqueueOK(t, p, token, items[b:min(b+size, len(items))], at)...)
	}
	return out
}

// work claims, acks, fails and kills some of every partition's jobs, so a
// replay meets jobs in every state.
func work(t *testing.T, p *Pool) {
	t.Helper()
	ctx := context.Background()
	limits := DeadLimits{Max: 100, Keep: time.Hour}
	for part := range p.Keyspace().Partitions {
		jobs, err := p.Claim(ctx, jq(part), 24, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i, j := range jobs {
			switch i % 4 {
			case 0, 1:
				ack(t, p, part, j)
			case 2:
				if res, err := p.Fail(ctx, jq(part), Failure{Job: j, Cause: "e", NextTry: now.Add(time.Second)}, now, limits); res != FailRetrying || err != nil {
					t.Fatalf("fail: %d %v", res, err)
				}
			case 3:
				if i%8 == 3 {
					if res, err := p.Fail(ctx, jq(part), Failure{Job: j, Cause: "e"}, now, limits); res != FailDead || err != nil {
						t.Fatalf("fail: %d %v", res, err)
					}
				} // else it stays in flight
			}
		}
	}
}

func sumStat(t *testing.T, p *Pool, field string) int64 {
	t.Helper()
	var n int64
	for part := range p.Keyspace().Partitions {
		v, _ := p.Client(part).HGet(context.Background(), p.Keyspace().Keys(jq(part)).Stats(), field).Int64()
		n += v
	}
	return n
}

// withoutFence leaves the fence keys out of a dump: a new relay's token
// moves them, which is all it should move.
func withoutFence(key, field string) bool {
	return strings.HasSuffix(key, ":fence") || dedupeCounters(key, field)
}

// A relay that fails over replays a whole Kafka partition from an offset
// committed before its records were applied, in batches of other sizes,
// into a Redis that holds those jobs in every state (ready, in flight,
// delayed, done, dead). Nothing applies twice: every record is a
// duplicate, and Redis is as it was but for the dedupe counters. Records
// past the old end apply as usual.
func TestKafkaPartitionReplayAppliesNothingTwice(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 4, r.Addr(), nil)
	recs := append(kafkaPartition(3, 300), kafkaPartition(5, 40)...)
	for i, res := range enqueueIn(t, p, 1, recs, 100, now) {
		if want := map[bool]Outcome{true: Closed, false: Queued}[recs[i].Close]; !recs[i].RunAt.IsZero() && res.Outcome != Delayed ||
			recs[i].RunAt.IsZero() && res.Outcome != want {
			t.Fatalf("record %d: %v %v", i, res.Outcome, res.Err)
		}
	}
	work(t, p)
	before := dump(t, r.Client(), withoutFence)
	deduped := sumStat(t, p, "deduped")

	for i, res := range enqueueIn(t, p, 2, recs, 37, now.Add(time.Minute)) {
		if res.Outcome != Duplicate {
			t.Fatalf("replayed record %d (%s, offset %d): %v %v", i, recs[i].ID, recs[i].Offset, res.Outcome, res.Err)
		}
	}
	after := dump(t, r.Client(), withoutFence)
	if !maps.Equal(before, after) {
		t.Fatalf("the replay changed Redis:\n%s", diffDumps(before, after))
	}
	if n := sumStat(t, p, "deduped") - deduped; n != int64(len(recs)) {
		t.Fatalf("deduped %d, want %d", n, len(recs))
	}
	for part := range p.Keyspace().Partitions {
		f, _ := p.Funnel(context.Background(), jq(part))
		if f.Milestones["jobs"][MilestoneRelayed] > 0 && f.Milestones["jobs"][MilestoneDeduplicated] == 0 {
			t.Errorf("partition %d relayed jobs and counted no duplicate: %v", part, f.Milestones["jobs"])
		}
	}

	// The replay goes on past what was applied: the tail of the old run
	// and new records in one batch.
	tail := recs[300-4 : 301] // Kafka partition 3's last records and its close
	more := positioned(3, 1301, item("new-1", ""), item("new-2", "g1"))
	res := enqueueOK(t, p, 2, append(append([]Item{}, tail...), more...), now.Add(time.Minute))
	for i, r := range res {
		want := Duplicate
		if i >= len(tail) {
			want = Queued
		}
		if r.Outcome != want {
			t.Fatalf("tail and new records: %d is %v, want %v", i, r.Outcome, want)
		}
	}
}

// A relay retries a batch whose first attempt applied in part: here one
// Redis of two was down, so one partition took its records and the other
// none. The retry applies each record once: the two Redis servers end as
// they do when the batch applies in one go.
func TestRetriedBatchAfterAPartialApplyChangesNothingTwice(t *testing.T) {
	r0, r1 := testenv.Redis(t), testenv.Redis(t)
	ref0, ref1 := testenv.Redis(t), testenv.Redis(t)
	p := newPool(t, 2, r0.Addr(), map[int]string{1: r1.Addr()})
	ref := newPool(t, 2, ref0.Addr(), map[int]string{1: ref1.Addr()})
	ctx := context.Background()
	// 700 records: more than one script call per partition.
	recs := kafkaPartition(0, 700)
	enqueueOK(t, ref, 1, recs, now)

	r1.Stop()
	if _, err := p.Enqueue(ctx, 1, recs, now); err == nil || !Transient(err) {
		t.Fatalf("with a Redis down: %v", err)
	}
	if n, _ := r0.Client().HGet(ctx, p.Keyspace().Keys(jq(0)).Stats(), "relayed").Int(); n == 0 {
		t.Fatal("the Redis that was up applied nothing: no partial apply to retry")
	}
	r1.Restart()
	testenv.WaitFor(t, 5*time.Second, "Redis back", func() bool { return r1.Client().Ping(ctx).Err() == nil })
	res := enqueueOK(t, p, 1, recs, now)
	for i, it := range recs {
		onUp := p.Keyspace().PartitionOfJob(it.Group, it.ID) == 0
		if onUp && res[i].Outcome != Duplicate || !onUp && res[i].Outcome == Duplicate {
			t.Fatalf("record %d on partition %d: %v", i, p.Keyspace().PartitionOfJob(it.Group, it.ID), res[i].Outcome)
		}
	}
	for i, pair := range [][2]*testenv.RedisServer{{r0, ref0}, {r1, ref1}} {
		got, want := dump(t, pair[0].Client(), dedupeCounters), dump(t, pair[1].Client(), dedupeCounters)
		if !maps.Equal(got, want) {
			t.Fatalf("Redis %d after the retry differs from a single apply:\n%s", i, diffDumps(want, got))
		}
	}
}

// Within one partition: a batch whose first script call applied (a
// connection lost after it) is retried whole; later, batches already
// applied come again after newer ones (a retry that arrived late). Each
// record applies once: Redis ends as after one clean pass.
func TestRetriedAndOutOfOrderBatchesApplyOnce(t *testing.T) {
	r, rr := testenv.Redis(t), testenv.Redis(t)
	p, ref := newPool(t, 1, r.Addr(), nil), newPool(t, 1, rr.Addr(), nil)
	recs := kafkaPartition(2, 900)
	enqueueIn(t, ref, 1, recs, 300, now)

	enqueueOK(t, p, 1, recs[:maxScriptBatch], now) // the first call of a batch
	res := enqueueOK(t, p, 1, recs[:300], now)     // the batch retried
	for i, r := range res {
		applied := r.Outcome == Queued || r.Outcome == Delayed
		if i < maxScriptBatch && r.Outcome != Duplicate || i >= maxScriptBatch && !applied {
			t.Fatalf("retry, record %d: %v", i, r.Outcome)
		}
	}
	enqueueOK(t, p, 1, recs[300:600], now)
	enqueueOK(t, p, 1, recs[600:], now)
	for _, old := range [][]Item{recs[300:600], recs[:300], recs[550:650]} {
		for i, r := range enqueueOK(t, p, 1, old, now) {
			if r.Outcome != Duplicate {
				t.Fatalf("an old batch again, record %d (offset %d): %v", i, old[i].Offset, r.Outcome)
			}
		}
	}
	if got, want := dump(t, r.Client(), dedupeCounters), dump(t, rr.Client(), dedupeCounters); !maps.Equal(got, want) {
		t.Fatalf("retried and repeated batches differ from one clean pass:\n%s", diffDumps(want, got))
	}
	if n := sumStat(t, p, "deduped"); n != int64(maxScriptBatch+300+300+100) {
		t.Fatalf("deduped %d", n)
	}
}

// TestARefusedRecordIsNotMarkedApplied: a record Redis refused (a key of
// the wrong type) keeps its Kafka partition's watermark below it, so a
// relay that dies before producing it again finds it unapplied on replay
// and writes it then; the watermark would otherwise have skipped it for
// good.
func TestARefusedRecordIsNotMarkedApplied(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	at := func(it Item, off int64) Item {
		it.KafkaPartition, it.Offset, it.HasPosition = 3, off, true
		return it
	}
	batch := []Item{at(item("a", "ok"), 10), at(item("b", "broken"), 11), at(item("c", "ok"), 12)}
	r.Client().Set(ctx, k.Lane(LaneOf("broken", "", "jobs", 0)), "not a list", 0)
	res, err := p.Enqueue(ctx, 1, batch, now)
	if err != nil || res[0].Outcome != Queued || res[1].Outcome != Failed || res[2].Outcome != Queued {
		t.Fatalf("first pass: %+v %v", res, err)
	}
	if wm := r.Client().HGet(ctx, k.Watermark(), "3").Val(); wm != "10" {
		t.Fatalf("watermark %q after offset 11 was refused, want 10", wm)
	}
	r.Client().Del(ctx, k.Lane(LaneOf("broken", "", "jobs", 0)))
	res, err = p.Enqueue(ctx, 1, batch, now) // the replay
	if err != nil || res[0].Outcome != Duplicate || res[1].Outcome != Queued {
		t.Fatalf("replay: %+v %v", res, err)
	}
	if n := r.Client().LLen(ctx, k.Lane(LaneOf("broken", "", "jobs", 0))).Val(); n != 1 {
		t.Fatalf("the refused job on its lane after the replay: %d entries, want 1", n)
	}
}

// Plain jobs of one Kafka partition and one lane go to the script as a run
// (layOut). A replay whose watermark falls inside a run applies only the
// jobs past it, in offset order; a refused run keeps the watermark below
// its first job past it, whatever the later runs applied.
func TestARunAppliesOnlyPastTheWatermark(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	at := func(id, group string, off int64) Item {
		it := item(id, group)
		it.KafkaPartition, it.Offset, it.HasPosition = 0, off, true
		return it
	}
	var first, replay []Item
	for off := range int64(15) {
		it := at(fmt.Sprintf("j%02d", off), "g", off)
		if off < 10 {
			first = append(first, it)
		}
		if off >= 5 {
			replay = append(replay, it)
		}
	}
	enqueueOK(t, p, 1, first, now)
	for i, res := range enqueueOK(t, p, 1, replay, now) {
		if want := map[bool]Outcome{true: Duplicate, false: Queued}[i < 5]; res.Outcome != want {
			t.Fatalf("replay, offset %d: %v, want %v", replay[i].Offset, res.Outcome, want)
		}
	}
	entries := r.Client().LRange(ctx, k.Lane(LaneOf("g", "", "jobs", 0)), 0, -1).Val()
	if len(entries) != 15 {
		t.Fatalf("%d entries on the lane, want 15", len(entries))
	}
	for i, e := range entries {
		if pe, err := ParseEntry(e); err != nil || pe.ID != fmt.Sprintf("j%02d", i) {
			t.Fatalf("entry %d: %q %v", i, e, err)
		}
	}

	// Offsets 20-22 applied on a lane that works: the watermark is 22.
	enqueueOK(t, p, 1, []Item{at("a20", "ok", 20), at("a21", "ok", 21), at("a22", "ok", 22)}, now)
	r.Client().Set(ctx, k.Lane(LaneOf("broken", "", "jobs", 0)), "not a list", 0)
	batch := []Item{at("b21", "broken", 21), at("b22", "broken", 22), at("b23", "broken", 23), at("b24", "broken", 24),
		at("a25", "ok", 25), at("a26", "ok", 26)}
	res, err := p.Enqueue(ctx, 1, batch, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []Outcome{Duplicate, Duplicate, Failed, Failed, Queued, Queued}
	for i := range batch {
		if res[i].Outcome != want[i] {
			t.Fatalf("offset %d: %v, want %v", batch[i].Offset, res[i].Outcome, want[i])
		}
	}
	if wm := r.Client().HGet(ctx, k.Watermark(), "0").Val(); wm != "22" {
		t.Fatalf("watermark %q after offset 23 was refused, want 22", wm)
	}
}
