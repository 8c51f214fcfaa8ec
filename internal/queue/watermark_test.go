package queue

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// newLog is a batch of Kafka partition 0 at offsets 0..9 of the topic with
// id topicID: plain jobs (which travel as runs), a delayed one and one
// with a client-chosen id (which travel one by one), ids prefixed by tag.
func newLog(tag, topicID string) []Item {
	var items []Item
	for i := range 10 {
		it := item(fmt.Sprintf("%s-%d", tag, i), "")
		switch i {
		case 4:
			it.RunAt = now.Add(time.Hour)
		case 7:
			it.IDGiven = true
		}
		it.TopicID = topicID
		items = append(items, it)
	}
	return positioned(0, 0, items...)
}

// wantOutcomes fails the test unless every result is one of want.
func wantOutcomes(t *testing.T, what string, res []Result, want ...Outcome) {
	t.Helper()
	for i, r := range res {
		if !slices.Contains(want, r.Outcome) {
			t.Fatalf("%s: item %d is %v (%v), want one of %v", what, i, r.Outcome, r.Err, want)
		}
	}
}

// The topic was deleted and created again: its new log starts at offset 0
// under a new topic id, below the old log's watermark. The new records are
// applied, not dropped as duplicates, the change is counted and reported,
// and from then on the new log dedupes as usual.
func TestAWatermarkOfAnotherTopicIDDoesNotDedupe(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	stat := func(field string) int64 {
		v, _ := r.Client().HGet(ctx, k.Stats(), field).Int64()
		return v
	}

	wantOutcomes(t, "the old log", enqueueOK(t, p, 1, newLog("old", "AAAA"), now), Queued, Delayed)
	// The same log replayed: every record a duplicate.
	wantOutcomes(t, "a replay of the old log", enqueueOK(t, p, 1, newLog("again", "AAAA"), now), Duplicate)
	if n := stat("wm_log_changed"); n != 0 {
		t.Fatalf("wm_log_changed %d after a replay of the same log, want 0", n)
	}

	var (
		mu      sync.Mutex
		changes []LogChange
	)
	record := func(c LogChange) { mu.Lock(); changes = append(changes, c); mu.Unlock() }
	res, err := p.EnqueueReporting(ctx, 1, newLog("new", "BBBB"), now, record)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, "the new log at the old log's offsets", res, Queued, Delayed)
	if n := stat("wm_log_changed"); n != 1 {
		t.Fatalf("wm_log_changed %d, want 1", n)
	}
	want := LogChange{Queue: jq(0), KafkaPartition: 0, OldTopicID: "AAAA", NewTopicID: "BBBB", OldOffset: 9}
	if len(changes) != 1 || changes[0] != want {
		t.Fatalf("reported %+v, want [%+v]", changes, want)
	}
	if wm := r.Client().HGetAll(ctx, k.Watermark()).Val(); wm["0"] != "9" || wm["0:topic_id"] != "BBBB" {
		t.Fatalf("watermark %v, want offset 9 of BBBB", wm)
	}
	// Both logs' jobs are in Redis: 2 x 9 on the lane or delayed.
	if n := r.Client().LLen(ctx, k.Lane(LaneOf("", "", "jobs", 0))).Val() + r.Client().ZCard(ctx, k.Delayed()).Val(); n != 20 {
		t.Fatalf("%d jobs in Redis, want 20 (10 of each log)", n)
	}

	// The new log replayed dedupes against its own watermark.
	wantOutcomes(t, "a replay of the new log", enqueueOK(t, p, 1, newLog("new-again", "BBBB"), now), Duplicate)
	if n := stat("wm_log_changed"); n != 1 {
		t.Fatalf("wm_log_changed %d after a replay of the new log, want still 1", n)
	}
}

// A watermark without a topic id (written before ids, or by a relay that
// could not learn one) adopts the first id it meets: a relay upgraded in
// place dedupes its replay as before. An item without an id compares
// offsets only, whatever id is stored.
func TestAWatermarkWithoutATopicIDAdoptsOne(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))

	wantOutcomes(t, "without an id", enqueueOK(t, p, 1, newLog("old", ""), now), Queued, Delayed)
	if id, _ := r.Client().HGet(ctx, k.Watermark(), "0:topic_id").Result(); id != "" {
		t.Fatalf("an item without a topic id stored one: %q", id)
	}
	wantOutcomes(t, "with an id, same offsets", enqueueOK(t, p, 1, newLog("upgraded", "AAAA"), now), Duplicate)
	wantOutcomes(t, "without an id again", enqueueOK(t, p, 1, newLog("unknown", ""), now), Duplicate)
	if wm := r.Client().HGetAll(ctx, k.Watermark()).Val(); wm["0"] != "9" || wm["0:topic_id"] != "AAAA" {
		t.Fatalf("watermark %v, want offset 9 of AAAA", wm)
	}
	if n, _ := r.Client().HGet(ctx, k.Stats(), "wm_log_changed").Int64(); n != 0 {
		t.Fatalf("wm_log_changed %d, want 0", n)
	}
}

