package queue

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// kill enqueues id in group and fails it to the dead set at death.
func kill(t *testing.T, p *Pool, id, group string, death time.Time) int {
	t.Helper()
	ctx := context.Background()
	if _, err := p.Enqueue(ctx, 1, []Item{item(id, group)}, death); err != nil {
		t.Fatal(err)
	}
	part := p.Keyspace().PartitionOfJob(group, id)
	jobs, err := p.Claim(ctx, jq(part), 1, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("claim %s: %v %v", id, jobs, err)
	}
	if r, err := p.Fail(ctx, jq(part), Failure{Job: jobs[0], Cause: "boom " + id}, death, DeadLimits{Max: 1000, Keep: time.Hour}); r != FailDead || err != nil {
		t.Fatalf("fail %s: %d %v", id, r, err)
	}
	return part
}

// TestDeadPageWalksTiesByID: jobs that died in the same millisecond page
// by id, none skipped, none twice, whatever the page size.
func TestDeadPageWalksTiesByID(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("d%d", i)
		kill(t, p, id, "g"+id, now.Add(time.Duration(i/3)*time.Millisecond)) // three per millisecond
		want = append(want, id)
	}
	slices.Reverse(want) // newest first; ties by id, highest first
	for size := 1; size <= 8; size++ {
		var got []string
		ms, id := int64(-1), ""
		for range 20 {
			refs, err := p.DeadPage(context.Background(), jq(0), ms, id, size)
			if err != nil {
				t.Fatal(err)
			}
			if len(refs) == 0 {
				break
			}
			for _, r := range refs {
				got = append(got, r.ID)
			}
			last := refs[len(refs)-1]
			ms, id = last.Score(), last.ID
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of %d: %v, want %v", size, got, want)
		}
	}
}

// TestReplayDeadOutcomes: a replay makes the job ready again with its
// attempts reset and the ready depth right; a second replay finds nothing;
// a cancelled group's job stays dead; a job whose record expired is taken
// off the dead set; a purge deletes.
func TestReplayDeadOutcomes(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 2, r.Addr(), nil)
	ctx := context.Background()
	part := kill(t, p, "a", "ga", now)
	if n, err := p.ReplayDead(ctx, jq(part), "a", now); n != ReplayDone || err != nil {
		t.Fatalf("replay: %d %v", n, err)
	}
	if n, _ := p.ReplayDead(ctx, jq(part), "a", now); n != ReplayGone {
		t.Errorf("a second replay: %d", n)
	}
	load, err := p.Load(ctx, part, []string{"jobs"}, time.Minute)
	if err != nil || load.Ready != 1 {
		t.Errorf("ready depth after the replay: %+v %v", load, err)
	}
	k := p.Keyspace().Keys(jq(part))
	// The record keeps its last error, without the entry, until it expires.
	if h := r.Client().HGetAll(ctx, k.Job("a")).Val(); h["env"] != "" || h["state"] != "" || h["last_error"] != "boom a" {
		t.Errorf("the replayed job's record: %v", h)
	}
	jobs, err := p.Claim(ctx, jq(part), 5, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].Attempt != 1 {
		t.Fatalf("claim after replay: %+v %v", jobs, err)
	}
	f, _ := p.Funnel(ctx, jq(part))
	if f.Milestones["jobs"][MilestoneReplayed] != 1 {
		t.Errorf("funnel: %v", f.Milestones)
	}

	part = kill(t, p, "b", "gb", now)
	if _, err := p.CancelGroup(ctx, "jobs", "gb", now); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.ReplayDead(ctx, jq(part), "b", now); n != ReplayCancelled {
		t.Errorf("replay into a cancelled group: %d", n)
	}

	part = kill(t, p, "c", "gc", now)
	r.Client().Del(ctx, p.Keyspace().Keys(jq(part)).Job("c"))
	if n, _ := p.ReplayDead(ctx, jq(part), "c", now); n != ReplayExpired {
		t.Errorf("replay of an expired job: %d", n)
	}
	if _, _, ok, _ := p.FindDead(ctx, "jobs", "c"); ok {
		t.Error("the expired job is still in the dead set")
	}

	part = kill(t, p, "d", "gd", now)
	if ok, err := p.PurgeDead(ctx, jq(part), "d"); !ok || err != nil {
		t.Errorf("purge: %v %v", ok, err)
	}
	if ok, _ := p.PurgeDead(ctx, jq(part), "d"); ok {
		t.Error("a second purge found it")
	}
	if n := r.Client().Exists(ctx, p.Keyspace().Keys(jq(part)).Job("d")).Val(); n != 0 {
		t.Error("the purged job's record is still there")
	}
}

