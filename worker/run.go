package worker

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/tracing"
)

// The run of a claimed job, as steps (docs/worker.md, "How a job runs"):
// pass its envelope (read as it was claimed), set a heartbeat canary
// apart, resolve its handler and limits, pass its idempotency key's gate,
// be admitted by its resource's rate limit, run the handler. Each step either passes the job
// on or decides how the attempt ends (a settlement); execute runs the
// steps until one decides, and settle records that decision: the one
// place where an attempt's end is written to Redis.

// jobRun is one attempt of a claimed job, as its steps fill it in.
type jobRun struct {
	// ctx is the attempt's context: the consumer's run context, with the
	// job's trace as its remote parent once resolved, and the attempt's
	// span while and after its handler runs (log lines about the attempt
	// carry their ids). It lives as long as the attempt.
	ctx         context.Context
	h           *heldJob
	j           *job.Job // as claimed (heldJob.j); nil when unreadable
	handler     Handler  // once resolved; wrapped by admit to record its start
	maxAttempts int      // 1 until resolved: an envelope that cannot be read is dead at once
	timeout     time.Duration
	// keyHeld: the gate set the idempotency key's running mark for this
	// attempt; the settlement ends it as its keyEnd says.
	keyHeld bool
}

// ending is how an attempt ends; goOn: not yet, the next step follows.
type ending uint8

const (
	goOn         ending = iota
	endDone             // a success (or a key done already): to the acker, with result
	endFailed           // a failed attempt, err: retried after a delay, or dead
	endCancelled        // stopped on an operator's cancel: settled cancelled
	endDeferred         // to delayed until at, the attempt not spent (a rate-limit slot, or none known)
	endWaitKey          // deferred behind another run of its idempotency key (mark), woken by its end
	endCanary           // a heartbeat canary: recorded and acked, no handler
	endLost             // the lease is gone (err says why): its next holder settles it
	endLeft             // nothing recorded: the worker stops, and release or the lease's end hands it back
)

// keyEnd is what a settlement does to the idempotency key's running mark,
// when the attempt holds it.
type keyEnd uint8

const (
	keyLeft  keyEnd = iota // left to expire: what the run did is unknown, or it never settled
	keyDone                // recorded done: the key's next job is skipped
	keyFreed               // removed: the key's next job may run
)

// settlement is a step's decision on an attempt.
type settlement struct {
	end    ending
	key    keyEnd
	result []byte    // endDone
	err    error     // endFailed: the attempt's error; endLost: why the lease is gone
	at     time.Time // endDeferred: when the job is due again
	// throttled is when a rate-limited job was throttled (endDeferred to
	// its slot): it is promoted at its due time, and its trace records the
	// wait. Zero for a job deferred because no slot could be known.
	throttled time.Time
	mark      string // endWaitKey: the running mark it waits behind
}

var passed = settlement{}

func done(result []byte) settlement { return settlement{end: endDone, key: keyDone, result: result} }

func failed(err error) settlement { return settlement{end: endFailed, key: keyFreed, err: err} }

// deferred sets a job aside until at, its attempt not spent, and frees its
// idempotency key meanwhile: another job with the key need not wait for
// this one's slot.
func deferred(at, throttled time.Time) settlement {
	return settlement{end: endDeferred, key: keyFreed, at: at, throttled: throttled}
}

// runSteps are the steps of a job's run, in order. admit is in
// ratelimit.go, beside the limiter it asks.
var runSteps = [...]func(*consumer, *jobRun) settlement{
	(*consumer).readable,
	(*consumer).setCanaryApart,
	(*consumer).resolve,
	(*consumer).gate,
	(*consumer).admit,
	(*consumer).runHandler,
}

// execute runs one claimed job's steps until one decides how its attempt
// ends, and settles it.
func (c *consumer) execute(ctx context.Context, h *heldJob) {
	r := &jobRun{ctx: ctx, h: h, j: h.j, maxAttempts: 1}
	var s settlement
	for _, step := range runSteps {
		if s = step(c, r); s.end != goOn {
			break
		}
	}
	c.settle(r, s)
}

// readable passes a job whose envelope was read as it was claimed
// (holdClaimed). One missing or unreadable is dead at once: no later
// attempt would read it better.
func (c *consumer) readable(r *jobRun) settlement {
	if r.h.unreadable != nil {
		return failed(Permanent(r.h.unreadable))
	}
	return passed
}

