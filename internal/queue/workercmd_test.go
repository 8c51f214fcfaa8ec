package queue

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestWorkerCommandsAndCheckpoint: the worker's end of the command list
// takes what PushCommand queued, in order, and says when the list is
// empty; its worker-count checkpoint is the one the heartbeat script reads
// back, and reads as 0 until one is stored.
func TestWorkerCommandsAndCheckpoint(t *testing.T) {
	p := newPool(t, 4, testenv.Redis(t).Addr(), nil)
	ctx := context.Background()

	if raw, ok, err := p.PopCommand(ctx, 1); err != nil || ok || raw != "" {
		t.Fatalf("empty list: %q %v %v, want nothing", raw, ok, err)
	}
	for _, n := range []int{3, 5} {
		if err := p.PushCommand(ctx, Command{Type: ScaleUp, Partition: 1, TargetWorkers: n}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{`"targetWorkers":3`, `"targetWorkers":5`} {
		raw, ok, err := p.PopCommand(ctx, 1)
		if err != nil || !ok || !strings.Contains(raw, want) {
			t.Fatalf("popped %q %v %v, want the command with %s", raw, ok, err, want)
		}
	}
	if _, ok, err := p.PopCommand(ctx, 1); err != nil || ok {
		t.Fatalf("after two pops: %v %v, want an empty list", ok, err)
	}

	if n, err := p.CheckpointedWorkers(ctx, 2); err != nil || n != 0 {
		t.Fatalf("no checkpoint: %d %v, want 0", n, err)
	}
	if err := p.CheckpointWorkers(ctx, 2, 7); err != nil {
		t.Fatal(err)
	}
	if n, err := p.CheckpointedWorkers(ctx, 2); err != nil || n != 7 {
		t.Fatalf("checkpoint %d %v, want 7", n, err)
	}
	if n, err := p.Heartbeat(ctx, 2, "w1", 1, 0); err != nil || n != 7 {
		t.Fatalf("heartbeat read checkpoint %d %v, want 7", n, err)
	}
	if n, _ := p.CheckpointedWorkers(ctx, 3); n != 0 {
		t.Fatalf("partition 3 read partition 2's checkpoint: %d", n)
	}
}
