package worker

import (
	"testing"
	"time"
)

// The prefetch bound follows how fast jobs actually finish, not only how
// long they run: no-op jobs run in a microsecond, yet a partition limited by
// its CPU or Redis finishes a few thousand a second, and claimed jobs must
// not wait for a slot longer than PrefetchWait.
func TestPrefetchFollowsTheRateJobsFinish(t *testing.T) {
	c := &consumer{w: &Worker{cfg: Config{Prefetch: 256, PrefetchWait: 50 * time.Millisecond}}}
	c.avgRun = time.Microsecond
	if got := c.prefetch(10); got != 256 {
		t.Fatalf("before any rate: prefetch %d, want the run-time bound capped at 256", got)
	}
	// 2,000 jobs a second for half a second.
	at := time.Unix(1000, 0)
	for i := range 1000 {
		c.countFinished(at.Add(time.Duration(i) * 500 * time.Microsecond))
	}
	if c.finished < 1900 || c.finished > 2100 {
		t.Fatalf("rate %.0f jobs/s, want about 2,000", c.finished)
	}
	if got := c.prefetch(10); got < 95 || got > 105 {
		t.Fatalf("at 2,000 jobs/s: prefetch %d, want about 100 (50 ms of them)", got)
	}
	// An idle spell does not count as a slow window: the next job starts a
	// new window and the rate stays.
	last := at.Add(1000 * 500 * time.Microsecond)
	before := c.finished
	c.countFinished(last.Add(30 * time.Second))
	if c.finished != before {
		t.Fatalf("an idle spell moved the rate from %.0f to %.0f", before, c.finished)
	}
	// Slow jobs: the run-time bound is the smaller one.
	c.avgRun = time.Second
	if got := c.prefetch(10); got != 0 {
		t.Fatalf("1 s jobs on 10 slots: prefetch %d, want 0 (10 x 50 ms / 1 s)", got)
	}
}