// setCanaryApart ends a heartbeat canary's run here: it has no user
// handler, rate limit or idempotency key (settle completes it).
func (c *consumer) setCanaryApart(r *jobRun) settlement {
	if canary.IsCanary(r.h.claimed.Group) {
		return settlement{end: endCanary}
	}
	return passed
}

// resolve finds what the attempt runs under: the job's trace, its
// handler, and its limits (the envelope's own win, then the type's
// defaults from Handle's options, then the Config's). A type without a
// handler is retried with backoff, its attempt counted, never killed on
// the spot: during a rolling deploy that adds the type, a worker with the
// handler takes it on a later try.
func (c *consumer) resolve(r *jobRun) settlement {
	w, h, j := c.w, r.h, r.j
	if j.Traceparent != "" && tracing.Enabled() {
		r.ctx = c.traceJob(r.ctx, h, j)
	}
	handler, defaults := w.handler(j.Type)
	r.maxAttempts = firstPositive(j.MaxAttempts, defaults.maxAttempts, w.cfg.MaxAttempts)
	h.retain = w.retainOf(j, h.q.Topic)
	if handler == nil {
		err := fmt.Errorf("no handler for job type %q on worker %s (retried later: a worker with the handler may take it)", j.Type, c.slots.id)
		if h.claimed.Attempt >= r.maxAttempts {
			// The last attempt: the error stays as the dead job's
			// last_error, so it says what happened and what to do.
			err = fmt.Errorf("no handler for job type %q on worker %s, and its %d attempts are spent: dead (register a handler for the type, then sluice dlq replay)", j.Type, c.slots.id, r.maxAttempts)
		}
		return failed(err)
	}
	r.handler = handler
	r.timeout = firstPositive(time.Duration(j.Timeout), defaults.timeout, w.cfg.Timeout)
	return passed
}

// gate passes a job with an idempotency key only when its attempt holds
// the key's running mark (for its timeout plus a lease). A key that a job
// completed within its TTL makes the job done without running; one that
// another attempt runs now makes it wait behind that run. A Redis that
// cannot write is waited out: failing the attempt would spend it on an
// outage.
func (c *consumer) gate(r *jobRun) settlement {
	key := r.j.IdempotencyKey
	if key == "" {
		return passed
	}
	cl := r.h.claimed
	var begun queue.IdempotencyBegun
	err := c.untilRedisAnswers(r.ctx, "marking an idempotency key", func(pool redisSide) (err error) {
		begun, err = pool.IdempotencyBegin(r.ctx, key, cl.ID, cl.Attempt, r.timeout+c.w.cfg.Lease)
		return err
	})
	switch {
	case err != nil:
		return failed(err)
	case begun.DoneBy != "":
		c.w.count("idempotent_skip", r.j.Type, 1)
		return done([]byte(`{"skipped":"idempotency key completed by job ` + begun.DoneBy + `"}`))
	case !begun.Run:
		return settlement{end: endWaitKey, mark: begun.Running}
	}
	r.keyHeld = true
	return passed
}

// runHandler runs the handler under the attempt's timeout, its context
// cancelled with a cause should the lease be lost or given up, or the job
// cancelled, and decides the attempt's end from what the handler returned
// and what happened to the job meanwhile.
func (c *consumer) runHandler(r *jobRun) settlement {
	h := r.h
	runCtx, cancelRun := context.WithCancelCause(r.ctx)
	defer cancelRun(nil)
	c.mu.Lock()
	h.cancel = cancelRun
	lostEarly, cancelledEarly := h.lost, h.cancelled
	c.mu.Unlock()
	if lostEarly {
		return settlement{end: endLeft} // dropped by the lease keeper as this job started
	}
	if cancelledEarly {
		return settlement{end: endCancelled, key: keyFreed} // cancelled as it started: it never ran
	}
	e := c.invoke(runCtx, r)
	s := afterHandler(e, r.ctx.Err() != nil)
	if r.keyHeld && s.end == endLost && s.key == keyLeft {
		c.log.WarnContext(r.ctx, "a run cut short after its lease was lost leaves its idempotency key's running mark to expire", "job", h.claimed.ID, "attempt", h.claimed.Attempt, "key", r.j.IdempotencyKey, "err", e.err)
	}
	return s
}

