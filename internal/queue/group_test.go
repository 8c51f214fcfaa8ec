package queue

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func closeItem(group string, total int64) Item {
	return Item{Close: true, Group: group, Topic: "jobs", GroupTotal: total, CallbackURL: "http://cb/" + group}
}

// The ack that ends a closed group queues it once; a close that arrives
// after every job ended completes the group itself; a dead job counts as
// ended.
func TestBulkGroupCompletesExactlyOnce(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	completed := func() []string { l, _ := r.Client().LRange(ctx, k.Completed(), 0, -1).Result(); return l }

	// Closed before its jobs end: the last ack completes it.
	enqueueGroup(t, p, "a", 3, 1)
	if res, err := p.Enqueue(ctx, 1, []Item{closeItem("a", 3)}, now); err != nil || res[0].Outcome != Closed {
		t.Fatalf("close: %v %v", res, err)
	}
	jobs, _ := p.Claim(ctx, jq(0), 3, time.Minute)
	p.AckMany(ctx, jq(0), []Done{{Job: jobs[0]}, {Job: jobs[1]}}, now, time.Hour)
	if got := completed(); len(got) != 0 {
		t.Fatalf("completed early: %v", got)
	}
	// The last job dies: ended all the same.
	if res, err := p.Fail(ctx, jq(0), Failure{Job: jobs[2], Cause: "boom"}, now, DeadLimits{Max: 10, Keep: time.Hour}); err != nil || res != FailDead {
		t.Fatalf("fail: %v %v", res, err)
	}
	// A redelivered close and a late ack change nothing.
	p.Enqueue(ctx, 1, []Item{closeItem("a", 3)}, now)
	p.AckMany(ctx, jq(0), []Done{{Job: jobs[0]}}, now, time.Hour)
	if got := completed(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("completed list: %v", got)
	}
	h, _ := r.Client().HGetAll(ctx, k.Group("a")).Result()
	if h["total"] != "3" || h["done"] != "2" || h["dead"] != "1" || h["completed_ms"] == "" || h["callback_url"] != "http://cb/a" {
		t.Fatalf("group a: %v", h)
	}

	// Every job ended before the close arrived: the close completes it.
	enqueueGroup(t, p, "b", 2, 1)
	jobs, _ = p.Claim(ctx, jq(0), 2, time.Minute)
	p.AckMany(ctx, jq(0), []Done{{Job: jobs[0]}, {Job: jobs[1]}}, now, time.Hour)
	if got := completed(); len(got) != 1 {
		t.Fatalf("completed without a total: %v", got)
	}
	p.Enqueue(ctx, 1, []Item{closeItem("b", 2)}, now)
	if got := completed(); len(got) != 2 || got[1] != "b" {
		t.Fatalf("completed list: %v", got)
	}
	// The watcher's side: take, list, finish.
	g, err := p.TakeCompleted(ctx, jq(0))
	if err != nil || g != "a" {
		t.Fatalf("take: %q %v", g, err)
	}
	if l, _ := p.Completing(ctx, jq(0)); len(l) != 1 || l[0] != "a" {
		t.Fatalf("completing: %v", l)
	}
	states, err := p.JobStates(ctx, "jobs", "a", []string{"a-0", "a-1", "a-2"})
	if err != nil || states[0].State != "done" || states[2].State != "dead" || states[2].LastError != "boom" || states[2].Attempts != 1 {
		t.Fatalf("job states: %+v %v", states, err)
	}
	if err := p.FinishCompleted(ctx, "jobs", "a", map[string]any{"callback_state": "delivered"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if l, _ := p.Completing(ctx, jq(0)); len(l) != 0 {
		t.Fatalf("completing after finish: %v", l)
	}
	if ttl, _ := r.Client().TTL(ctx, k.Group("a")).Result(); ttl <= 0 {
		t.Fatalf("a finished group is kept forever (ttl %v)", ttl)
	}
}

// A group without a total (single jobs) expires once nothing of it is
// left, and lives again, without the expiry, when it gets new jobs.
func TestIdleGroupsExpire(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	enqueueGroup(t, p, "single", 1, 1)
	jobs, _ := p.Claim(ctx, jq(0), 1, time.Minute)
	p.AckMany(ctx, jq(0), []Done{{Job: jobs[0]}}, now, time.Hour)
	if ttl, _ := r.Client().TTL(ctx, k.Group("single")).Result(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("idle group ttl %v, want up to an hour", ttl)
	}
	p.Enqueue(ctx, 1, []Item{item("single-2", "single")}, now)
	if ttl, _ := r.Client().TTL(ctx, k.Group("single")).Result(); ttl != -1 {
		t.Fatalf("a group with new work still expires (ttl %v)", ttl)
	}
}

// Cancel: ready jobs go at once, a delayed one when it comes due, a
// running one finishes; the group then completes.
func TestCancelGroup(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	enqueueGroup(t, p, "c", 1500, 1)
	p.Enqueue(ctx, 1, []Item{closeItem("c", 1500)}, now)
	jobs, _ := p.Claim(ctx, jq(0), 2, time.Minute)
	// One fails and waits in delayed; one keeps running.
	p.Fail(ctx, jq(0), Failure{Job: jobs[0], Cause: "later", NextTry: now.Add(time.Second)}, now, DeadLimits{Max: 10, Keep: time.Hour})
	n, err := p.CancelGroup(ctx, "jobs", "c", now)
	if err != nil || n != 1498 {
		t.Fatalf("cancel: %d %v", n, err)
	}
	if more, _ := p.Claim(ctx, jq(0), 10, time.Minute); len(more) != 0 {
		t.Fatalf("claimed from a cancelled group: %v", more)
	}
	if n := r.Client().Exists(ctx, k.Lane("g/c")).Val(); n != 0 {
		t.Fatal("the cancelled group's lane is still there")
	}
	if moved, err := p.Promote(ctx, jq(0), 10, now.Add(2*time.Second)); err != nil || moved != 0 {
		t.Fatalf("promote of a cancelled group's job: %d %v", moved, err)
	}
	st, _ := p.GroupStatus(ctx, "jobs", "c")
	if st.Cancelled != 1499 || st.Delayed != 0 || st.Running != 1 || st.Queued != 0 || !st.CompletedAt.IsZero() {
		t.Fatalf("status: %+v", st)
	}
	p.AckMany(ctx, jq(0), []Done{{Job: jobs[1]}}, now, time.Hour)
	st, _ = p.GroupStatus(ctx, "jobs", "c")
	if st.Done != 1 || st.CompletedAt.IsZero() {
		t.Fatalf("status after the running job: %+v", st)
	}
	if l, _ := r.Client().LRange(ctx, k.Completed(), 0, -1).Result(); len(l) != 1 {
		t.Fatalf("completed: %v", l)
	}
	states, err := p.JobStates(ctx, "jobs", "c", []string{"c-7", jobs[0].ID, jobs[1].ID})
	if err != nil || states[0].State != "cancelled" || states[1].State != "cancelled" || states[2].State != "done" {
		t.Fatalf("item states: %+v %v", states, err)
	}
}

// Shortest job first: with the same priority, a small group is served 4:1
// against a big one, and a mid-sized one 2:1.
func TestSmallGroupsWeighMore(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "huge", 20000, 1)
	enqueueGroup(t, p, "mid", 5000, 1)
	enqueueGroup(t, p, "tiny", 50, 1)
	served := map[string]int{}
	for range 7 {
		jobs, err := p.Claim(ctx, jq(0), 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			served[j.Group]++
		}
	}
	// 70 jobs at 4:2:1: tiny 40, mid 20, huge 10.
	if served["tiny"] < 38 || served["mid"] < 18 || served["huge"] < 8 || served["huge"] > 12 {
		t.Fatalf("served %v of 70, want about tiny 40, mid 20, huge 10", served)
	}
	t.Logf("served %v", served)
}

// A group built job by job (the single and batch APIs) whose envelopes
// state group_total and callback_url completes like a bulk one.
func TestGroupTotalFromEnvelopes(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	items := []Item{item("e-0", "e"), item("e-1", "e")}
	for i := range items {
		items[i].GroupTotal, items[i].CallbackURL = 2, "http://cb/e"
	}
	p.Enqueue(ctx, 1, items, now)
	jobs, _ := p.Claim(ctx, jq(0), 2, time.Minute)
	p.AckMany(ctx, jq(0), []Done{{Job: jobs[0]}, {Job: jobs[1]}}, now, time.Hour)
	k := p.Keyspace().Keys(jq(0))
	if l, _ := r.Client().LRange(ctx, k.Completed(), 0, -1).Result(); len(l) != 1 || l[0] != "e" {
		t.Fatalf("completed: %v", l)
	}
	if cb, _ := r.Client().HGet(ctx, k.Group("e"), "callback_url").Result(); cb != "http://cb/e" {
		t.Fatalf("callback_url %q", cb)
	}
}

// The gate streams a bulk group's items before its close, which alone
// carries the total: items that end before the close arrives keep their
// results and states all the same, and so do items a cancel drops before
// any close. A group that never gets a total (single jobs) keeps its
// results only as long as its hash.
func TestBulkItemsThatEndBeforeTheCloseKeepTheirStates(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.Keyspace().Keys(jq(0))
	enqueueOK(t, p, 1, positioned(0, 0, item("b.0", "b"), item("b.1", "b"), item("b.2", "b"), item("b.3", "b")), now)
	jobs, err := p.Claim(ctx, jq(0), 4, time.Minute)
	if err != nil || len(jobs) != 4 {
		t.Fatalf("claim: %+v %v", jobs, err)
	}
	if ok, err := p.AckMany(ctx, jq(0), []Done{{Job: jobs[0], Result: []byte(`"r0"`)}, {Job: jobs[1]}}, now, time.Hour); err != nil || !ok[0] || !ok[1] {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if res, err := p.Fail(ctx, jq(0), Failure{Job: jobs[2], Cause: "boom"}, now, DeadLimits{Max: 10, Keep: time.Hour}); res != FailDead || err != nil {
		t.Fatalf("fail: %d %v", res, err)
	}
	if res := enqueueOK(t, p, 1, positioned(0, 4, closeItem("b", 4)), now); res[0].Outcome != Closed {
		t.Fatalf("close: %v", res)
	}
	if ok, err := p.Ack(ctx, jq(0), Done{Job: jobs[3], Result: []byte(`"r3"`)}, now, time.Hour); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if l := r.Client().LRange(ctx, k.Completed(), 0, -1).Val(); len(l) != 1 || l[0] != "b" {
		t.Fatalf("completed %v", l)
	}
	states, err := p.JobStates(ctx, "jobs", "b", []string{"b.0", "b.1", "b.2", "b.3"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`done 1 "r0"`, `done 0 `, `dead 1 boom`, `done 1 "r3"`}
	for i, s := range states {
		got := fmt.Sprintf("%s %d %s%s", s.State, s.Attempts, s.Result, s.LastError)
		if got != want[i] {
			t.Errorf("item %s: %q, want %q", s.ID, got, want[i])
		}
	}

	// A cancel before any close: the dropped items read cancelled, and so
	// does the running one handed back.
	enqueueOK(t, p, 1, positioned(0, 5, item("c.0", "c"), item("c.1", "c"), item("c.2", "c")), now)
	running, _ := p.Claim(ctx, jq(0), 1, time.Minute)
	if n, err := p.CancelGroup(ctx, "jobs", "c", now); n != 2 || err != nil {
		t.Fatalf("cancel: %d %v", n, err)
	}
	if _, err := p.Release(ctx, jq(0), running); err != nil {
		t.Fatal(err)
	}
	states, _ = p.JobStates(ctx, "jobs", "c", []string{"c.0", "c.1", "c.2"})
	for _, s := range states {
		if s.State != "cancelled" {
			t.Errorf("item %s of a group cancelled before its close: %+v", s.ID, s)
		}
	}

	// A group without a total: its results go with its hash.
	enqueueOK(t, p, 1, positioned(0, 8, item("s.0", "single")), now)
	js, _ := p.Claim(ctx, jq(0), 1, time.Minute)
	if ok, err := p.Ack(ctx, jq(0), Done{Job: js[0], Result: []byte(`1`)}, now, time.Hour); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	for _, key := range []string{k.Group("single"), k.Results("single")} {
		if ttl := r.Client().TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s kept for %v, want the group's keep (1h)", key, ttl)
		}
	}
	// New jobs keep it.
	enqueueOK(t, p, 1, positioned(0, 9, item("s.1", "single")), now)
	for _, key := range []string{k.Group("single"), k.Results("single")} {
		if ttl := r.Client().TTL(ctx, key).Val(); ttl != -1 {
			t.Errorf("%s of a group with new work still expires (%v)", key, ttl)
		}
	}
}
