package relay

import (
	"testing"
	"time"
)

// An offset is marked only once its writes are DurableAfter old under an
// unchanged epoch; a new epoch under pending marks is a restart, and
// nothing more is marked.
func TestDurableMarksWaitForTheWritesToAge(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	d := newDurableMarks(3*time.Second, "run-a", clock)
	var marked []int64
	mark := d.track(0, func(o int64) { marked = append(marked, o) }, func() {})

	mark(10)
	now = now.Add(time.Second)
	mark(20)
	if !d.settle("run-a") || len(marked) != 0 {
		t.Fatalf("after 1 s: marked %v, want nothing yet", marked)
	}
	now = now.Add(2 * time.Second) // offset 10's writes are 3 s old, 20's 2 s
	if !d.settle("run-a") || len(marked) != 1 || marked[0] != 10 {
		t.Fatalf("after 3 s: marked %v, want [10]", marked)
	}
	now = now.Add(5 * time.Second)
	if !d.settle("run-a") || len(marked) != 2 || marked[1] != 20 {
		t.Fatalf("after 8 s: marked %v, want [10 20]", marked)
	}

	// Redis restarted (a new run_id) under a pending mark.
	mark(30)
	now = now.Add(10 * time.Second)
	if d.settle("run-b") {
		t.Fatal("a new epoch under a pending mark was not taken for a restart")
	}
	if len(marked) != 2 {
		t.Fatalf("marked %v after the restart, want nothing more", marked)
	}
}

// A restart with nothing pending costs nothing: every committed write had
// aged under the old epoch; marks made after it carry the new one.
func TestDurableMarksAcceptANewEpochWithNothingPending(t *testing.T) {
	now := time.Unix(1000, 0)
	d := newDurableMarks(time.Second, "run-a", func() time.Time { return now })
	var marked []int64
	mark := d.track(3, func(o int64) { marked = append(marked, o) }, func() {})
	if !d.settle("run-b") {
		t.Fatal("a new epoch with nothing pending was taken for a loss")
	}
	mark(7)
	now = now.Add(time.Second)
	if !d.settle("run-b") || len(marked) != 1 || marked[0] != 7 {
		t.Fatalf("marked %v, want [7]", marked)
	}
}

// DurableAfter 0 marks at once (appendfsync always: Redis answers after
// its fsync).
func TestDurableMarksOffMarksAtOnce(t *testing.T) {
	d := newDurableMarks(0, "", time.Now)
	var marked []int64
	d.track(0, func(o int64) { marked = append(marked, o) }, func() {})(5)
	if len(marked) != 1 || marked[0] != 5 {
		t.Fatalf("marked %v, want [5]", marked)
	}
}
