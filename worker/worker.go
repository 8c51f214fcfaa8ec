// Package worker is sluice's job execution: one consumer per Redis
// partition claims jobs in weighted fair order, runs them on a pool of
// goroutines under a lease it extends while the handler runs, and settles
// each: done, retried with backoff through the delayed set, or dead with its
// last error. It is also the public handler API (Handler, Permanent,
// RetryAfter) for programs that embed a worker.
//
// Issue 4 is in progress: resizing at run time, checkpoints, idempotency
// keys and batched acks are still to come.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
)

// Config configures a Worker.
type Config struct {
	Stage          string
	RedisAddr      string
	PartitionAddrs map[int]string
	// Partitions is the layout's partition count; it must match the relay's.
	Partitions int
	// Serve lists the partitions this worker consumes; empty: all.
	Serve []int
	// Workers is the number of jobs run at once per partition.
	Workers int
	// Lease is how long a claimed job stays ours without a heartbeat; the
	// heartbeat extends it every Lease/3 while the handler runs.
	Lease time.Duration
	// ClaimBatch is the most jobs claimed in one round trip.
	ClaimBatch int
	// MaxAttempts applies to jobs whose envelope says 0.
	MaxAttempts int
	// Timeout bounds one attempt of jobs whose envelope says 0.
	Timeout time.Duration
	// Backoff is the delay before the second attempt; each later one
	// doubles it, up to MaxBackoff, with ±20% jitter.
	Backoff, MaxBackoff time.Duration
	// ResultTTL is how long a done job (and its result) is kept.
	ResultTTL time.Duration
	// IdempotencyTTL is how long a completed idempotency key keeps other
	// jobs with the key from running.
	IdempotencyTTL time.Duration
	// Dead bounds the dead set.
	Dead queue.DeadLimits
	// Drain is how long running jobs may take to finish on shutdown; the
	// rest go back to ready, not counted as failed.
	Drain time.Duration
	// Maintain is how often expired leases are reaped and due delayed jobs
	// promoted.
	Maintain time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// DefaultConfig returns the defaults documented in docs/worker.md.
func DefaultConfig() Config {
	return Config{
		Stage: "dev", RedisAddr: "127.0.0.1:6379", Partitions: 8, Workers: 10,
		Lease: 30 * time.Second, ClaimBatch: 32, MaxAttempts: 5, Timeout: time.Minute,
		Backoff: time.Second, MaxBackoff: 16 * time.Second, ResultTTL: 24 * time.Hour, IdempotencyTTL: 24 * time.Hour,
		Dead:  queue.DeadLimits{Max: 100000, Keep: 7 * 24 * time.Hour},
		Drain: 30 * time.Second, Maintain: 500 * time.Millisecond,
	}
}

// Worker runs handlers for the jobs of its partitions.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	pool     *queue.Pool
	m        *metrics
	mu       sync.RWMutex
	handlers map[string]Handler
	fallback Handler
	mws      []Middleware
	pools    map[int]*slots // by partition
}

// New creates a worker; call Handle for each job type, then Run.
func New(cfg Config, log *slog.Logger) (*Worker, error) {
	if cfg.Workers < 1 || cfg.ClaimBatch < 1 || cfg.Lease < time.Second || cfg.MaxAttempts < 1 {
		return nil, errors.New("worker: workers, claim batch and max attempts must be positive, lease at least 1s")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pool, err := queue.NewPool(queue.PoolConfig{
		Layout: queue.Layout{Stage: cfg.Stage, Partitions: cfg.Partitions},
		Addr:   cfg.RedisAddr, PartitionAddrs: cfg.PartitionAddrs,
	})
	if err != nil {
		return nil, err
	}
	if len(cfg.Serve) == 0 {
		for p := range cfg.Partitions {
			cfg.Serve = append(cfg.Serve, p)
		}
	}
	for _, p := range cfg.Serve {
		if p < 0 || p >= cfg.Partitions {
			pool.Close()
			return nil, fmt.Errorf("worker: partition %d out of range 0..%d", p, cfg.Partitions-1)
		}
	}
	w := &Worker{cfg: cfg, log: log, pool: pool, handlers: map[string]Handler{}, m: newMetrics(), pools: map[int]*slots{}}
	for _, p := range cfg.Serve {
		w.pools[p] = newSlots(cfg.Workers)
	}
	return w, nil
}

// Handle registers the handler of a job type.
func (w *Worker) Handle(jobType string, h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[jobType] = h
}

// HandleOther registers the handler of every type without one of its own.
// Without it, such jobs go to the dead set: nothing could ever run them.
func (w *Worker) HandleOther(h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fallback = h
}

// Use adds middleware, applied to every handler, the first outermost.
func (w *Worker) Use(mw ...Middleware) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mws = append(w.mws, mw...)
}

