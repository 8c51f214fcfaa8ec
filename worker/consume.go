package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
	"github.com/sluicehq/sluice/internal/tracing"
)

// consumer runs one partition's jobs, from the queue partitions {topic,
// part} of every topic the worker serves. It picks the queue of each claim
// among its topics (weighted fair by jobs served, or in strict order:
// topics.go), and within a queue claims in weighted fair order of lanes;
// claims ahead of its free slots (prefetch), so that claims are batches and
// a slot that frees finds its next job already here; starts claimed jobs in
// the order served as slots free; keeps every held lease alive with one
// call per queue per Lease/3; and sends acks in batches. Its slots, its
// heartbeat and its coordinator commands are the partition's, shared by
// the topics.
//
// Prefetch adapts to how long jobs run: a prefetched job should wait about
// PrefetchWait for a slot, no more, so fast jobs are claimed in batches
// while slow ones are not hoarded by one process, out of the fair order.
//
// This file follows a job in one direction: run claims it, startWaiting
// gives it a slot, execute runs it, settle records a failure or hands a
// success to the acker; then what runs beside them (the lease keeper) and
// the way out (shutdown, release).
type consumer struct {
	w      *Worker
	part   int
	topics *topicChooser // the run loop's alone
	log    *slog.Logger
	slots  *slots
	acks   chan ackRequest
	// settling lives while the worker runs and for up to Drain after it
	// stops: writes that must not be dropped (acks, idempotency records,
	// failures) wait out a Redis that cannot serve for that long.
	settling context.Context
	// topicsSeen is the version of the followed topics the chooser has
	// (follow.go); the run loop's alone.
	topicsSeen int64

	mu       sync.Mutex
	held     map[heldKey]*heldJob   // claimed, not yet settled: waiting, running or acking
	leases   map[string]*leaseState // by batch, for each batch held
	waiting  []*heldJob             // claimed, not started, in the order served
	acking   int                    // held jobs whose handler is done, their ack not yet answered
	draining bool                   // shutdown cut running jobs short
	avgRun   time.Duration          // moving average of handler run times; 0 before the first
	// finished is the moving average of jobs finished per second, over
	// windows of rateWindow; 0 before the first window.
	finished    float64
	windowStart time.Time
	windowJobs  int
}

// rateWindow is how long the consumer counts finished jobs before it
// updates their moving rate.
const rateWindow = 100 * time.Millisecond

// heldKey names a held attempt of a job: ids are unique within a queue,
// two topics may each hold a job of the same id (a client's), and one job
// may be held twice, in two batches: its batch taken back by the reaper
// while its attempt still ran, and claimed again here. Each attempt then
// keeps its own lease and is settled (or found lost) on its own.
type heldKey struct {
	q     queue.Queue
	id    string
	batch string
}

func (h *heldJob) key() heldKey { return heldKey{h.q, h.claimed.ID, h.claimed.Batch} }

// heldJob is a job this consumer holds a lease on.
type heldJob struct {
	q       queue.Queue // the queue it was claimed from: its settlement goes there
	claimed queue.Claimed
	env     []byte
	cancel  context.CancelCauseFunc // set while its handler runs; under consumer.mu
	// lost: the lease is gone (reaped), or given up because it could not
	// be extended (why says which); this worker does not settle the job.
	// Under consumer.mu.
	lost   bool
	why    error
	acking bool // handed to the acker, which forgets it; under consumer.mu
	// cancelled: an operator cancelled the job (its lease extension said
	// so); its handler's context is cancelled, and the job settled
	// cancelled unless it succeeded all the same. Under consumer.mu.
	cancelled bool
	jobType   string // once its envelope is read
	// trace is the job's trace context from its envelope; invalid
	// unless tracing is on and the envelope carries one (tracing.go).
	trace      trace.SpanContext
	retain     time.Duration // once its envelope is read
	enqueuedAt time.Time     // the gate's accept time, once its envelope is read
}

func (w *Worker) newConsumer(part int) *consumer {
	w.mu.RLock()
	s := w.pools[part]
	w.mu.RUnlock()
	return &consumer{
		w: w, part: part, topics: newTopicChooser(w.cfg.Topics, part, w.cfg.Strict), log: w.log.With("partition", part), slots: s,
		acks: make(chan ackRequest, maxAckBatch), held: map[heldKey]*heldJob{}, leases: map[string]*leaseState{},
	}
}

