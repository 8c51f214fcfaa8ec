package scenario

import (
	"testing"
	"time"
)

func TestPeakWindow(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		starts []time.Duration
		want   int
	}{
		{nil, 0},
		{[]time.Duration{0}, 1},
		// Ten at 100 ms spacing: the eleventh, exactly 1 s after the
		// first, is outside [t, t+1s).
		{[]time.Duration{0, 100 * ms, 200 * ms, 300 * ms, 400 * ms, 500 * ms, 600 * ms, 700 * ms, 800 * ms, 900 * ms, 1000 * ms}, 10},
		// The knife edge: the first 1 ms late, the rest on time.
		{[]time.Duration{1 * ms, 100 * ms, 200 * ms, 300 * ms, 400 * ms, 500 * ms, 600 * ms, 700 * ms, 800 * ms, 900 * ms, 1000 * ms}, 11},
		{[]time.Duration{0, 0, 0, 2 * time.Second}, 3},
	} {
		if got := PeakWindow(tc.starts, time.Second); got != tc.want {
			t.Errorf("PeakWindow(%v) = %d, want %d", tc.starts, got, tc.want)
		}
	}
}
