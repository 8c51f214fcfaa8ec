package queue

import (
	"context"
	"testing"
	"time"
)

// WaitCompleted blocks until a group completes and moves it to completing;
// with nothing completing it returns "" after its wait.
func TestWaitCompletedBlocksUntilAGroupCompletes(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	if g, err := p.WaitCompleted(ctx, jq(0), time.Second); g != "" || err != nil {
		t.Fatalf("nothing completed: %q %v", g, err)
	}
	if _, err := p.Enqueue(ctx, 1, []Item{item("g.0", "g"), {Close: true, Group: "g", Topic: "jobs", GroupTotal: 1, CallbackURL: "http://x/"}}, now); err != nil {
		t.Fatal(err)
	}
	jobs, err := p.Claim(ctx, jq(0), 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	got := make(chan string, 1)
	go func() {
		g, err := p.WaitCompleted(ctx, jq(0), 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	if ok, err := p.Ack(ctx, jq(0), Done{Job: jobs[0], Result: []byte(`1`)}, now, time.Hour); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	select {
	case g := <-got:
		if g != "g" {
			t.Fatalf("took %q", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting call did not return when the group completed")
	}
	if left, _ := p.Completing(ctx, jq(0)); len(left) != 1 || left[0] != "g" {
		t.Fatalf("completing: %v", left)
	}
	f, err := p.GroupFields(ctx, "jobs", "g", "topic", "callback_url", "absent")
	if err != nil || f[0] != "jobs" || f[1] != "http://x/" || f[2] != "" {
		t.Fatalf("fields: %q %v", f, err)
	}
}
