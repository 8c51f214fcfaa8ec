package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
)

// connsPerPartition is how many Redis connections a served partition may
// hold at once, with room for handlers' failures and idempotency calls.
const connsPerPartition = 6

// Worker runs handlers for the jobs of its partitions.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	pool     redisSide
	m        *metrics
	mu       sync.RWMutex
	handlers map[string]registered
	fallback Handler
	mws      []Middleware
	pools    map[int]*slots // by partition
	limits   *limiter
	outage   *queue.Outage // waits on a Redis that cannot serve or write
	follow   followed      // topics the stage's list added (follow.go)
}

// New creates a worker; call Handle for each job type, then Run.
func New(cfg Config, log *slog.Logger) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if skew := cfg.ClockSkew; skew != 0 {
		now := cfg.Now
		cfg.Now = func() time.Time { return now().Add(skew) }
	}
	if len(cfg.Topics) == 0 {
		cfg.Topics = TopicWeights{{Topic: DefaultTopic, Weight: 1}}
	}
	cfg.Topics = slices.Clone(cfg.Topics) // the consumers read it while the caller may not
	if err := cfg.Topics.check(); err != nil {
		return nil, fmt.Errorf("worker: Config.Topics: %w", err)
	}
	if len(cfg.Serve) == 0 {
		for p := range cfg.Partitions {
			cfg.Serve = append(cfg.Serve, p)
		}
	}
	poolCfg := cfg.PoolConfig()
	workerPoolCfg := poolCfg
	workerPoolCfg.Options = func(o *redis.Options) {
		// Each served partition holds up to five connections at
		// once (an idle consumer's BLPOP, a claim, the acker, the
		// lease keeper, the maintainer); go-redis's default of
		// 10 per CPU ran out with 8 partitions on 2 CPUs, and a
		// starved call waits for a connection.
		o.PoolSize = max(10*runtime.GOMAXPROCS(0), connsPerPartition*len(cfg.Serve)+10)
	}
	// Its batches carry host/pid and their claim time, so a job lookup
	// says who holds a job, since when.
	host, _ := os.Hostname()
	workerPoolCfg.Owner, workerPoolCfg.Now = host+"/"+strconv.Itoa(os.Getpid()), cfg.Now
	pool, err := openRedis(workerPoolCfg)
	if err != nil {
		return nil, err
	}
	outage := queue.NewOutage(log, nil)
	w := &Worker{cfg: cfg, log: log, pool: pool, handlers: map[string]registered{}, m: newMetrics(outage), pools: map[int]*slots{}, outage: outage}
	for _, p := range cfg.Serve {
		w.pools[p] = newSlots(cfg.Workers)
	}
	if w.limits, err = newLimiter(w, poolCfg); err != nil {
		pool.Close()
		return nil, err
	}
	return w, nil
}

// registered is a job type's handler with the type's own defaults.
type registered struct {
	h        Handler
	defaults typeDefaults
}

// Handle registers the handler of a job type, with the type's own
// defaults (TypeTimeout, TypeMaxAttempts), which apply to its jobs whose
// envelope sets none and win over Config's. HandleTyped and HandleFunc
// register a handler that gets the payload decoded. Registering a type
// again replaces its handler and defaults.
func (w *Worker) Handle(jobType string, h Handler, opts ...HandleOption) {
	var d typeDefaults
	for _, o := range opts {
		o(&d)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[jobType] = registered{h: h, defaults: d}
}

// HandleOther registers the handler of every type without one of its own.
// Without it, such jobs are retried, with their attempts counted, until a
// worker with their type's handler takes one or they go to the dead set.
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

// handler is the handler of jobType wrapped in the middleware, with the
// type's defaults (none for HandleOther's); nil when nothing handles it.
func (w *Worker) handler(jobType string) (Handler, typeDefaults) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	r, ok := w.handlers[jobType]
	if !ok {
		r = registered{h: w.fallback}
	}
	h := r.h
	if h == nil {
		return nil, typeDefaults{}
	}
	for i := len(w.mws) - 1; i >= 0; i-- {
		h = w.mws[i](h)
	}
	return h, r.defaults
}

// Run consumes the worker's partitions until ctx ends, then stops claiming,
// lets running jobs finish for up to Drain, hands the rest back and closes
// its Redis clients. It serves no HTTP: Serve adds /healthz, /readyz and
// /metrics, or a program that embeds the worker mounts Registry itself.
func (w *Worker) Run(ctx context.Context) error {
	defer w.pool.Close()
	defer w.limits.close()
	// Redis may not be up yet (started together, or restarting): wait for
	// it, saying so once, rather than give up with a pool that is closed.
	// A Redis that evicts keys is refused (Misconfigured).
	for attempt := 1; ; attempt++ {
		err := w.pool.LoadScripts(ctx)
		if err == nil {
			err = w.pool.CheckEviction(ctx, w.log)
		}
		if err == nil {
			if attempt > 1 {
				w.log.Info("Redis answers: the worker starts")
			}
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if queue.Misconfigured(err) {
			// A wrong password, a missing ACL permission, an untrusted
			// certificate, an evicting maxmemory-policy: waiting mends
			// none of them. The error names the setting to fix.
			return err
		}
		if attempt == 1 {
			w.log.Warn("Redis does not answer yet; waiting for it before consuming", "err", err)
		}
		if retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, 2*time.Second, attempt)) != nil {
			return nil
		}
	}
	w.warnUnregistered(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.limits.run(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); w.followTopics(ctx) }()
	for _, p := range w.cfg.Serve {
		// A restarted worker resumes the count the coordinator chose.
		w.mu.RLock()
		s := w.pools[p]
		w.mu.RUnlock()
		s.resize(w.checkpointed(ctx, p, s.size()))
		wg.Add(1)
		go func() { defer wg.Done(); w.newConsumer(p).run(ctx) }()
	}
	for _, parts := range w.partsByServer() {
		wg.Add(1)
		go func() { defer wg.Done(); w.maintain(ctx, parts) }()
	}
	wg.Wait()
	return nil
}

