package queue

import (
	"context"
	"maps"
	"testing"
	"time"
)

// Every way a job moves is counted in its topic's funnel, canaries apart,
// and at every moment a partition's relayed jobs that have not ended are
// exactly the jobs it holds.
func TestFunnelCountsEveryHandOffAndBalances(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	balanced := func(what string) PartitionFunnel {
		t.Helper()
		f, err := p.Funnel(ctx, jq(0))
		if err != nil {
			t.Fatal(err)
		}
		var open int64
		for _, stages := range []map[string]map[string]int64{f.Milestones, f.Canaries} {
			for _, s := range stages {
				open += s[MilestoneRelayed] - s[MilestoneCompleted] - s[MilestoneDead] - s[MilestoneCancelled]
			}
		}
		if open != f.Held() {
			t.Fatalf("%s: relayed and not ended %d, but the partition holds %d (ready %d, delayed %d, in flight %d)",
				what, open, f.Held(), f.Ready, f.Delayed, f.Inflight)
		}
		return f
	}

	var items []Item
	for _, id := range []string{"a1", "a2", "a3", "a4", "a5"} {
		items = append(items, item(id, "ga"))
	}
	items = append(items, item("b1", "gb"), item("b2", "gb"))
	canary := item("c1", CanaryGroupPrefix+"jobs.0.0.0")
	items = append(items, canary)
	late := item("d1", "gd")
	late.RunAt = now.Add(time.Hour)
	items = append(items, late)
	items = positioned(0, 0, items...)
	if _, err := p.Enqueue(ctx, 1, items, now); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, 1, items[:2], now); err != nil { // redelivered
		t.Fatal(err)
	}
	balanced("after enqueue")

	jobs, err := p.Claim(ctx, jq(0), 100, time.Minute)
	if err != nil || len(jobs) != 8 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	byID := map[string]Claimed{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	balanced("after claim")
	done := []Done{{Job: byID["a1"]}, {Job: byID["a2"]}, {Job: byID["c1"]}}
	if _, err := p.AckMany(ctx, jq(0), done, now, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Fail(ctx, jq(0), Failure{Job: byID["a3"], Cause: "boom", NextTry: now.Add(time.Second)}, now, DeadLimits{Max: 10, Keep: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Fail(ctx, jq(0), Failure{Job: byID["a4"], Cause: "boom"}, now, DeadLimits{Max: 10, Keep: time.Hour}); err != nil {
		t.Fatal(err)
	}
	balanced("after settling")
	// b1 and b2 are in flight when their group is cancelled: handed back,
	// they are dropped as cancelled. A later job of the group is dropped
	// at enqueue.
	if _, err := p.CancelGroup(ctx, "jobs", "gb", now); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Release(ctx, jq(0), []Claimed{byID["b1"], byID["b2"]}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, 1, positioned(0, 9, item("b3", "gb")), now); err != nil {
		t.Fatal(err)
	}
	f := balanced("after the cancel")

	want := map[string]int64{
		MilestoneRelayed: 8, MilestoneDeduplicated: 2, MilestoneDropped: 1, MilestoneDequeued: 7,
		MilestoneCompleted: 2, MilestoneRetried: 1, MilestoneDead: 1, MilestoneCancelled: 2,
	}
	if !maps.Equal(f.Milestones["jobs"], want) {
		t.Errorf("jobs' funnel %v, want %v", f.Milestones["jobs"], want)
	}
	wantCanary := map[string]int64{MilestoneRelayed: 1, MilestoneDequeued: 1, MilestoneCompleted: 1}
	if !maps.Equal(f.Canaries["jobs"], wantCanary) {
		t.Errorf("canaries' funnel %v, want %v", f.Canaries["jobs"], wantCanary)
	}
	if f.Inflight != 1 || f.Delayed != 2 || f.Ready != 0 || f.Dead != 1 {
		t.Errorf("held: in flight %d (a5), delayed %d (a3, d1), ready %d, dead %d (a4)", f.Inflight, f.Delayed, f.Ready, f.Dead)
	}

	if err := p.CountMilestone(ctx, "jobs", MilestoneDeadLettered, false, 3); err != nil {
		t.Fatal(err)
	}
	f = balanced("after counting dead letters")
	if f.Milestones["jobs"][MilestoneDeadLettered] != 3 {
		t.Errorf("dead-lettered %d, want 3", f.Milestones["jobs"][MilestoneDeadLettered])
	}
}