// afterHandler decides how an attempt ends once its handler returned, from
// what it returned and what happened to its job meanwhile; stopping: the
// worker's drain deadline passed.
func afterHandler(e handlerEnd, stopping bool) settlement {
	switch {
	case e.lost && e.err != nil:
		// Cut short (or failed) after its lease was lost or given up:
		// what the handler did is unknown (an HTTP call cancelled here
		// may have been answered 2xx, or still run at its server).
		// Freeing the key would let the next holder run the job at once,
		// beside it; the running mark is left to expire (timeout plus a
		// lease), as a killed worker's is.
		return settlement{end: endLost, key: keyLeft, err: e.why}
	case e.lost:
		// Recorded done all the same: the mark is this attempt's, and
		// the next holder must find the key done (and skip the job)
		// rather than free (and run it again).
		return settlement{end: endLost, key: keyDone, err: e.why}
	case e.err == nil:
		// A handler that succeeded despite a cancel is acked: its work
		// is done.
		return done(e.result)
	case e.cancelled:
		return settlement{end: endCancelled, key: keyFreed}
	case e.draining && stopping:
		// Cut short by shutdown: handed back by release, not failed.
		return settlement{end: endLeft, key: keyFreed}
	}
	return failed(e.err)
}

// handlerEnd is how a handler call ended, and what happened to its job
// meanwhile.
type handlerEnd struct {
	result []byte
	err    error
	// lost: the lease is gone (why says why); cancelled: by an operator;
	// draining: shutdown cut running jobs short. Read once the handler
	// returned.
	lost, cancelled, draining bool
	why                       error
}

// invoke calls the handler once, inside everything that observes a call:
// the attempt's span (when the job's trace is sampled, else the gate's
// trace as the remote parent of the handler's own spans), the in-flight
// gauge, the run time (its metric, and the average that sizes prefetch),
// the queue wait of a first attempt. The handler's context ends at the
// attempt's timeout.
func (c *consumer) invoke(runCtx context.Context, r *jobRun) handlerEnd {
	w, h, j, cl := c.w, r.h, r.j, r.h.claimed
	start := w.cfg.Now()
	if !j.EnqueuedAt.IsZero() && cl.Attempt == 1 {
		w.m.queueWait.Observe(start.Sub(j.EnqueuedAt).Seconds())
	}
	jctx, cancel := context.WithTimeout(runCtx, r.timeout)
	defer cancel()
	var span trace.Span
	if h.trace.IsSampled() {
		jctx, span = c.startAttempt(jctx, h, j, r.maxAttempts, start)
		r.ctx = trace.ContextWithSpan(r.ctx, span) // log lines about the attempt carry its ids
	} else if h.trace.IsValid() {
		jctx = trace.ContextWithRemoteSpanContext(jctx, h.trace) // the handler's own spans follow the gate's decision
	}
	w.m.inflight.Inc()
	result, herr := call(jctx, r.handler, &Job{
		ID: j.ID, Type: j.Type, Group: cl.Group, Tenant: j.Tenant, Resource: j.Resource, Topic: h.q.Topic,
		Payload: j.Payload, Attempt: cl.Attempt, MaxAttempts: r.maxAttempts, EnqueuedAt: j.EnqueuedAt,
	})
	w.m.inflight.Dec()
	cancel()
	end := w.cfg.Now()
	took := end.Sub(start)
	c.ran(took, end)
	w.m.execution.WithLabelValues(w.typeLabel(j.Type)).Observe(took.Seconds())
	c.mu.Lock()
	e := handlerEnd{result: result, err: herr, lost: h.lost, why: h.why, cancelled: h.cancelled, draining: c.draining}
	c.mu.Unlock()
	if h.trace.IsValid() {
		c.endAttempt(r.ctx, span, h, r.maxAttempts, herr, e.lost, start, end)
	}
	return e
}

