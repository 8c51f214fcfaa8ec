// Package retry holds what the parts that retry share: a backoff that
// doubles per attempt up to a bound, with jitter so that many callers
// failing together do not retry in step, and a sleep that ends with its
// context.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the wait after the attempt-th failure (1 for the first):
// first doubled per attempt, at most max, then spread by ±20%.
func Backoff(first, max time.Duration, attempt int) time.Duration {
	d := first
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Sleep waits for d, or until ctx ends, and then returns ctx's error. A d
// of 0 or less does not wait, and still reports an ended ctx.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