// TestReplayKeepsACompletedBulkGroupFinal: replaying a dead item of a bulk
// group that completed does not complete it again, and the group keeps its
// expiry.
func TestReplayKeepsACompletedBulkGroupFinal(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 2, r.Addr(), nil)
	ctx := context.Background()
	it := item("bulk.0", "bulk")
	it.GroupTotal = 1
	if _, err := p.Enqueue(ctx, 1, []Item{it, closeItem("bulk", 1)}, now); err != nil {
		t.Fatal(err)
	}
	part := p.Keyspace().PartitionOf("bulk")
	jobs, err := p.Claim(ctx, jq(part), 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatal(jobs, err)
	}
	if r, err := p.Fail(ctx, jq(part), Failure{Job: jobs[0], Cause: "boom"}, now, DeadLimits{Max: 10, Keep: time.Hour}); r != FailDead || err != nil {
		t.Fatal(r, err)
	}
	if g, err := p.TakeCompleted(ctx, jq(part)); g != "bulk" || err != nil {
		t.Fatalf("completed: %q %v", g, err)
	}
	if err := p.FinishCompleted(ctx, "jobs", "bulk", map[string]any{"callback_state": "delivered"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	k := p.Keyspace().Keys(jq(part))
	if n, err := p.ReplayDead(ctx, jq(part), "bulk.0", now); n != ReplayDone || err != nil {
		t.Fatal(n, err)
	}
	if ttl := r.Client().TTL(ctx, k.Group("bulk")).Val(); ttl <= 0 {
		t.Errorf("the completed group lost its expiry: %v", ttl)
	}
	jobs, err = p.Claim(ctx, jq(part), 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatal(jobs, err)
	}
	if ok, err := p.Ack(ctx, jq(part), Done{Job: jobs[0]}, now, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if n := r.Client().LLen(ctx, k.Completed()).Val(); n != 0 {
		t.Errorf("the group was queued as completed again (%d)", n)
	}
}

// TestReplayedItemIsNotReportedDead: a bulk group's dead item, replayed and
// then done with an empty result, reads "done" in the group's results,
// not its old death (found in review: the ack writes nothing for an empty
// result, so the stale "dead" stayed).
func TestReplayedItemIsNotReportedDead(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	part := kill(t, p, "g.0", "g", now)
	if st, _ := p.JobStates(ctx, "jobs", "g", []string{"g.0"}); st[0].State != "dead" {
		t.Fatalf("before the replay: %+v, want dead", st[0])
	}
	if n, err := p.ReplayDead(ctx, jq(part), "g.0", now); n != ReplayDone || err != nil {
		t.Fatalf("replay: %d %v", n, err)
	}
	jobs, err := p.Claim(ctx, jq(part), 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim after replay: %v %v", jobs, err)
	}
	if ok, err := p.Ack(ctx, jq(part), Done{Job: jobs[0]}, now, time.Hour); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	st, err := p.JobStates(ctx, "jobs", "g", []string{"g.0"})
	if err != nil || st[0].State != "done" || st[0].LastError != "" {
		t.Fatalf("after the replay and ack: %+v (%v), want done without an error", st, err)
	}
}