// run claims and runs the partition's jobs until ctx ends, then hands
// waiting jobs back at once and gives running ones Drain to finish.
func (c *consumer) run(ctx context.Context) {
	w := c.w
	// Before the acker's deferred drain, so that it ends after it.
	settling, stopSettling := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSettling()
	go func() {
		select {
		case <-ctx.Done():
		case <-settling.Done():
			return
		}
		t := time.NewTimer(w.cfg.Drain) // a stop does not wait for ever on a Redis that does not come back
		defer t.Stop()
		select {
		case <-t.C:
			stopSettling()
		case <-settling.Done():
		}
	}()
	c.settling = settling
	w.m.workers.WithLabelValues(strconv.Itoa(c.part)).Set(float64(c.slots.size()))
	// Running jobs outlive ctx by up to Drain: runCtx ends after that.
	runCtx, stopRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRuns()
	var running sync.WaitGroup
	ackerDone := make(chan struct{})
	go func() { defer close(ackerDone); c.acker() }()
	defer func() { close(c.acks); <-ackerDone }()
	// Leases stay alive while anything is held, shutdown included.
	keepCtx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	keeperDone := make(chan struct{})
	go func() { defer close(keeperDone); c.keepLeases(keepCtx) }()
	defer func() { stopKeeping(); <-keeperDone }()

	failing := false
	var claimWait func() // ends this consumer's wait in a Redis outage
	defer func() {
		if claimWait != nil {
			claimWait()
		}
	}()
	for ctx.Err() == nil {
		c.followTopics()
		c.startWaiting(runCtx, &running)
		room, claimAt, changed := c.room()
		if room < claimAt {
			// Enough is held: wait until a job ends or the pool grows.
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		c.probe(ctx, time.Now())
		t := c.topics.next()
		if t == nil {
			// Nothing ready on any topic.
			if c.hasWaiting() {
				// Claimed jobs wait for a slot: look again when one
				// frees (the probe, when due, looks at the topics).
				select {
				case <-changed:
				case <-ctx.Done():
				}
			} else {
				c.waitForWork(ctx, w.cfg.IdleRecheck)
			}
			continue
		}
		// The lease starts when Redis runs the claim, by its clock: after
		// this moment by ours (the watchdog counts from it).
		sent := time.Now()
		jobs, err := w.pool.Claim(ctx, t.q, min(room, w.cfg.ClaimBatch), w.cfg.Lease)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			switch {
			case queue.Transient(err):
				if claimWait == nil {
					claimWait = w.outage.Wait("claiming jobs", err)
				}
			case !failing:
				c.log.Warn("claiming from Redis failed; retrying", "err", err)
				failing = true
			}
			c.waitForWork(ctx, time.Second)
			continue
		}
		if claimWait != nil {
			claimWait()
			claimWait = nil
		}
		if failing {
			c.log.Info("claiming from Redis works again")
			failing = false
		}
		c.topics.claimed(t, len(jobs))
		if len(jobs) == 0 {
			continue // the next topic, or the wait for work
		}
		c.mu.Lock()
		for _, j := range jobs {
			h := &heldJob{q: t.q, claimed: j, env: j.Envelope}
			c.held[h.key()] = h
			c.waiting = append(c.waiting, h)
			if c.leases[j.Batch] == nil {
				c.leases[j.Batch] = &leaseState{q: t.q, since: sent}
			}
		}
		c.mu.Unlock()
	}
	c.shutdown(runCtx, stopRuns, &running)
}

// waitForWork blocks for up to max in one BLPOP on the partition's command
// list and the wake list of every served topic's queue (all of a
// partition's keys live on its Redis): enqueues, retries coming due and
// released jobs push a wake token onto their queue's list, the coordinator
// pushes commands. A command is applied here; a token marks its topic as
// having work again; a wait that ran out marks every topic so (claims look
// again, should a token have been lost). On a Redis Cluster it polls
// instead (pollForWork).
func (c *consumer) waitForWork(ctx context.Context, max time.Duration) {
	w := c.w
	layout := w.pool.Layout()
	cmd := layout.PartKeys(c.part).Cmd()
	keys := make([]string, 0, 1+len(c.topics.queues))
	keys = append(keys, cmd)
	for _, t := range c.topics.queues {
		keys = append(keys, layout.Keys(t.q).Wake())
	}
	c.slots.listening.Store(true)
	defer c.slots.listening.Store(false)
	if w.pool.Cluster() {
		c.pollForWork(ctx, max, cmd, keys)
		return
	}
	kv, err := w.pool.Client(c.part).BLPop(ctx, max, keys...).Result()
	switch {
	case err == nil && len(kv) == 2 && kv[0] == cmd:
		w.apply(ctx, c.part, kv[1])
		return
	case err == nil && len(kv) == 2:
		c.topics.woken(layout.Keys, kv[0])
		return
	case errors.Is(err, redis.Nil):
		c.topics.woken(layout.Keys, "")
		return
	}
	if err != nil && ctx.Err() == nil {
		// Redis unreachable: do not spin.
		t := time.NewTimer(max)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// clusterPoll is how often an idle consumer on a Redis Cluster looks at
// its wake lists and command list.
const clusterPoll = 50 * time.Millisecond

// pollForWork is waitForWork on a Redis Cluster, where one BLPOP cannot
// name keys of several slots (the partition's command list and each topic
// queue's wake list are each in a slot of their own): it pops all of them
// in one pipeline (go-redis splits it by node) every clusterPoll, for up
// to max.
func (c *consumer) pollForWork(ctx context.Context, max time.Duration, cmd string, keys []string) {
	w := c.w
	layout := w.pool.Layout()
	deadline := time.Now().Add(max)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		pipe := w.pool.Client(c.part).Pipeline()
		pops := make([]*redis.StringCmd, len(keys))
		for i, k := range keys {
			pops[i] = pipe.LPop(ctx, k)
		}
		_, _ = pipe.Exec(ctx) // each pop carries its own error
		got, failed := false, false
		for i, p := range pops {
			v, err := p.Result()
			switch {
			case err == nil && keys[i] == cmd:
				w.apply(ctx, c.part, v)
				got = true
			case err == nil:
				c.topics.woken(layout.Keys, keys[i])
				got = true
			case !errors.Is(err, redis.Nil):
				failed = true
			}
		}
		left := time.Until(deadline)
		switch {
		case got:
			return
		case left <= 0:
			c.topics.woken(layout.Keys, "")
			return
		case failed:
			// Redis unreachable: do not spin.
			t.Reset(left)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			return
		}
		t.Reset(min(clusterPoll, left))
	}
}

// prefetch is how many claimed jobs may wait for a slot now: as many as
// the consumer gets through within PrefetchWait, at most Prefetch. The
// slots' average run time says how fast they could go; the jobs finished
// per second say how fast they do go when the CPU or Redis is the limit
// (no-op jobs run in microseconds, yet a partition finishes a few thousand
// a second). The smaller bound keeps a claimed job's wait for a slot
// within PrefetchWait. Under c.mu.
func (c *consumer) prefetch(size int) int {
	if c.avgRun <= 0 {
		return 0 // no run time known yet: jobs may be slow
	}
	pf := min(int64(c.w.cfg.Prefetch), int64(size)*int64(c.w.cfg.PrefetchWait)/int64(c.avgRun))
	if c.finished > 0 {
		pf = min(pf, int64(c.finished*c.w.cfg.PrefetchWait.Seconds()))
	}
	return int(pf)
}

// room is how many more jobs the consumer may hold now, the room at which
// it claims, and a channel closed when that may have changed (a job ended,
// the pool was resized). With prefetch it claims when half the prefetch is
// free, so that claims are batches while the other half keeps slots busy.
func (c *consumer) room() (room, claimAt int, changed <-chan struct{}) {
	_, changed = c.slots.free()
	size := c.slots.size()
	c.mu.Lock()
	defer c.mu.Unlock()
	pf := c.prefetch(size)
	// A job waiting for its ack uses no slot: the next one may start.
	room = size + pf - (len(c.held) - c.acking)
	return room, max(1, min(c.w.cfg.ClaimBatch, pf/2)), changed
}

func (c *consumer) hasWaiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting) > 0
}

