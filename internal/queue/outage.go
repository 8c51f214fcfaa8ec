package queue

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/retry"
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

// UntilTaken runs write on side, then again while it fails with a
// Transient error (Redis restarting, loading its AOF, unreachable, unable
// to persist: MISCONF), with backoff, until ctx ends: for a write that
// must not be dropped, such as a job's settlement (a failure, an ack or an
// idempotency key dropped by a Redis restart would let a lease expire and
// the job run again: the chaos suite found a job run twice with one key).
// It returns write's last error: nil, one not Transient, or the one ctx
// cut short. The wait joins the outage o as what: one Warn per outage, its
// time counted.
//
// Each retry goes through a fresh side (fresh, closed after it), at most
// TakenRetryCap apart, so the write lands within about that of Redis
// answering again: a side's own clients, after failed dials, wait out a
// second of go-redis's dial backoff first, and a worker killed in that
// second has run a job whose ack or key was never recorded (the chaos
// suite measured 920 ms). Should fresh fail, the retry goes through side.
func UntilTaken[S io.Closer](ctx context.Context, o *Outage, what string, side S, fresh func() (S, error), write func(S) error) error {
	var (
		retrying S
		opened   bool
		waited   func()
	)
	closeRetrying := func() {
		if opened {
			retrying.Close()
			opened = false
		}
	}
	defer func() {
		closeRetrying()
		if waited != nil {
			waited()
		}
	}()
	on := side
	for attempt := 1; ; attempt++ {
		err := write(on)
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return err
		}
		if waited == nil {
			waited = o.Wait(what, err)
		}
		if retry.Sleep(ctx, retry.Backoff(20*time.Millisecond, TakenRetryCap, attempt)) != nil {
			return err
		}
		closeRetrying()
		on = side
		if s, err := fresh(); err == nil {
			retrying, opened, on = s, true, s
		}
	}
}

// TakenRetryCap bounds the wait between UntilTaken's retries while Redis
// is away (and a worker's lease keeper's): how late after Redis answers
// again a write lands, at most (plus the write itself).
const TakenRetryCap = 100 * time.Millisecond
