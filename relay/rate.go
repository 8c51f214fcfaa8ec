package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/time/rate"
)

// Rate is a topic's relay rate, as stored in Consul KV at
// sluice/<stage>/relay/<topic>/rate. Accepted forms:
//
//	{"rate": 5000, "burst": 10000}   jobs per second and burst (burst defaults to rate, at least 1)
//	{"paused": true}                 relay nothing until changed
//	5000                             jobs per second
//	paused                           as {"paused": true}
//
// A missing key means unlimited: a topic nobody limited relays as fast as
// Redis takes it (the memory guard still applies).
type Rate struct {
	PerSecond float64 `json:"rate,omitempty"`
	Burst     int     `json:"burst,omitempty"`
	Paused    bool    `json:"paused,omitempty"`
	Unlimited bool    `json:"-"`
}

func (r Rate) String() string {
	switch {
	case r.Paused:
		return "paused"
	case r.Unlimited:
		return "unlimited"
	}
	return fmt.Sprintf("%g/s burst %d", r.PerSecond, r.burst())
}

func (r Rate) burst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return max(int(math.Ceil(r.PerSecond)), 1)
}

// ParseRate reads a rate value; see Rate.
func ParseRate(value []byte) (Rate, error) {
	s := strings.TrimSpace(string(value))
	switch {
	case s == "paused":
		return Rate{Paused: true}, nil
	case strings.HasPrefix(s, "{"):
		var r Rate
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return Rate{}, fmt.Errorf("rate %q: %v", s, err)
		}
		if r.Paused {
			return Rate{Paused: true}, nil
		}
		if r.PerSecond <= 0 || r.Burst < 0 {
			return Rate{}, fmt.Errorf("rate %q: want a positive rate (or \"paused\") and a burst >= 0", s)
		}
		return r, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return Rate{}, fmt.Errorf("rate %q: want jobs per second, a JSON object or \"paused\"", s)
	}
	return Rate{PerSecond: v}, nil
}

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
		t.limiter.SetBurst(r.burst())
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