func (w *Worker) handler(jobType string) Handler {
	w.mu.RLock()
	defer w.mu.RUnlock()
	h, ok := w.handlers[jobType]
	if !ok {
		h = w.fallback
	}
	if h == nil {
		return nil
	}
	for i := len(w.mws) - 1; i >= 0; i-- {
		h = w.mws[i](h)
	}
	return h
}

// Run consumes the worker's partitions until ctx ends, then stops claiming,
// lets running jobs finish for up to Drain and hands the rest back.
func (w *Worker) Run(ctx context.Context) error {
	defer w.pool.Close()
	if err := w.pool.LoadScripts(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, p := range w.cfg.Serve {
		// A restarted worker resumes the count the coordinator chose.
		w.mu.RLock()
		s := w.pools[p]
		w.mu.RUnlock()
		s.resize(w.checkpointed(ctx, p, s.size()))
		wg.Add(2)
		go func() { defer wg.Done(); w.consume(ctx, p) }()
		go func() { defer wg.Done(); w.maintain(ctx, p) }()
	}
	wg.Wait()
	return nil
}

// consume claims and runs one partition's jobs.
func (w *Worker) consume(ctx context.Context, part int) {
	log := w.log.With("partition", part)
	w.mu.RLock()
	slots := w.pools[part]
	w.mu.RUnlock()
	w.m.workers.WithLabelValues(fmt.Sprint(part)).Set(float64(slots.size()))
	// Running jobs outlive ctx by up to Drain; runCtx ends after that.
	runCtx, stopRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRuns()
	var running sync.WaitGroup
	acks := make(chan ackRequest)
	ackerDone := make(chan struct{})
	go func() { defer close(ackerDone); w.acker(part, acks) }()
	defer func() { close(acks); <-ackerDone }()
	ack := func(d queue.Done) (bool, error) {
		reply := make(chan ackReply, 1)
		acks <- ackRequest{done: d, reply: reply}
		r := <-reply
		return r.ok, r.err
	}
	var (
		mu       sync.Mutex
		held     = map[string]queue.Claimed{}
		draining bool
	)
	failing := false
	for ctx.Err() == nil {
		free, changed := slots.free()
		if free == 0 {
			// Wait for a slot: a finishing job or a resize frees one.
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		jobs, err := w.pool.Claim(ctx, part, min(free, w.cfg.ClaimBatch), w.cfg.Now().Add(w.cfg.Lease))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if !failing {
				log.Warn("claiming from Redis failed; retrying", "err", err)
				failing = true
			}
			w.waitForWork(ctx, part, time.Second)
			continue
		}
		if failing {
			log.Info("claiming from Redis works again")
			failing = false
		}
		if len(jobs) == 0 {
			w.waitForWork(ctx, part, time.Second)
			continue
		}
		envs, err := w.pool.Envelopes(ctx, part, jobs)
		if err != nil {
			// Leave them leased: the reaper hands them back.
			log.Warn("reading claimed envelopes failed", "jobs", len(jobs), "err", err)
			continue
		}
		for i, c := range jobs {
			env := envs[i]
			slots.take()
			mu.Lock()
			held[c.ID] = c
			mu.Unlock()
			running.Add(1)
			go func() {
				defer running.Done()
				defer slots.release()
				w.execute(runCtx, part, c, env, func() bool { mu.Lock(); defer mu.Unlock(); return draining }, ack, log)
				mu.Lock()
				delete(held, c.ID)
				mu.Unlock()
			}()
		}
	}
	// Shutdown: no more claims. Running jobs get Drain to finish.
	done := make(chan struct{})
	go func() { running.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(w.cfg.Drain):
	}
	mu.Lock()
	draining = true
	rest := make([]queue.Claimed, 0, len(held))
	for _, c := range held {
		rest = append(rest, c)
	}
	mu.Unlock()
	stopRuns()
	<-done
	if len(rest) > 0 {
		n, err := w.pool.Release(context.Background(), part, rest)
		log.Info("drain deadline passed: jobs handed back to ready", "released", n, "err", err)
		w.m.jobs.WithLabelValues("released").Add(float64(n))
	}
}

// waitForWork blocks on the partition's command and wake lists for up to
// max: enqueues, retries coming due and released jobs push a wake token,
// the coordinator pushes commands. A command is applied here.
func (w *Worker) waitForWork(ctx context.Context, part int, max time.Duration) {
	k := w.pool.Layout().Keys(part)
	kv, err := w.pool.Client(part).BLPop(ctx, max, k.Cmd(), k.Wake()).Result()
	if err == nil && len(kv) == 2 && kv[0] == k.Cmd() {
		w.apply(ctx, part, kv[1])
		return
	}
	if err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil {
		// Redis unreachable: do not spin.
		t := time.NewTimer(max)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// maintain returns expired leases, promotes due retries and applies
// coordinator commands, every Maintain.
func (w *Worker) maintain(ctx context.Context, part int) {
	t := time.NewTicker(w.cfg.Maintain)
	defer t.Stop()
	groupOf := func(id string) (string, error) {
		env, err := w.pool.Envelope(ctx, part, id)
		if err != nil {
			return "", err
		}
		j, err := job.Decode(env)
		if err != nil {
			return "", err
		}
		if j.Group == "" {
			return j.ID, nil
		}
		return j.Group, nil
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Commands, also under load, when the consumer never waits on
		// its lists: applied within a maintenance tick.
		for range 10 {
			raw, err := w.pool.Client(part).LPop(ctx, w.pool.Layout().Keys(part).Cmd()).Result()
			if err != nil {
				break
			}
			w.apply(ctx, part, raw)
		}
		now := w.cfg.Now()
		if n, err := w.pool.Reap(ctx, part, 100, now); err == nil && n > 0 {
			w.m.jobs.WithLabelValues("reaped").Add(float64(n))
			w.log.Warn("expired leases returned to ready", "partition", part, "jobs", n)
		}
		w.pool.Promote(ctx, part, 500, now, groupOf)
	}
}

// execute runs one claimed job and settles it.
func (w *Worker) execute(ctx context.Context, part int, c queue.Claimed, env []byte, draining func() bool, ack ackFunc, log *slog.Logger) {
	start := w.cfg.Now()
	if env == nil {
		w.settle(ctx, part, c, nil, Permanent(fmt.Errorf("job %s has no envelope in Redis", c.ID)), 1, ack, log)
		return
	}
	j, err := job.Decode(env)
	if err != nil {
		w.settle(ctx, part, c, nil, Permanent(fmt.Errorf("envelope: %w", err)), 1, ack, log)
		return
	}
	maxAttempts := j.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = w.cfg.MaxAttempts
	}
	h := w.handler(j.Type)
	if h == nil {
		w.settle(ctx, part, c, nil, Permanent(fmt.Errorf("no handler for job type %q", j.Type)), maxAttempts, ack, log)
		return
	}
	if !j.EnqueuedAt.IsZero() && c.Attempt == 1 {
		w.m.queueWait.Observe(start.Sub(j.EnqueuedAt).Seconds())
	}
	timeout := time.Duration(j.Timeout)
	if timeout <= 0 {
		timeout = w.cfg.Timeout
	}
	if key := j.IdempotencyKey; key != "" {
		mark, err := w.pool.IdempotencyBegin(ctx, key, c.ID, timeout+w.cfg.Lease)
		switch {
		case err != nil:
			w.settle(ctx, part, c, nil, err, maxAttempts, ack, log)
			return
		case strings.HasPrefix(mark, "done:"):
			// A job with this key completed within its TTL: done
			// without running again.
			w.m.jobs.WithLabelValues("idempotent_skip").Inc()
			w.settle(ctx, part, c, []byte(`{"skipped":"idempotency key completed by job `+strings.TrimPrefix(mark, "done:")+`"}`), nil, maxAttempts, ack, log)
			return
		case mark != "":
			// Another job with the key runs now: look again after a
			// lease, without spending an attempt on waiting.
			if _, err := w.pool.Defer(context.WithoutCancel(ctx), part, c, w.cfg.Now().Add(w.cfg.Lease)); err != nil {
				log.Warn("deferring a job behind its idempotency key failed; its lease will expire", "job", c.ID, "err", err)
			}
			w.m.jobs.WithLabelValues("idempotent_wait").Inc()
			return
		}
	}
	jctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lost := w.heartbeat(jctx, cancel, part, c.ID)
	w.m.inflight.Inc()
	result, herr := call(jctx, h, &Job{
		ID: j.ID, Type: j.Type, Group: c.Group, Tenant: j.Tenant, Resource: j.Resource, Topic: j.Topic,
		Payload: j.Payload, Attempt: c.Attempt, MaxAttempts: maxAttempts, EnqueuedAt: j.EnqueuedAt,
	})
	w.m.inflight.Dec()
	cancel()
	w.m.execution.Observe(w.cfg.Now().Sub(start).Seconds())
	if <-lost {
		// The reaper took the job back (we were too slow to extend): its
		// next holder settles it.
		w.m.jobs.WithLabelValues("lost").Inc()
		log.Warn("lease lost while running; the job will run again", "job", c.ID)
		return
	}
	if key := j.IdempotencyKey; key != "" {
		if err := w.pool.IdempotencyEnd(context.WithoutCancel(ctx), key, c.ID, herr == nil, w.cfg.IdempotencyTTL); err != nil {
			log.Warn("recording the idempotency key failed", "job", c.ID, "key", key, "err", err)
		}
	}
	if herr != nil && ctx.Err() != nil && draining() {
		return // cut short by shutdown: handed back by Release, not failed
	}
	w.settle(context.WithoutCancel(ctx), part, c, result, herr, maxAttempts, ack, log)
}

// heartbeat extends the lease every Lease/3 until ctx ends. The channel
// reports, once, whether the lease was lost; a lost lease also cancels the
// handler.
func (w *Worker) heartbeat(ctx context.Context, cancel context.CancelFunc, part int, id string) <-chan bool {
	lost := make(chan bool, 1)
	go func() {
		t := time.NewTicker(w.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				lost <- false
				return
			case <-t.C:
				ok, err := w.pool.Extend(context.WithoutCancel(ctx), part, id, w.cfg.Now().Add(w.cfg.Lease))
				if err == nil && !ok {
					cancel()
					lost <- true
					return
				}
			}
		}
	}()
	return lost
}

// call runs the handler; a panic is a failed attempt, not a crash.
func call(ctx context.Context, h Handler, j *Job) (result []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return h.Handle(ctx, j)
}

// settle records the attempt's outcome.
func (w *Worker) settle(ctx context.Context, part int, c queue.Claimed, result []byte, herr error, maxAttempts int, ack ackFunc, log *slog.Logger) {
	now := w.cfg.Now()
	if herr == nil {
		if ok, err := ack(queue.Done{Job: c, Result: result}); err != nil || !ok {
			log.Warn("ack failed; the lease will expire and the job run again", "job", c.ID, "err", err, "leased", ok)
			return
		}
		w.m.jobs.WithLabelValues("done").Inc()
		return
	}
	var next time.Time
	if !IsPermanent(herr) && c.Attempt < maxAttempts {
		delay, asked := RetryDelay(herr)
		if !asked {
			delay = w.backoff(c.Attempt)
		}
		next = now.Add(delay)
	}
	res, err := w.pool.Fail(ctx, part, c, herr.Error(), next, now, w.cfg.Dead)
	switch {
	case err != nil:
		log.Warn("recording a failure failed; the lease will expire and the job run again", "job", c.ID, "err", err)
	case res == queue.FailRetrying:
		w.m.jobs.WithLabelValues("retried").Inc()
	case res == queue.FailDead:
		w.m.jobs.WithLabelValues("dead").Inc()
		log.Warn("job dead", "job", c.ID, "attempts", c.Attempt, "err", herr)
	}
}

// ackFunc records a success through the partition's acker.
type ackFunc func(queue.Done) (bool, error)

type ackRequest struct {
	done  queue.Done
	reply chan ackReply
}

type ackReply struct {
	ok  bool
	err error
}

// maxAckBatch bounds the acks sent in one round trip.
const maxAckBatch = 128

// acker sends a partition's acks to Redis: it takes one, adds whatever
// else is waiting, and sends them in one pipeline. Under load acks batch by
// themselves; when idle, one goes out at once.
func (w *Worker) acker(part int, in <-chan ackRequest) {
	for first := range in {
		batch := []ackRequest{first}
	more:
		for len(batch) < maxAckBatch {
			select {
			case r, ok := <-in:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		done := make([]queue.Done, len(batch))
		for i, r := range batch {
			done[i] = r.done
		}
		ok, err := w.pool.AckMany(context.Background(), part, done, w.cfg.Now(), w.cfg.ResultTTL)
		for i, r := range batch {
			if err != nil {
				r.reply <- ackReply{err: err}
			} else {
				r.reply <- ackReply{ok: ok[i]}
			}
		}
	}
}

// backoff is the delay after attempt n: Backoff × 2^(n-1), at most
// MaxBackoff, ±20% jitter so that failing jobs do not return in lockstep.
func (w *Worker) backoff(attempt int) time.Duration {
	d := w.cfg.Backoff
	for i := 1; i < attempt && d < w.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, w.cfg.MaxBackoff)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