// settle records how an attempt ended: first its idempotency key's run,
// if it holds the key's mark (so that a job deferred behind it is woken,
// and the job's next holder finds the key done), then the job itself.
// Writes that must not be dropped wait out a Redis that cannot serve
// (untilRedisAnswers); one dropped all the same leaves the job to its
// lease's end, and it runs again.
func (c *consumer) settle(r *jobRun, s settlement) {
	w, h, ctx := c.w, r.h, r.ctx
	if r.keyHeld && s.key != keyLeft {
		if err := c.endIdempotency(ctx, r.j.IdempotencyKey, h.claimed, s.key == keyDone); err != nil {
			c.log.Warn("recording the end of an idempotency key's run failed", "job", h.claimed.ID, "key", r.j.IdempotencyKey, "done", s.key == keyDone, "err", err)
		}
	}
	switch s.end {
	case endDone:
		// The acker answers later: the slot is free for the next job
		// meanwhile.
		c.mu.Lock()
		h.acking = true
		c.acking++
		c.mu.Unlock()
		c.acks <- ackRequest{job: h, result: s.result}
	case endFailed:
		c.recordFailure(ctx, h, s.err, r.maxAttempts)
	case endCancelled:
		c.settleCancelled(ctx, h)
	case endDeferred:
		if c.deferJob(ctx, h, s.at) && !s.throttled.IsZero() {
			w.limits.promoter.at(h.q, s.at, h.claimed.ID)
			if h.trace.IsSampled() {
				c.traceWait(ctx, h, "throttled", s.throttled, s.at)
			}
		}
	case endWaitKey:
		c.waitBehind(ctx, h, r.j.IdempotencyKey, s.mark)
		w.count("idempotent_wait", h.jobType, 1)
	case endCanary:
		c.completeCanary(ctx, h, r.j)
	case endLost:
		// The reaper took the job back (we were too slow to extend), or
		// the lease could not be extended and is given up: its next
		// holder settles it.
		w.count("lost", h.jobType, 1)
		c.log.WarnContext(ctx, "lease lost while running; the job will run again", "job", h.claimed.ID, "why", s.err)
	}
}

// recordFailure records a failed attempt: retried after its delay, or
// dead. It waits out a Redis that cannot serve: a failure dropped would be
// reaped later, its error and a group's count lost.
func (c *consumer) recordFailure(ctx context.Context, h *heldJob, herr error, maxAttempts int) {
	w, cl := c.w, h.claimed
	now := w.cfg.Now()
	var next time.Time
	if delay, again := w.retryIn(h.jobType, herr, cl.Attempt, maxAttempts); again {
		next = now.Add(delay)
	}
	var res int
	err := c.untilRedisAnswers(c.settling, "recording a failure", func(pool redisSide) (err error) {
		res, err = pool.Fail(context.WithoutCancel(ctx), h.q, queue.Failure{Job: cl, Cause: herr.Error(), NextTry: next}, now, w.cfg.deadLimits())
		return err
	})
	switch {
	case err != nil:
		c.log.Warn("recording a failure failed; the lease will expire and the job run again", "job", cl.ID, "err", err)
	case res == queue.FailRetrying:
		w.count("retried", h.jobType, 1)
		if h.trace.IsSampled() {
			c.traceWait(ctx, h, "retry_backoff", now, next)
		}
	case res == queue.FailDead:
		w.count("dead", h.jobType, 1)
		c.log.WarnContext(ctx, "job dead", "job", cl.ID, "attempts", cl.Attempt, "err", herr)
	}
}

// deferJob puts a claimed job in delayed until at without spending an
// attempt. It reports whether the job was deferred; if not, its lease
// expires and it comes back that way (a reap counts an attempt, so the
// write waits out a Redis that cannot write).
func (c *consumer) deferJob(ctx context.Context, h *heldJob, at time.Time) bool {
	w := c.w
	ctx = context.WithoutCancel(ctx)
	var ok bool
	err := c.untilRedisAnswers(c.settling, "deferring a job", func(pool redisSide) (err error) {
		ok, err = pool.Defer(ctx, h.q, h.claimed, at, w.cfg.Now())
		return err
	})
	if err != nil {
		c.log.Warn("deferring a job failed; its lease will expire", "job", h.claimed.ID, "err", err)
	}
	return ok && err == nil
}

// waitBehind defers a job whose idempotency key another job's run holds
// (mark) for a lease, and registers it with the key, so that the run's end
// (endIdempotency) wakes it at once: a duplicate of a job that completes
// is then skipped within a round trip or two of that, not a lease later.
// Should the run's worker die, the deferral's due time still brings it
// back. A run that ended before the registration has handed its waiters
// over already: the job wakes itself.
func (c *consumer) waitBehind(ctx context.Context, h *heldJob, key, mark string) {
	w, cl := c.w, h.claimed
	ctx = context.WithoutCancel(ctx)
	if !c.deferJob(ctx, h, w.cfg.Now().Add(w.cfg.Lease)) {
		return
	}
	d := queue.DeferredEntry(h.q, cl)
	var registered bool
	err := c.untilRedisAnswers(c.settling, "waiting on an idempotency key", func(pool redisSide) (err error) {
		registered, err = pool.IdempotencyWait(ctx, key, mark, d, w.cfg.Lease)
		return err
	})
	if err == nil && !registered {
		err = w.pool.WakeDeferred(ctx, []queue.Deferred{d}, w.cfg.Now())
	}
	if err != nil {
		c.log.Warn("a job deferred behind its idempotency key waits out its deferral", "job", cl.ID, "err", err)
	}
}

