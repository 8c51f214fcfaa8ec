package queue

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// fences reads the topic's fence in each partition ("" where none is set).
func fences(t *testing.T, p *Pool, topic string) []string {
	t.Helper()
	out := make([]string, p.Keyspace().Partitions)
	for part := range out {
		out[part], _ = p.byPart[part].Get(context.Background(), p.Keyspace().Keys(Queue{Topic: topic, Part: part}).Fence()).Result()
	}
	return out
}

// A new holder's token fences every partition at once, so an older
// holder's write is refused even where the new one has written nothing;
// an older token raises nothing and is told it is deposed.
func TestRaiseFenceFencesEveryPartitionBeforeAnyWrite(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 4, r.Addr(), nil)
	ctx := context.Background()
	// The old holder (token 5) wrote to one partition only.
	if res := enqueueOK(t, p, 5, positioned(0, 0, item("a", "g")), now); res[0].Outcome != Queued {
		t.Fatalf("old holder's write: %v", res[0].Outcome)
	}
	if err := p.RaiseFence(ctx, "jobs", 7); err != nil {
		t.Fatal(err)
	}
	for part, f := range fences(t, p, "jobs") {
		if f != "7" {
			t.Fatalf("partition %d's fence is %q after the raise, want 7", part, f)
		}
	}
	// The old holder writes a job of every partition: all refused.
	var items []Item
	for part := range p.Keyspace().Partitions {
		for i := 0; ; i++ {
			g := "g" + strconv.Itoa(i)
			if p.Keyspace().PartitionOf(g) == part {
				items = append(items, item("late-"+g, g))
				break
			}
		}
	}
	for i, res := range enqueueOK(t, p, 5, positioned(0, 1, items...), now) {
		if res.Outcome != Fenced {
			t.Fatalf("the old holder's write of %s (partition %d) was %v, want fenced", items[i].ID, p.Keyspace().PartitionOf(items[i].Group), res.Outcome)
		}
	}
	// The old holder raising its fence again learns it is deposed; the
	// fences stay.
	err := p.RaiseFence(ctx, "jobs", 5)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("raise with an older token: %v, want ErrFenced", err)
	}
	if err := p.CheckFence(ctx, "jobs", 5); !errors.Is(err, ErrFenced) {
		t.Fatalf("check with an older token: %v, want ErrFenced", err)
	}
	for part, f := range fences(t, p, "jobs") {
		if f != "7" {
			t.Fatalf("partition %d's fence is %q after an older raise, want 7", part, f)
		}
	}
	// The holder's own token passes, again and again.
	if err := p.CheckFence(ctx, "jobs", 7); err != nil {
		t.Fatal(err)
	}
	if err := p.RaiseFence(ctx, "jobs", 7); err != nil {
		t.Fatal(err)
	}
}

// A partition whose Redis is down cannot be fenced: RaiseFence says so
// (a transient error, to retry) and fences the others meanwhile.
func TestRaiseFenceReportsAPartitionItCannotReach(t *testing.T) {
	r1, r2 := testenv.Redis(t), testenv.Redis(t)
	p := newPool(t, 4, r1.Addr(), map[int]string{3: r2.Addr()})
	r2.Stop()
	err := p.RaiseFence(context.Background(), "jobs", 9)
	if err == nil || errors.Is(err, ErrFenced) || !Transient(err) {
		t.Fatalf("raise with partition 3 down: %v, want a transient error", err)
	}
	if got := fences(t, p, "jobs"); got[0] != "9" || got[1] != "9" || got[2] != "9" || got[3] != "" {
		t.Fatalf("fences %q, want 9 in the partitions Redis serves", got)
	}
}

// The relay's group cancel is fenced: a deposed relay's cancel changes
// nothing; the holder's and the admin API's (no token) cancel.
func TestCancelGroupFencedRefusesAnOlderToken(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	enqueueGroup(t, p, "c", 10, 1) // written with token 1
	enqueueGroup(t, p, "d", 3, 1)
	if err := p.RaiseFence(ctx, "jobs", 3); err != nil {
		t.Fatal(err)
	}
	k := p.Keyspace().Keys(jq(0))
	before := dump(t, r.Client(), nil)
	n, err := p.CancelGroupFenced(ctx, 2, "jobs", "c", now)
	if !errors.Is(err, ErrFenced) || n != 0 {
		t.Fatalf("cancel with an older token: %d %v, want 0 and ErrFenced", n, err)
	}
	if after := dump(t, r.Client(), nil); !maps.Equal(before, after) {
		t.Fatalf("a fenced cancel changed Redis:\nbefore %v\nafter  %v", before, after)
	}
	if n, err := p.CancelGroupFenced(ctx, 3, "jobs", "c", now); err != nil || n != 10 {
		t.Fatalf("the holder's cancel: %d %v, want 10 removed", n, err)
	}
	if r.Client().HExists(ctx, k.Group("c"), "cancelled_ms").Val() != true {
		t.Fatal("the holder's cancel did not mark the group cancelled")
	}
	if n, err := p.CancelGroup(ctx, "jobs", "d", now); err != nil || n != 3 {
		t.Fatalf("a cancel without a token: %d %v, want 3", n, err)
	}
}

// The relay's funnel counts (dead letters, requeues) are fenced: a
// deposed relay's count is refused and changes nothing.
func TestCountMilestoneFencedRefusesAnOlderToken(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	if err := p.RaiseFence(ctx, "jobs", 3); err != nil {
		t.Fatal(err)
	}
	k := p.Keyspace().Keys(Queue{Topic: "jobs", Part: p.Keyspace().PartitionOf("jobs")})
	field := FunnelField("jobs", MilestoneDeadLettered, false)
	if err := p.CountMilestoneFenced(ctx, 2, "jobs", MilestoneDeadLettered, 4); !errors.Is(err, ErrFenced) {
		t.Fatalf("count with an older token: %v, want ErrFenced", err)
	}
	if r.Client().HExists(ctx, k.Stats(), field).Val() {
		t.Fatal("a fenced count was counted")
	}
	if err := p.CountMilestoneFenced(ctx, 3, "jobs", MilestoneDeadLettered, 4); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Client().HGet(ctx, k.Stats(), field).Int(); n != 4 {
		t.Fatalf("the holder's count: %d, want 4", n)
	}
}
