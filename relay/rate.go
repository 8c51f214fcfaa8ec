package relay

import (
	"context"
	"sync"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/internal/limits"
)

// Rate is a topic's relay rate (Consul KV sluice/<stage>/relay/<topic>/rate);
// the type and its parser live in internal/limits, shared with the admin
// API, which writes what the relay reads.
type Rate = limits.Rate

// ParseRate reads a rate value; see limits.Rate.
func ParseRate(value []byte) (Rate, error) { return limits.ParseRate(value) }

// throttle applies a topic's Rate to every partition's batches: a token
// bucket shared by all of the topic's partitions, and a pause gate.
type throttle struct {
	mu      sync.Mutex
	rate    Rate
	limiter *rate.Limiter
	resumed chan struct{} // closed while not paused
}

func newThrottle() *throttle {
	t := &throttle{limiter: rate.NewLimiter(rate.Inf, 1), resumed: make(chan struct{})}
	close(t.resumed)
	t.rate = Rate{Unlimited: true}
	return t
}

// Set applies a new rate at once; batches waiting pick it up.
func (t *throttle) Set(r Rate) {
	t.mu.Lock()
	defer t.mu.Unlock()
	wasPaused := t.rate.Paused
	t.rate = r
	switch {
	case r.Paused:
		if !wasPaused {
			t.resumed = make(chan struct{})
		}
		return
	case r.Unlimited:
		t.limiter.SetLimit(rate.Inf)
	default:
		t.limiter.SetLimit(rate.Limit(r.PerSecond))
		t.limiter.SetBurst(r.EffectiveBurst())
	}
	if wasPaused {
		close(t.resumed)
	}
}

// Current is the rate in force.
func (t *throttle) Current() Rate {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rate
}

// Wait blocks until n jobs may go: while paused, then for tokens. A batch
// larger than the burst takes its tokens in burst-sized steps, so any burst
// works with any batch size and the long-run rate stays exact. A pause that
// arrives while a batch waits for tokens holds it too: the gate is checked
// again once the tokens are there.
func (t *throttle) Wait(ctx context.Context, n int) error {
	for n > 0 {
		if err := t.waitResumed(ctx); err != nil {
			return err
		}
		t.mu.Lock()
		lim, burst := t.limiter, t.limiter.Burst()
		t.mu.Unlock()
		step := n
		if lim.Limit() != rate.Inf && step > burst {
			step = max(burst, 1)
		}
		if err := lim.WaitN(ctx, step); err != nil {
			// The burst shrank under us; take what it allows now.
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		n -= step
	}
	return t.waitResumed(ctx)
}

func (t *throttle) waitResumed(ctx context.Context) error {
	t.mu.Lock()
	resumed := t.resumed
	t.mu.Unlock()
	select {
	case <-resumed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
