package retry

import (
	"testing"
	"time"
)

func TestBackoffDoublesToTheBoundWithJitter(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 10 * time.Second, 60: 10 * time.Second} {
		for range 100 {
			got := Backoff(time.Second, 10*time.Second, attempt)
			if got < want*8/10 || got > want*12/10 {
				t.Fatalf("attempt %d: %s, want %s ±20%%", attempt, got, want)
			}
		}
	}
}