// partsByServer groups the served partitions by the Redis server that
// holds them: each group is maintained in one round trip a round, and a
// server that does not answer delays no other's rounds.
func (w *Worker) partsByServer() [][]int {
	return groupBy(w.cfg.Serve, w.pool.Client)
}

// maintain promotes due delayed jobs on each served topic's queue of
// parts (partitions of one Redis server) and applies their coordinator
// commands, every Maintain, and sends their consumers' heartbeats and
// returns expired leases every Liveness: a round is one round trip for
// all of parts, so that an idle worker wakes twice a second, not twice a
// second per partition.
func (w *Worker) maintain(ctx context.Context, parts []int) {
	t := time.NewTicker(w.cfg.Maintain)
	defer t.Stop()
	for _, part := range parts {
		w.heartbeat(ctx, part)
		defer w.leave(part)
	}
	liveEvery := max(1, int(min(w.cfg.Liveness, w.cfg.Lease/4)/w.cfg.Maintain))
	asks := make([]queue.PartMaintenance, len(parts))
	held := make([]*slots, len(parts))
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, part := range parts {
			w.popCommands(ctx, part)
		}
		// The look for due delayed jobs, and every liveEvery rounds the
		// heartbeats and the look for expired leases, go in one round
		// trip; acting on them costs round trips only when something is
		// due.
		now := w.cfg.Now()
		topics := w.servedTopics()
		n++
		live := n%liveEvery == 0
		for i, part := range parts {
			asks[i] = queue.PartMaintenance{Part: part}
			for _, t := range topics {
				asks[i].Queues = append(asks[i].Queues, queue.Queue{Topic: t.Topic, Part: part})
			}
			if live {
				// Leases expire by Redis's clock, not this worker's.
				s, b := w.beginBeat(part)
				held[i], asks[i].Beat = s, &b
			}
		}
		rounds := w.pool.ReadMaintenance(ctx, asks, now)
		if live {
			for i, part := range parts {
				w.endBeat(part, held[i], *asks[i].Beat, rounds[i].Checkpoint, rounds[i].Err)
			}
		}
		for _, round := range rounds {
			if round.Err != nil {
				continue // the next round tries again; the consumer logs Redis trouble
			}
			w.act(ctx, round, now)
		}
	}
}

// popCommands applies part's coordinator commands, when its consumer
// never waits on its lists (under load): within a maintenance tick. While
// it waits on them (idle) its BLPOP takes them at once: popping here too
// would be a round trip per tick for nothing.
func (w *Worker) popCommands(ctx context.Context, part int) {
	w.mu.RLock()
	listening := w.pools[part].listening.Load()
	w.mu.RUnlock()
	for range 10 {
		if listening {
			return
		}
		raw, ok, err := w.pool.PopCommand(ctx, part)
		if err != nil || !ok {
			return
		}
		w.apply(ctx, part, raw)
	}
}

// act returns the expired leases and promotes the due delayed jobs that a
// round found on a partition's queues.
func (w *Worker) act(ctx context.Context, round queue.MaintenanceRound, now time.Time) {
	for _, due := range round.Due {
		if due.Empty() {
			continue
		}
		back, died, _, err := w.pool.Maintain(ctx, due, w.cfg.deadLimits(), w.attemptsOf, now)
		if back > 0 {
			w.count("reaped", "", back)
			w.log.Warn("expired leases returned to ready", "queue", due.Queue.String(), "jobs", back)
		}
		if died > 0 {
			w.count("dead", "", died)
			w.log.Warn("expired leases spent the last attempt of jobs: dead (their worker died or stopped running them)", "queue", due.Queue.String(), "jobs", died)
		}
		if err != nil {
			return // Redis trouble: the next round
		}
	}
}

// attemptsOf is the most attempts of the job whose envelope this is, as
// execute reads it (the envelope's, the type's default, Config's): the
// reaper kills a job whose reap spends the last. An envelope that cannot
// be read gets Config's (it dies at its first run anyway).
func (w *Worker) attemptsOf(envelope string) int {
	j, err := job.Decode([]byte(envelope))
	if err != nil {
		return w.cfg.MaxAttempts
	}
	w.mu.RLock()
	d := w.handlers[j.Type].defaults
	w.mu.RUnlock()
	return firstPositive(j.MaxAttempts, d.maxAttempts, w.cfg.MaxAttempts)
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
