// Package worker is sluice's job execution: one consumer per Redis
// partition claims jobs from the queues of the topics it serves (weighted
// fair across topics, or in strict order; within a queue in weighted fair
// order of lanes), runs them on a resizable pool of goroutines under
// leases it keeps alive while they are held, holds them to the execution
// rate limits of their resources (ratelimit.go), and settles each: done,
// retried with backoff through the delayed set, or dead with its last
// error. It is also the public handler API (Handler, Permanent,
// RetryAfter, Middleware) for programs that embed a worker.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
)

// Config configures a Worker. DefaultConfig holds the defaults each field
// names; New also fills in those of Topics and Now when they are empty.
type Config struct {
	// Stage is the stage whose queues are served; default "dev".
	Stage string
	// RedisAddr is the Redis of every partition not in PartitionAddrs;
	// default 127.0.0.1:6379.
	RedisAddr string
	// PartitionAddrs puts partitions on Redis servers of their own;
	// default none.
	PartitionAddrs map[int]string
	// Partitions is the layout's partition count; it must match the
	// relay's. Default 8.
	Partitions int
	// Serve lists the partitions this worker consumes; default (empty): all.
	Serve []int
	// Topics are the topics (queues) served, with their weights: a
	// partition's consumer claims from every topic's queue on it, weighted
	// fair by jobs served (see Strict). Default (empty): one topic,
	// DefaultTopic, weight 1.
	Topics TopicWeights
	// Strict drains the topics in the order of Topics instead of weighing
	// them: a later topic is claimed from only when every earlier one has
	// nothing ready. Weights are then ignored. Default false.
	Strict bool
	// Workers is the number of jobs run at once per partition, across its
	// topics; default 10.
	Workers int
	// Lease is how long a claimed job stays ours without a heartbeat; the
	// heartbeat extends it every Lease/3 while the handler runs. Default
	// 30s.
	Lease time.Duration
	// ClaimBatch is the most jobs claimed in one round trip; default 128.
	ClaimBatch int
	// Prefetch is the most claimed jobs that may wait for a free slot, per
	// partition: claims are then batches, and a slot that frees finds its
	// next job already here. Fewer wait when jobs run long: about as many
	// as the slots run within PrefetchWait. 0 claims only for free slots.
	// Default 256.
	Prefetch int
	// PrefetchWait is how long a prefetched job should wait for a slot, at
	// most; default 50ms.
	PrefetchWait time.Duration
	// MaxAttempts applies to jobs whose envelope says 0; default 5.
	MaxAttempts int
	// Timeout bounds one attempt of jobs whose envelope says 0; default 1m.
	Timeout time.Duration
	// Backoff is the delay before the second attempt; each later one
	// doubles it, up to MaxBackoff, with ±20% jitter. Defaults 1s and 16s.
	Backoff, MaxBackoff time.Duration
	// ResultTTL is how long the record of a job that failed an attempt
	// and then succeeded is kept, and a group once it ended. A plain job
	// that succeeded keeps nothing unless it asked for retain. Default 24h.
	ResultTTL time.Duration
	// Retain is the per-topic default of the envelope's retain: how long a
	// successful job's record and result are kept. A job's own retain
	// wins. Default (empty): nothing is kept.
	Retain map[string]time.Duration
	// IdempotencyTTL is how long a completed idempotency key keeps other
	// jobs with the key from running; default 24h.
	IdempotencyTTL time.Duration
	// Dead bounds each queue partition's dead set; default 100,000 jobs,
	// kept 7 days.
	Dead queue.DeadLimits
	// Drain is how long running jobs may take to finish on shutdown; the
	// rest go back to ready, not counted as failed. Default 30s.
	Drain time.Duration
	// Maintain is how often expired leases are reaped and due delayed jobs
	// promoted; default 500ms.
	Maintain time.Duration
	// ConsulAddr is the Consul agent whose KV holds the execution rate
	// limits (sluice/<stage>/limits/<resource>); default (empty): no
	// limits.
	ConsulAddr string
	// RateLimitLead is how long before its slot a throttled job comes back
	// from delayed, to wait the rest in process (holding a slot): enough
	// to absorb the promotion and the claim. Default 25ms.
	RateLimitLead time.Duration
	// RateLimitMargin stretches a limit's slot spacing so that rate slots
	// span one second plus the margin: a job may start up to the margin
	// late without crowding a one-second window. A job later than that
	// reserves another slot. It costs margin/1s of a limited resource's
	// throughput. Default 5ms.
	RateLimitMargin time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// DefaultConfig returns the defaults documented in docs/worker.md.
func DefaultConfig() Config {
	return Config{
		Stage: "dev", RedisAddr: "127.0.0.1:6379", Partitions: 8, Workers: 10,
		Topics: TopicWeights{{Topic: DefaultTopic, Weight: 1}},
		Lease:  30 * time.Second, ClaimBatch: 128, Prefetch: 256, PrefetchWait: 50 * time.Millisecond, MaxAttempts: 5, Timeout: time.Minute,
		Backoff: time.Second, MaxBackoff: 16 * time.Second, ResultTTL: 24 * time.Hour, IdempotencyTTL: 24 * time.Hour,
		Dead:  queue.DeadLimits{Max: 100000, Keep: 7 * 24 * time.Hour},
		Drain: 30 * time.Second, Maintain: 500 * time.Millisecond,
		RateLimitLead: 25 * time.Millisecond, RateLimitMargin: 5 * time.Millisecond,
	}
}

// connsPerPartition is how many Redis connections a served partition may
// hold at once, with room for handlers' failures and idempotency calls.
const connsPerPartition = 6

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
	limits   *limiter
}