// A new log whose every record Redis refuses still forgets the old log's
// watermark: a replay of the new log must not be dropped against it.
func TestAChangedLogForgetsTheOldOffsetEvenWhenNothingApplies(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	wantOutcomes(t, "the old log", enqueueOK(t, p, 1, newLog("old", "AAAA"), now), Queued, Delayed)

	// A group whose keys hold the wrong type: Redis refuses its jobs.
	r.Client().Set(ctx, k.Lane(LaneOf("bad", "", "jobs", 0)), "x", 0)
	bad := item("refused", "bad")
	bad.TopicID = "BBBB"
	wantOutcomes(t, "a refused record of the new log", enqueueOK(t, p, 1, positioned(0, 0, bad), now), Failed)
	if wm := r.Client().HGetAll(ctx, k.Watermark()).Val(); wm["0"] != "-1" || wm["0:topic_id"] != "BBBB" {
		t.Fatalf("watermark %v, want -1 of BBBB", wm)
	}
	wantOutcomes(t, "the new log", enqueueOK(t, p, 1, newLog("new", "BBBB"), now), Queued, Delayed)
}

// A truncated log shows in the queue partitions whose watermark lies at or
// past its end. A queue partition whose last records came earlier in the
// lost stretch has its watermark below the end once the log grew back,
// at offsets new records now hold. One proof is enough for the log: both
// are lowered to below the resume offset (as the real unclean election of
// relay's TestApacheKafkaUncleanElectionTruncatesTheLog leaves them); a
// watermark already below the resume offset, and another Kafka
// partition's, stay.
func TestATruncationOneQueuePartitionShowsLowersTheOthersPastTheResume(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 4, r.Addr(), nil)
	ctx := context.Background()
	rdb := r.Client()
	wm := func(qp int) string { return p.Keyspace().Keys(jq(qp)).Watermark() }
	// Kafka partition 0: the log ends at 95 and the relay resumes at 50.
	for qp, off := range []int64{99, 91, 40} { // proof, grown past, below resume
		if err := rdb.HSet(ctx, wm(qp), "0", off, "1", 99).Err(); err != nil {
			t.Fatal(err)
		}
	}
	lowered, err := p.LowerTruncated(ctx, 1, "jobs", 0, 95, 50)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range lowered {
		got = append(got, fmt.Sprintf("%d:%d", tr.Queue.Part, tr.OldOffset))
	}
	if want := []string{"1:91", "0:99"}; !slices.Equal(got, want) {
		t.Fatalf("lowered %v, want %v (the one grown past first, the proof last)", got, want)
	}
	for qp, want := range []string{"49", "49", "40"} {
		if v := rdb.HGet(ctx, wm(qp), "0").Val(); v != want {
			t.Fatalf("queue partition %d's watermark of Kafka partition 0 is %s, want %s", qp, v, want)
		}
		if v := rdb.HGet(ctx, wm(qp), "1").Val(); v != "99" {
			t.Fatalf("queue partition %d's watermark of Kafka partition 1 is %s: another log's, it must stay 99", qp, v)
		}
	}
	var counted int64
	for qp := range 4 {
		v, _ := rdb.HGet(ctx, p.Keyspace().Keys(jq(qp)).Stats(), "wm_truncated").Int64()
		counted += v
	}
	if counted != 2 {
		t.Fatalf("stats wm_truncated %d, want 2", counted)
	}
	// Without a proof nothing is lowered: a watermark below the log's end
	// is what a relay that died before committing leaves.
	if err := rdb.HSet(ctx, wm(2), "0", 80).Err(); err != nil {
		t.Fatal(err)
	}
	if lowered, err := p.LowerTruncated(ctx, 1, "jobs", 0, 95, 50); err != nil || len(lowered) != 0 {
		t.Fatalf("lowered %v (%v) with every watermark below the log's end", lowered, err)
	}
}
