package worker

import (
	"testing"
	"time"
)

// The default schedule is 1, 2, 4, 8, 16 s, capped, each within ±20%.
func TestBackoffSchedule(t *testing.T) {
	w := &Worker{cfg: DefaultConfig()}
	want := []time.Duration{1, 2, 4, 8, 16, 16, 16}
	for attempt, base := range want {
		base *= time.Second
		for range 200 {
			d := w.backoff(attempt + 1)
			if d < base*8/10 || d > base*12/10 {
				t.Fatalf("backoff after attempt %d = %s, want %s ±20%%", attempt+1, d, base)
			}
		}
	}
	// Jitter: not every retry of a burst comes back at once.
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[w.backoff(3)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("backoff has no jitter: %d distinct values in 50", len(seen))
	}
}
