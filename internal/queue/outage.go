package queue

import (
	"log/slog"
	"sync"
	"time"
)

// Outage follows one part's waits on a Redis that cannot serve or cannot
// write now (Transient errors: down, loading, unable to persist, ...):
// such a write is retried until Redis takes it, never failed, dead-lettered
// or dropped. However many calls wait at once, the part logs one Warn when
// the first starts waiting and one Info when the last is done, not one per
// call (its Info names the outage's length), and Seconds says how long at least one call waited, for the part's
// sluice_<part>_redis_unavailable_seconds_total.
type Outage struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	waiting int           // calls waiting now
	since   time.Time     // when the current outage began (waiting > 0)
	total   time.Duration // of the outages that ended
}

// NewOutage is an Outage that logs to log. now is its clock (nil:
// time.Now).
func NewOutage(log *slog.Logger, now func() time.Time) *Outage {
	if now == nil {
		now = time.Now
	}
	return &Outage{log: log, now: now}
}

// Wait records that a call doing what failed with err, a Transient error,
// and will be retried; it returns the function to call once the call is
// done waiting (it went through, or gave up). The first wait of an outage
// logs it.
func (o *Outage) Wait(what string, err error) (done func()) {
	o.mu.Lock()
	o.waiting++
	first := o.waiting == 1
	if first {
		o.since = o.now()
	}
	o.mu.Unlock()
	if first {
		o.log.Warn("Redis cannot serve or cannot write now: waiting it out, retrying with backoff; nothing is dropped or dead-lettered meanwhile",
			"while", what, "err", err)
	}
	var once sync.Once
	return func() { once.Do(o.end) }
}

func (o *Outage) end() {
	o.mu.Lock()
	o.waiting--
	last := o.waiting == 0
	var took time.Duration
	if last {
		took = o.now().Sub(o.since)
		o.total += took
	}
	o.mu.Unlock()
	if last {
		o.log.Info("Redis outage over: no call waits for it now", "waited", took.Round(time.Millisecond).String())
	}
}

// Waiting reports whether a call waits for Redis now.
func (o *Outage) Waiting() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.waiting > 0
}

// Seconds is the time during which at least one call waited for Redis,
// the current outage included.
func (o *Outage) Seconds() float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.total
	if o.waiting > 0 {
		t += o.now().Sub(o.since)
	}
	return t.Seconds()
}