// New creates a worker; call Handle for each job type, then Run.
func New(cfg Config, log *slog.Logger) (*Worker, error) {
	if cfg.Workers < 1 || cfg.ClaimBatch < 1 || cfg.Lease < time.Second || cfg.MaxAttempts < 1 {
		return nil, errors.New("worker: workers, claim batch and max attempts must be positive, lease at least 1s")
	}
	if cfg.ClaimBatch > queue.MaxBatch || cfg.Prefetch < 0 || cfg.Prefetch > queue.MaxBatch || cfg.PrefetchWait < 0 {
		return nil, fmt.Errorf("worker: claim batch must be at most %d, prefetch 0..%d, prefetch wait not negative", queue.MaxBatch, queue.MaxBatch)
	}
	if cfg.RateLimitLead < 0 || cfg.RateLimitMargin < 0 || cfg.RateLimitMargin >= time.Second {
		return nil, errors.New("worker: rate-limit lead must not be negative, margin within 0..1s")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if len(cfg.Topics) == 0 {
		cfg.Topics = TopicWeights{{Topic: DefaultTopic, Weight: 1}}
	}
	cfg.Topics = slices.Clone(cfg.Topics) // the consumers read it while the caller may not
	if err := cfg.Topics.check(); err != nil {
		return nil, fmt.Errorf("worker: topics: %w", err)
	}
	if len(cfg.Serve) == 0 {
		for p := range cfg.Partitions {
			cfg.Serve = append(cfg.Serve, p)
		}
	}
	poolCfg := queue.PoolConfig{
		Layout: queue.Layout{Stage: cfg.Stage, Partitions: cfg.Partitions},
		Addr:   cfg.RedisAddr, PartitionAddrs: cfg.PartitionAddrs,
	}
	workerPoolCfg := poolCfg
	workerPoolCfg.Options = func(o *redis.Options) {
		// Each served partition holds up to five connections at
		// once (an idle consumer's BLPOP, a claim, the acker, the
		// lease keeper, the maintainer); go-redis's default of
		// 10 per CPU ran out with 8 partitions on 2 CPUs, and a
		// starved call waits for a connection.
		o.PoolSize = max(10*runtime.GOMAXPROCS(0), connsPerPartition*len(cfg.Serve)+10)
	}
	pool, err := queue.NewPool(workerPoolCfg)
	if err != nil {
		return nil, err
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
	if w.limits, err = newLimiter(w, poolCfg); err != nil {
		pool.Close()
		return nil, err
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
	defer w.limits.close()
	// Redis may not be up yet (started together, or restarting): wait for
	// it, saying so once, rather than give up with a pool that is closed.
	for attempt := 1; ; attempt++ {
		err := w.pool.LoadScripts(ctx)
		if err == nil {
			if attempt > 1 {
				w.log.Info("Redis answers: the worker starts")
			}
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if attempt == 1 {
			w.log.Warn("Redis does not answer yet; waiting for it before consuming", "err", err)
		}
		if retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, 2*time.Second, attempt)) != nil {
			return nil
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.limits.run(ctx) }()
	for _, p := range w.cfg.Serve {
		// A restarted worker resumes the count the coordinator chose.
		w.mu.RLock()
		s := w.pools[p]
		w.mu.RUnlock()
		s.resize(w.checkpointed(ctx, p, s.size()))
		wg.Add(2)
		go func() { defer wg.Done(); w.newConsumer(p).run(ctx) }()
		go func() { defer wg.Done(); w.maintain(ctx, p) }()
	}
	wg.Wait()
	return nil
}

// maintain returns expired leases and promotes due retries on each served
// topic's queue of part, applies the partition's coordinator commands and
// sends the consumer's heartbeat, every Maintain.
func (w *Worker) maintain(ctx context.Context, part int) {
	t := time.NewTicker(w.cfg.Maintain)
	defer t.Stop()
	defer w.leave(part)
	w.heartbeat(ctx, part)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Commands, also under load, when the consumer never waits on
		// its lists: applied within a maintenance tick.
		for range 10 {
			raw, err := w.pool.Client(part).LPop(ctx, w.pool.Layout().PartKeys(part).Cmd()).Result()
			if err != nil {
				break
			}
			w.apply(ctx, part, raw)
		}
		w.heartbeat(ctx, part)
		now := w.cfg.Now()
		for _, t := range w.cfg.Topics {
			q := queue.Queue{Topic: t.Topic, Part: part}
			if n, err := w.pool.Reap(ctx, q, 100, now, w.cfg.Dead); err == nil && n > 0 {
				w.count("reaped", "", n)
				w.log.Warn("expired leases returned to ready", "queue", q.String(), "jobs", n)
			}
			w.pool.Promote(ctx, q, 500, now)
		}
	}
}

// retainOf is how long a job's record and result are kept once it
// succeeded: its own retain, else its topic's default (the topic of the
// queue it came from).
func (w *Worker) retainOf(j *job.Job, topic string) time.Duration {
	if j.Retain > 0 {
		return time.Duration(j.Retain)
	}
	return w.cfg.Retain[topic]
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

// backoff is the delay after attempt n: Backoff × 2^(n-1), at most
// MaxBackoff, ±20% jitter so that failing jobs do not return in lockstep.
func (w *Worker) backoff(attempt int) time.Duration {
	return retry.Backoff(w.cfg.Backoff, w.cfg.MaxBackoff, attempt)
}