// startWaiting starts waiting jobs while slots are free.
func (c *consumer) startWaiting(runCtx context.Context, running *sync.WaitGroup) {
	for {
		free, _ := c.slots.free()
		if free == 0 {
			return
		}
		c.mu.Lock()
		if len(c.waiting) == 0 {
			c.mu.Unlock()
			return
		}
		h := c.waiting[0]
		c.waiting[0] = nil
		c.waiting = c.waiting[1:]
		c.mu.Unlock()
		c.slots.take()
		running.Add(1)
		go func() {
			defer running.Done()
			defer c.slots.release() // after forgetting the job: room counts it gone
			c.execute(runCtx, h)
			c.mu.Lock()
			if !h.acking {
				delete(c.held, h.key())
			}
			c.mu.Unlock()
		}()
	}
}

// execute runs one claimed job and settles it.
func (c *consumer) execute(ctx context.Context, h *heldJob) {
	w, cl := c.w, h.claimed
	if h.env == nil {
		c.settle(ctx, h, nil, Permanent(fmt.Errorf("job %s has no envelope in Redis", cl.ID)), 1)
		return
	}
	j, err := job.Decode(h.env)
	if err != nil {
		c.settle(ctx, h, nil, Permanent(fmt.Errorf("envelope: %w", err)), 1)
		return
	}
	h.jobType = j.Type // read by settle and the acker, after this
	h.enqueuedAt = j.EnqueuedAt
	if canary.IsCanary(cl.Group) {
		c.completeCanary(ctx, h, j)
		return
	}
	if j.Traceparent != "" && tracing.Enabled() {
		ctx = c.traceJob(ctx, h, j)
	}
	// The envelope's own limits win, then the type's defaults (Handle's
	// options), then the Config's.
	handler, defaults := w.handler(j.Type)
	maxAttempts := firstPositive(j.MaxAttempts, defaults.maxAttempts, w.cfg.MaxAttempts)
	h.retain = w.retainOf(j, h.q.Topic)
	if handler == nil {
		// Retried with backoff, attempt counted, never killed on the
		// spot: during a rolling deploy that adds the type, a worker
		// with the handler takes it on a later try.
		err := fmt.Errorf("no handler for job type %q on worker %s (retried later: a worker with the handler may take it)", j.Type, c.slots.id)
		if cl.Attempt >= maxAttempts {
			// The last attempt: the error stays as the dead job's
			// last_error, so it says what happened and what to do.
			err = fmt.Errorf("no handler for job type %q on worker %s, and its %d attempts are spent: dead (register a handler for the type, then sluice dlq replay)", j.Type, c.slots.id, maxAttempts)
		}
		c.settle(ctx, h, nil, err, maxAttempts)
		return
	}
	timeout := firstPositive(time.Duration(j.Timeout), defaults.timeout, w.cfg.Timeout)
	if key := j.IdempotencyKey; key != "" {
		// A Redis that cannot write now is waited out: failing the
		// attempt would spend it on an outage.
		var mark string
		err := c.untilRedisAnswers(ctx, "marking an idempotency key", func(pool *queue.Pool) (err error) {
			mark, err = pool.IdempotencyBegin(ctx, key, cl.ID, cl.Attempt, timeout+w.cfg.Lease)
			return err
		})
		switch {
		case err != nil:
			c.settle(ctx, h, nil, err, maxAttempts)
			return
		case strings.HasPrefix(mark, "done:"):
			// A job with this key completed within its TTL: done
			// without running again.
			w.count("idempotent_skip", j.Type, 1)
			c.settle(ctx, h, []byte(`{"skipped":"idempotency key completed by job `+strings.TrimPrefix(mark, "done:")+`"}`), nil, maxAttempts)
			return
		case mark != "":
			// Another job with the key runs now: wait in delayed,
			// without spending an attempt on waiting, until that run
			// ends (it wakes this one: waitBehind) or a lease passes.
			c.waitBehind(ctx, h, key, mark)
			w.count("idempotent_wait", j.Type, 1)
			return
		}
	}
	// The execution rate limit of the job's resource: it starts at its
	// slot, or waits in delayed for it (ratelimit.go).
	handler, admitted := c.admit(ctx, h, j, handler)
	if !admitted {
		return
	}
	start := w.cfg.Now()
	if !j.EnqueuedAt.IsZero() && cl.Attempt == 1 {
		w.m.queueWait.Observe(start.Sub(j.EnqueuedAt).Seconds())
	}
	// Cancelled with a cause when the lease is lost or cannot be extended.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	jctx, cancel := context.WithTimeout(runCtx, timeout)
	defer cancel()
	c.mu.Lock()
	h.cancel = cancelRun
	lostEarly, cancelledEarly := h.lost, h.cancelled
	c.mu.Unlock()
	if lostEarly {
		return // dropped by the lease keeper as this job started
	}
	if cancelledEarly {
		// Cancelled as it started: it never ran.
		if key := j.IdempotencyKey; key != "" {
			if err := c.endIdempotency(ctx, key, cl, false); err != nil {
				c.log.Warn("freeing the idempotency key of a cancelled job failed", "job", cl.ID, "key", key, "err", err)
			}
		}
		c.settleCancelled(ctx, h)
		return
	}
	var span trace.Span
	if h.trace.IsSampled() {
		jctx, span = c.startAttempt(jctx, h, j, maxAttempts, start)
		ctx = trace.ContextWithSpan(ctx, span) // log lines about the attempt carry its ids
	} else if h.trace.IsValid() {
		jctx = trace.ContextWithRemoteSpanContext(jctx, h.trace) // the handler's own spans follow the gate's decision
	}
	w.m.inflight.Inc()
	result, herr := call(jctx, handler, &Job{
		ID: j.ID, Type: j.Type, Group: cl.Group, Tenant: j.Tenant, Resource: j.Resource, Topic: h.q.Topic,
		Payload: j.Payload, Attempt: cl.Attempt, MaxAttempts: maxAttempts, EnqueuedAt: j.EnqueuedAt,
	})
	w.m.inflight.Dec()
	cancel()
	end := w.cfg.Now()
	took := end.Sub(start)
	c.ran(took, end)
	w.m.execution.WithLabelValues(w.typeLabel(j.Type)).Observe(took.Seconds())
	c.mu.Lock()
	lost, why, draining, cancelled := h.lost, h.why, c.draining, h.cancelled
	c.mu.Unlock()
	switch key := j.IdempotencyKey; {
	case key == "":
	case lost && herr != nil:
		// Cut short (or failed) after its lease was lost or given up:
		// what the handler did is unknown (an HTTP call cancelled here
		// may have been answered 2xx, or still run at its server).
		// Freeing the key would let the next holder run the job at once,
		// beside it; the running mark is left to expire (timeout plus a
		// lease), as a killed worker's is.
		c.log.WarnContext(ctx, "a run cut short after its lease was lost leaves its idempotency key's running mark to expire", "job", cl.ID, "attempt", cl.Attempt, "key", key, "err", herr)
	default:
		// Kept until Redis takes it (a Redis that cannot persist, MISCONF,
		// is an outage to wait out), even past the running mark's TTL:
		// the end script records done on an expired mark too. Recorded
		// even when the lease was lost meanwhile: the mark is this
		// attempt's, and the next holder must find the key done (and
		// skip the job) rather than free (and run it again).
		if err := c.endIdempotency(ctx, key, cl, herr == nil); err != nil {
			c.log.Warn("recording the idempotency key failed", "job", cl.ID, "key", key, "err", err)
		}
	}
	if h.trace.IsValid() {
		c.endAttempt(ctx, span, h, maxAttempts, herr, lost, start, end)
	}
	if lost {
		// The reaper took the job back (we were too slow to extend), or
		// the lease could not be extended and is given up: its next
		// holder settles it.
		w.count("lost", j.Type, 1)
		c.log.WarnContext(ctx, "lease lost while running; the job will run again", "job", cl.ID, "why", why)
		return
	}
	if cancelled && herr != nil {
		// Stopped on its cancel: settled cancelled, not failed. (A
		// handler that succeeded all the same is acked: its work is done.)
		c.settleCancelled(ctx, h)
		return
	}
	if herr != nil && ctx.Err() != nil && draining {
		return // cut short by shutdown: handed back by release, not failed
	}
	c.settle(context.WithoutCancel(ctx), h, result, herr, maxAttempts)
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
	var deferred bool
	if err := c.untilRedisAnswers(c.settling, "deferring a job", func(pool *queue.Pool) (err error) {
		now := w.cfg.Now()
		deferred, err = pool.Defer(ctx, h.q, cl, now.Add(w.cfg.Lease), now)
		return err
	}); err != nil || !deferred {
		if err != nil {
			c.log.Warn("deferring a job behind its idempotency key failed; its lease will expire", "job", cl.ID, "err", err)
		}
		return
	}
	d := queue.DeferredEntry(h.q, cl)
	var registered bool
	err := c.untilRedisAnswers(c.settling, "waiting on an idempotency key", func(pool *queue.Pool) (err error) {
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
	if err := c.untilRedisAnswers(c.settling, "recording an idempotency key", func(pool *queue.Pool) (err error) {
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

// errJobCancelled is the cause a handler's context is cancelled with when
// an operator cancelled its job (sluice jobs cancel, the admin API).
var errJobCancelled = errors.New("job cancelled by an operator (sluice jobs cancel)")

// settleCancelled records a held job stopped on its cancel: cancelled.
func (c *consumer) settleCancelled(ctx context.Context, h *heldJob) {
	w := c.w
	ctx = context.WithoutCancel(ctx)
	var ok bool
	err := c.untilRedisAnswers(c.settling, "settling a cancelled job", func(pool *queue.Pool) (err error) {
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

// cancelHeld acts on the cancel requests an extension round brought
// (batch -> places): a running job's handler is cancelled with
// errJobCancelled (execute settles it); a waiting one is dropped and
// settled cancelled at once; one about to start finds h.cancelled. Jobs
// lost or being acked are left to what they are doing.
func (c *consumer) cancelHeld(ctx context.Context, requests map[string][]int) {
	var settleNow []*heldJob
	c.mu.Lock()
	for key, h := range c.held {
		places, ok := requests[h.claimed.Batch]
		if !ok || h.lost || h.acking || h.cancelled || !slices.Contains(places, h.claimed.Index) {
			continue
		}
		h.cancelled = true
		if h.cancel != nil {
			h.cancel(errJobCancelled)
			continue
		}
		for k, x := range c.waiting {
			if x == h {
				c.waiting = append(c.waiting[:k], c.waiting[k+1:]...)
				delete(c.held, key)
				settleNow = append(settleNow, h)
				break
			}
		}
	}
	c.mu.Unlock()
	for _, h := range settleNow {
		c.settleCancelled(ctx, h)
	}
	if len(settleNow) > 0 {
		c.slots.poke() // room grew
	}
}

// firstPositive is the first of vs above zero (an envelope's 0, or a
// negative value that slipped through, means "not set"), else the last.
func firstPositive[N int | time.Duration](vs ...N) N {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return vs[len(vs)-1]
}

// ran records a handler's run time, which ended at end, in the moving
// average and counts the job into the finished rate.
func (c *consumer) ran(d time.Duration, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.avgRun <= 0 {
		c.avgRun = max(d, 1)
	} else {
		c.avgRun += (d - c.avgRun) / 16
		c.avgRun = max(c.avgRun, 1)
	}
	c.countFinished(end)
}

// countFinished counts a finished job into the moving rate. A window that
// spans an idle spell (ten windows without a job) starts over instead of
// dragging the rate down: the rate is how fast jobs go while there are
// jobs. Under c.mu.
func (c *consumer) countFinished(now time.Time) {
	c.windowJobs++
	elapsed := now.Sub(c.windowStart)
	switch {
	case c.windowStart.IsZero() || elapsed > 10*rateWindow || elapsed < 0:
		c.windowStart, c.windowJobs = now, 1
	case elapsed >= rateWindow:
		r := float64(c.windowJobs) / elapsed.Seconds()
		if c.finished == 0 {
			c.finished = r
		} else {
			c.finished += (r - c.finished) / 4
		}
		c.windowStart, c.windowJobs = now, 0
	}
}

// settle records the attempt's outcome. A success goes to the acker, which
// answers later: the slot is free for the next job meanwhile.
func (c *consumer) settle(ctx context.Context, h *heldJob, result []byte, herr error, maxAttempts int) {
	w, cl := c.w, h.claimed
	now := w.cfg.Now()
	if herr == nil {
		c.mu.Lock()
		h.acking = true
		c.acking++
		c.mu.Unlock()
		c.acks <- ackRequest{job: h, result: result}
		return
	}
	var next time.Time
	if delay, again := w.retryIn(h.jobType, herr, cl.Attempt, maxAttempts); again {
		next = now.Add(delay)
	}
	// Waits out a Redis that cannot serve: a failure dropped would be
	// reaped later, its error and a group's count lost.
	var res int
	err := c.untilRedisAnswers(c.settling, "recording a failure", func(pool *queue.Pool) (err error) {
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

// ackRequest is a success for the acker to record.
type ackRequest struct {
	job    *heldJob
	result []byte
}

// maxAckBatch bounds the acks sent in one call: as many as a claim takes
// at most by default (Config.ClaimBatch), so that a claimed batch's acks
// can share one call.
const maxAckBatch = 256

// acker sends the partition's acks to Redis: it takes one, adds whatever
// else is waiting (and, while other claimed jobs still run, whatever comes
// within AckLinger), and sends them in one script call. When idle, one
// goes out at once. It forgets each job once Redis answered, and drains
// what is queued when the channel closes.
func (c *consumer) acker() {
	for first := range c.acks {
		batch := c.gatherAcks([]ackRequest{first})
		for _, same := range byQueue(batch, func(r ackRequest) queue.Queue { return r.job.q }) {
			c.ack(same)
		}
		c.mu.Lock()
		for _, r := range batch {
			delete(c.held, r.job.key())
		}
		c.acking -= len(batch)
		c.mu.Unlock()
		c.slots.poke() // room grew
	}
}

// gatherAcks adds to batch the acks queued now, then, while jobs of the
// partition are still held and not yet settled, those that come within
// AckLinger: a claimed batch's jobs end close together, and their acks
// then share one call instead of one per round trip.
func (c *consumer) gatherAcks(batch []ackRequest) []ackRequest {
	var linger *time.Timer
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
	for len(batch) < maxAckBatch {
		select {
		case r, ok := <-c.acks:
			if !ok {
				return batch
			}
			batch = append(batch, r)
			continue
		default:
		}
		if c.w.cfg.AckLinger <= 0 || !c.unsettled() {
			return batch
		}
		if linger == nil {
			linger = time.NewTimer(c.w.cfg.AckLinger)
		}
		select {
		case r, ok := <-c.acks:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		case <-linger.C:
			return batch
		}
	}
	return batch
}

// unsettled says whether the consumer holds jobs that have not ended yet
// (waiting or running), whose acks may follow.
func (c *consumer) unsettled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held) > c.acking
}

// ack records the successes of one queue in one script call, retried
// while Redis cannot serve, and counts them.
func (c *consumer) ack(batch []ackRequest) {
	w := c.w
	done := make([]queue.Done, len(batch))
	for i, r := range batch {
		done[i] = queue.Done{Job: r.job.claimed, Result: r.result, Retain: r.job.retain}
	}
	q := batch[0].job.q
	var ok []bool
	err := c.untilRedisAnswers(c.settling, "acking", func(pool *queue.Pool) (err error) {
		ok, err = pool.AckMany(context.Background(), q, done, w.cfg.Now(), w.cfg.ResultTTL)
		return err
	})
	if err != nil {
		c.log.Warn("acks failed; their leases will expire and the jobs run again", "queue", q.String(), "jobs", len(batch), "err", err)
		return
	}
	acked := map[string]int{} // by job type
	now := w.cfg.Now()
	for i, r := range batch {
		if ok[i] {
			acked[r.job.jobType]++
			if !r.job.enqueuedAt.IsZero() {
				w.m.enqueueToDone.Observe(now.Sub(r.job.enqueuedAt).Seconds())
			}
			continue
		}
		w.count("lost", r.job.jobType, 1)
		c.log.Warn("lease lost before the ack; the job runs again", "job", r.job.claimed.ID)
	}
	for t, n := range acked {
		w.count("done", t, n)
	}
}

// byQueue splits items by their queue: each part keeps the order given,
// the parts come in the order of their first item. Items of one queue
// (a worker serving one topic) are the slice itself.
func byQueue[T any](items []T, queueOf func(T) queue.Queue) [][]T {
	if len(items) == 0 {
		return nil
	}
	first, same := queueOf(items[0]), true
	for _, it := range items[1:] {
		if queueOf(it) != first {
			same = false
			break
		}
	}
	if same {
		return [][]T{items}
	}
	index := map[queue.Queue]int{}
	var out [][]T
	for _, it := range items {
		q := queueOf(it)
		i, ok := index[q]
		if !ok {
			i = len(out)
			index[q] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], it)
	}
	return out
}

// untilRedisAnswers runs do again, with backoff, while Redis cannot serve
// (restarting, loading its AOF, unreachable, unable to persist: MISCONF),
// until ctx ends: for a write that must not be dropped, c.settling. The
// job stays held meanwhile, so the lease keeper keeps its lease once Redis
// is back. Dropping the write instead would let the lease expire and the
// job run again: an ack or an idempotency key lost to a Redis restart is
// a job run twice with one key (found by the chaos suite). The wait joins
// the worker's outage: one Warn per outage, its time counted.
//
// The retries go through fresh clients (queue.Pool.Fresh), at most
// retryCap apart, so the write lands within about retryCap of Redis
// answering again: the worker's own clients, after failed dials, wait out
// a second of go-redis's dial backoff first, and a worker killed in that
// second has run a job whose ack or idempotency key was never recorded
// (the chaos suite measured 920 ms).
func (c *consumer) untilRedisAnswers(ctx context.Context, what string, do func(*queue.Pool) error) error {
	pool := c.w.pool
	var (
		fresh  *queue.Pool
		waited func()
	)
	defer func() {
		if fresh != nil {
			fresh.Close()
		}
		if waited != nil {
			waited()
		}
	}()
	for attempt := 1; ; attempt++ {
		err := do(pool)
		if err == nil || !queue.Transient(err) || ctx.Err() != nil {
			return err
		}
		if waited == nil {
			waited = c.w.outage.Wait(what, err)
		}
		if retry.Sleep(ctx, retry.Backoff(20*time.Millisecond, retryCap, attempt)) != nil {
			return err
		}
		if fresh != nil {
			fresh.Close()
		}
		if fresh, err = c.w.pool.Fresh(); err == nil {
			pool = fresh
		}
	}
}

// retryCap bounds the wait between retries of an ack or an idempotency
// key's record while Redis is away: how late after Redis answers again
// they land, at most (plus the write itself).
const retryCap = 100 * time.Millisecond

// leaseState is what the consumer knows of a batch's lease.
type leaseState struct {
	q queue.Queue
	// since is when, by this process's monotonic clock, the last claim or
	// extension of the lease that Redis answered was sent: the lease runs
	// at least until since + Lease (Redis's clock sets it later than that).
	since   time.Time
	lastErr error // of the extensions that failed since
	// givenUp: its jobs were cancelled before the lease could end; it is
	// no longer extended.
	givenUp bool
}

// errLeaseReaped is the cause a handler's context is cancelled with when
// its batch was reaped (watchLeases gives its own when it gives a lease up).
var errLeaseReaped = errors.New("lease lost: its batch was taken back after the lease expired; the job runs again elsewhere")

// leaseMargin is how long before a lease would end, unextended, the
// consumer gives it up and cancels its handlers: a tenth of it, so that a
// handler stops before another worker can take its job.
func leaseMargin(lease time.Duration) time.Duration { return lease / 10 }

// keepLeases extends the lease of every batch with a job held here,
// waiting or running, every Lease/3 in one call per queue. A job whose
// batch is gone (the reaper took it back after Redis or this process
// stalled) is dropped if waiting and cancelled if running: another holder
// settles it. Beside it, watchLeases gives up the leases that could not be
// extended in time.
//
// After a round that Redis could not serve (down, restarting, loading),
// the next comes within retryCap, not a third of a lease later, and goes
// through fresh clients (as untilRedisAnswers does: the worker's own wait
// out go-redis's second of dial backoff): so the leases are extended about
// as soon as Redis answers again. Waiting for the next tick instead let
// watchLeases give up a lease that Redis would have extended: after a 2 s
// Redis stop with the chaos suite's 3 s lease, no tick fell between
// Redis's return and the give-up, the handler of a keyed job that had just
// started was cancelled (its HTTP call answered 2xx all the same), its
// failed run freed the key, and the reaped job ran again at attempt 2.
func (c *consumer) keepLeases(ctx context.Context) {
	w := c.w
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); c.watchLeases(ctx) }()
	defer func() { <-watchDone }()
	var fresh *queue.Pool // while extensions fail
	defer func() {
		if fresh != nil {
			fresh.Close()
		}
	}()
	failures := 0 // rounds in a row that Redis could not serve
	t := time.NewTimer(w.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pool := w.pool
		if fresh != nil {
			fresh.Close()
			fresh = nil
		}
		if failures > 0 {
			if p, err := w.pool.Fresh(); err == nil {
				fresh, pool = p, p
			}
		}
		if c.extendHeld(ctx, pool, failures == 0) {
			failures++
			t.Reset(min(retry.Backoff(20*time.Millisecond, retryCap, failures), w.cfg.Lease/3))
			continue
		}
		failures = 0
		t.Reset(w.cfg.Lease / 3)
	}
}

// extendHeld extends, through pool, the leases of the batches held here
// that are not given up, in one call per queue, and abandons the jobs of
// the batches found gone. It reports whether a call failed with a
// Transient error (Redis could not serve: try again soon). warn logs a
// failed call (the first of a run of failures).
func (c *consumer) extendHeld(ctx context.Context, pool *queue.Pool, warn bool) (unavailable bool) {
	w := c.w
	// A batch is one claim's, of one queue: its lease is there.
	type leased struct {
		q     queue.Queue
		batch string
	}
	c.mu.Lock()
	seen := map[string]bool{}
	batches := make([]leased, 0, 4)
	for _, h := range c.held {
		b := h.claimed.Batch
		if seen[b] {
			continue
		}
		seen[b] = true
		if st := c.leases[b]; st == nil || !st.givenUp {
			batches = append(batches, leased{h.q, b})
		}
	}
	for b := range c.leases {
		if !seen[b] {
			delete(c.leases, b) // nothing of it is held any more
		}
	}
	c.mu.Unlock()
	gone := map[string]bool{}
	for _, same := range byQueue(batches, func(l leased) queue.Queue { return l.q }) {
		names := make([]string, len(same))
		for i, l := range same {
			names[i] = l.batch
		}
		// A call that hangs (Redis or the network stalled) must not
		// outlast a tick: the next one tries again.
		sent := time.Now()
		callCtx, cancel := context.WithTimeout(ctx, w.cfg.Lease/3)
		kept, cancels, err := pool.ExtendLeases(callCtx, same[0].q, names, w.cfg.Lease)
		cancel()
		if len(cancels) > 0 {
			c.cancelHeld(ctx, cancels)
		}
		if queue.Transient(err) && ctx.Err() == nil {
			unavailable = true
		}
		c.mu.Lock()
		for i, b := range names {
			st := c.leases[b]
			switch {
			case err != nil && st != nil:
				st.lastErr = err
			case err != nil:
			case !kept[i]:
				gone[b] = true
			case st != nil:
				st.since, st.lastErr = sent, nil
			}
		}
		c.mu.Unlock()
		if err != nil && ctx.Err() == nil && (warn || !queue.Transient(err)) {
			c.log.Warn("extending leases failed; retrying", "queue", same[0].q.String(), "batches", len(names), "err", err)
		}
	}
	if len(gone) == 0 {
		return unavailable
	}
	c.mu.Lock()
	dropped := c.abandon(gone, errLeaseReaped)
	c.mu.Unlock()
	if dropped {
		c.slots.poke() // room grew
	}
	return unavailable
}

// watchLeases gives up, a margin before it would end, the lease of a
// batch that could not be extended (Redis unreachable or failing): the
// handlers of its jobs are cancelled, with the reason as their context's
// cause, and their outcomes are not recorded by this worker, so that none
// runs on past its lease beside the next holder. The jobs are reaped once
// the lease ends and run again (at least once). It counts on this
// process's monotonic clock, from the last claim or extension Redis
// answered: the lease itself runs on Redis's clock, at least that long.
func (c *consumer) watchLeases(ctx context.Context) {
	lease := c.w.cfg.Lease
	margin := leaseMargin(lease)
	t := time.NewTimer(margin / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		dropped := false
		// Wakes at the next lease to give up, or within margin/2 to see
		// new ones.
		next := margin / 2
		c.mu.Lock()
		for b, st := range c.leases {
			if st.givenUp {
				continue
			}
			if left := lease - margin - now.Sub(st.since); left > 0 {
				next = min(next, left)
				continue
			}
			st.givenUp = true
			last := "no answer from Redis"
			if st.lastErr != nil {
				last = st.lastErr.Error()
			}
			cause := fmt.Errorf("lease could not be extended since %s (%s ago; the lease is %s): %s",
				st.since.UTC().Format("2006-01-02T15:04:05.000Z"), now.Sub(st.since).Round(time.Millisecond), lease, last)
			c.log.Warn("cancelling the jobs of a lease that could not be extended before it ends; they will be reaped and run again",
				"queue", st.q.String(), "batch", b, "cause", cause)
			if c.abandon(map[string]bool{b: true}, cause) {
				dropped = true
			}
		}
		c.mu.Unlock()
		t.Reset(next)
		if dropped {
			c.slots.poke() // room grew
		}
	}
}

// abandon lets go of this consumer's jobs of the batches given, whose
// leases are lost or given up: a running job's handler is cancelled with
// cause, and its outcome will not be recorded; a waiting one is dropped.
// A job whose ack is under way is left to it (its ack finds out). It
// reports whether any was dropped. Under c.mu.
func (c *consumer) abandon(batches map[string]bool, cause error) (dropped bool) {
	for key, h := range c.held {
		if !batches[h.claimed.Batch] || h.lost || h.acking {
			continue
		}
		h.lost, h.why = true, cause
		if h.cancel != nil {
			h.cancel(cause)
			continue
		}
		// Waiting: never started, and no longer ours.
		delete(c.held, key)
		for k, x := range c.waiting {
			if x == h {
				c.waiting = append(c.waiting[:k], c.waiting[k+1:]...)
				break
			}
		}
		dropped = true
		c.w.count("lost", h.jobType, 1)
		c.log.Warn("lease lost before the job started; it will run elsewhere", "job", key.id, "batch", key.batch, "why", cause)
	}
	return dropped
}

// shutdown hands waiting jobs back at once, lets running ones finish for up
// to Drain, then cuts them short and hands them back, not counted as failed.
func (c *consumer) shutdown(runCtx context.Context, stopRuns context.CancelFunc, running *sync.WaitGroup) {
	w := c.w
	c.mu.Lock()
	waiting := c.waiting
	for _, h := range waiting {
		delete(c.held, h.key())
	}
	c.waiting = nil
	c.mu.Unlock()
	c.release(waiting, "claimed jobs not started handed back to ready")

	done := make(chan struct{})
	go func() { running.Wait(); close(done) }()
	t := time.NewTimer(w.cfg.Drain)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	c.mu.Lock()
	c.draining = true
	rest := make([]*heldJob, 0, len(c.held))
	for _, h := range c.held {
		rest = append(rest, h)
	}
	c.mu.Unlock()
	stopRuns()
	<-done
	c.release(rest, "drain deadline passed: jobs handed back to ready")
}

// release hands jobs back to the front of their lanes, each to its queue.
func (c *consumer) release(jobs []*heldJob, msg string) {
	for _, same := range byQueue(jobs, func(h *heldJob) queue.Queue { return h.q }) {
		claimed := make([]queue.Claimed, len(same))
		for i, h := range same {
			claimed[i] = h.claimed
		}
		n, err := c.w.pool.Release(context.Background(), same[0].q, claimed)
		c.log.Info(msg, "queue", same[0].q.String(), "released", n, "err", err)
		c.w.count("released", "", n)
	}
}