// endIdempotency records the end of a run of an idempotency key (done, or
// freed) and wakes the jobs deferred behind it (waitBehind).
func (c *consumer) endIdempotency(ctx context.Context, key string, cl queue.Claimed, succeeded bool) error {
	w := c.w
	ctx = context.WithoutCancel(ctx)
	var waiters []queue.Deferred
	if err := c.untilRedisAnswers(c.settling, "recording an idempotency key", func(pool redisSide) (err error) {
		waiters, err = pool.IdempotencyEnd(ctx, key, cl.ID, cl.Attempt, succeeded, w.cfg.IdempotencyTTL)
		return err
	}); err != nil {
		return err
	}
	if len(waiters) == 0 {
		return nil
	}
	if err := w.pool.WakeDeferred(ctx, waiters, w.cfg.Now()); err != nil {
		// Not lost: they come due at the end of their deferral.
		c.log.Warn("waking the jobs deferred behind an idempotency key failed; they wait out their deferral", "key", key, "jobs", len(waiters), "err", err)
	}
	return nil
}

// settleCancelled records a held job stopped on its cancel: cancelled.
func (c *consumer) settleCancelled(ctx context.Context, h *heldJob) {
	w := c.w
	ctx = context.WithoutCancel(ctx)
	var ok bool
	err := c.untilRedisAnswers(c.settling, "settling a cancelled job", func(pool redisSide) (err error) {
		ok, err = pool.SettleCancelled(ctx, h.q, h.claimed, w.cfg.Now(), w.cfg.ResultTTL)
		return err
	})
	switch {
	case err != nil:
		c.log.Warn("settling a cancelled job failed; its lease will expire and it runs again", "job", h.claimed.ID, "err", err)
	case ok:
		w.count("cancelled", h.jobType, 1)
		c.log.Info("job cancelled", "job", h.claimed.ID, "queue", h.q.String())
	}
}

// untilRedisAnswers runs do until Redis takes it, waiting out a Redis
// that cannot serve (queue.UntilTaken) until ctx ends: for a write that
// must not be dropped, c.settling. The job stays held meanwhile, so the
// lease keeper keeps its lease once Redis is back. The wait joins the
// worker's outage; its retries go through fresh clients.
func (c *consumer) untilRedisAnswers(ctx context.Context, what string, do func(redisSide) error) error {
	return queue.UntilTaken(ctx, c.w.outage, what, c.w.pool, c.w.freshRedis, do)
}

// canaryKeep is how long a completed canary's job hash is kept: long enough
// for the relay's dedupe of a redelivery, short enough that canaries sent
// every second do not pile up in Redis for a result TTL.
const canaryKeep = 10 * time.Minute

// completeCanary completes a heartbeat canary (internal/canary) without a
// user handler, rate limit or idempotency key: it records the canary's
// arrival on this partition, where the monitor reads it, and acks it at
// once. A canary never counts as a user job: it has a counter of its own.
// One that cannot be read is acked anyway (a canary is never retried: the
// next one is on its way) and counted as bad.
func (c *consumer) completeCanary(ctx context.Context, h *heldJob, j *job.Job) {
	w := c.w
	now := w.cfg.Now()
	outcome := "done"
	p, err := canary.DecodePayload(j.Payload)
	if err == nil {
		var recorded bool
		recorded, err = w.pool.RecordCanaryDone(ctx, c.part, p.Path().Field(), time.UnixMilli(p.SentMS), now)
		if err == nil && !recorded {
			outcome = "late" // a newer one got here first
		}
	}
	if err != nil {
		outcome = "bad"
		c.log.Warn("a canary could not be recorded", "job", h.claimed.ID, "err", err)
	}
	if _, err := w.pool.AckMany(context.WithoutCancel(ctx), h.q, []queue.Done{{Job: h.claimed}}, now, canaryKeep); err != nil {
		c.log.Warn("acking a canary failed; its lease will expire and it runs again", "job", h.claimed.ID, "err", err)
		outcome = "bad"
	}
	w.m.canaries.WithLabelValues(outcome).Inc()
}
