package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
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
// gives it a slot, execute (run.go) runs it as steps and settles it, the
// acker records its success; then what runs beside them (the lease
// keeper) and the way out (shutdown, release).
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
	// j is the job its envelope holds, read as it was claimed; nil when
	// the envelope is missing or unreadable (unreadable says why), and
	// then its run settles it dead at once.
	j          *job.Job
	unreadable error
	cancel     context.CancelCauseFunc // set while its handler runs; under consumer.mu
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
	jobType   string // from its envelope, when readable
	// trace is the job's trace context from its envelope; invalid
	// unless tracing is on and the envelope carries one (tracing.go).
	trace      trace.SpanContext
	retain     time.Duration // once its run resolved it
	enqueuedAt time.Time     // the gate's accept time, from its envelope when readable
}

// holdClaimed holds a claimed job with its envelope read: a job's run
// starts from the job, as the claim's batch is read (outside the consumer's
// lock). An envelope missing or unreadable is no error of the claim: the
// job's run settles it dead (no later attempt would read it better).
func holdClaimed(q queue.Queue, cl queue.Claimed) *heldJob {
	h := &heldJob{q: q, claimed: cl}
	switch j, err := job.Decode(cl.Envelope); {
	case cl.Envelope == nil:
		h.unreadable = fmt.Errorf("job %s has no envelope in Redis", cl.ID)
	case err != nil:
		h.unreadable = fmt.Errorf("envelope: %w", err)
	default:
		h.j, h.jobType, h.enqueuedAt = j, j.Type, j.EnqueuedAt
	}
	return h
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
		jobs, drained, err := w.pool.ClaimDrained(ctx, t.q, min(room, w.cfg.ClaimBatch), w.cfg.Lease)
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
		c.topics.claimed(t, len(jobs), drained)
		if len(jobs) == 0 {
			continue // the next topic, or the wait for work
		}
		held := make([]*heldJob, len(jobs))
		for i, j := range jobs {
			held[i] = holdClaimed(t.q, j)
		}
		c.mu.Lock()
		for _, h := range held {
			j := h.claimed
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
	layout := w.pool.Keyspace()
	cmd := layout.PartKeys(c.part).Cmd()
	keys := make([]string, 0, 2+len(c.topics.queues))
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
	// A stop ends the wait at once, through a token on this consumer's
	// own stop list: go-redis leaves a blocked BLPOP to its timeout when
	// ctx ends, and SIGTERM would wait out IdleRecheck.
	stop := layout.PartKeys(c.part).Stop(c.slots.id)
	keys = append(keys, stop)
	stopWaiting := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := w.pool.StopWaiting(sctx, c.part, c.slots.id); err != nil {
			c.log.Debug("ending an idle wait early failed; the stop waits it out", "partition", c.part, "err", err)
		}
	})
	defer stopWaiting()
	kv, err := w.pool.Client(c.part).BLPop(ctx, max, keys...).Result()
	switch {
	case err == nil && len(kv) == 2 && kv[0] == stop:
		return // stopping (or a token left by a stop that came as the last wait ended)
	case err == nil && len(kv) == 2 && kv[0] == cmd:
		w.apply(ctx, c.part, kv[1])
		return
	case err == nil && len(kv) == 2:
		if t := c.topics.woken(layout.Keys, kv[0]); t != nil {
			w.pool.Woken(t.q, kv[1]) // the next claim's candidates
		}
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
	layout := w.pool.Keyspace()
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

// errJobCancelled is the cause a handler's context is cancelled with when
// an operator cancelled its job (sluice jobs cancel, the admin API).
var errJobCancelled = errors.New("job cancelled by an operator (sluice jobs cancel)")

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
		for _, same := range groupBy(batch, func(r ackRequest) queue.Queue { return r.job.q }) {
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
	err := c.untilRedisAnswers(c.settling, "acking", func(pool redisSide) (err error) {
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
		c.log.Warn("lease lost before the ack; its next holder settles the job (it runs again, or the reaper settled a pending cancel)", "job", r.job.claimed.ID)
	}
	for t, n := range acked {
		w.count("done", t, n)
	}
}

// groupBy splits items by their key (their queue; a partition's Redis
// client): each part keeps the order given, the parts come in the order of
// their first item. Items of one key (a worker serving one topic) are the
// slice itself.
func groupBy[T any, K comparable](items []T, keyOf func(T) K) [][]T {
	if len(items) == 0 {
		return nil
	}
	first, same := keyOf(items[0]), true
	for _, it := range items[1:] {
		if keyOf(it) != first {
			same = false
			break
		}
	}
	if same {
		return [][]T{items}
	}
	index := map[K]int{}
	var out [][]T
	for _, it := range items {
		k := keyOf(it)
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], it)
	}
	return out
}

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
// the next comes within queue.TakenRetryCap, not a third of a lease
// later, and goes through fresh clients (as queue.UntilTaken does: the
// worker's own wait out go-redis's second of dial backoff): so the leases
// are extended about as soon as Redis answers again. Waiting for the next tick instead let
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
	var fresh redisSide // while extensions fail
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
			if p, err := w.freshRedis(); err == nil {
				fresh, pool = p, p
			}
		}
		if c.extendHeld(ctx, pool, failures == 0) {
			failures++
			t.Reset(min(retry.Backoff(20*time.Millisecond, queue.TakenRetryCap, failures), w.cfg.Lease/3))
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
func (c *consumer) extendHeld(ctx context.Context, pool redisSide, warn bool) (unavailable bool) {
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
	for _, same := range groupBy(batches, func(l leased) queue.Queue { return l.q }) {
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
	for _, same := range groupBy(jobs, func(h *heldJob) queue.Queue { return h.q }) {
		claimed := make([]queue.Claimed, len(same))
		for i, h := range same {
			claimed[i] = h.claimed
		}
		n, err := c.w.pool.Release(context.Background(), same[0].q, claimed)
		c.log.Info(msg, "queue", same[0].q.String(), "released", n, "err", err)
		c.w.count("released", "", n)
	}
}
