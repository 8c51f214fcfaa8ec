package worker

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/limits"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
)

// limit is the execution rate limit of a resource key (Consul KV
// sluice/<stage>/limits/<resource>); the type and its parser live in
// internal/limits, shared with the admin API, which writes what the
// workers read.
type limit = limits.Limit

// resourceKey is what a job's limit is looked up by: its resource, else its
// tenant, else its type.
func resourceKey(j *job.Job) string {
	switch {
	case j.Resource != "":
		return j.Resource
	case j.Tenant != "":
		return j.Tenant
	}
	return j.Type
}

// limiter holds jobs to the execution rate limits of their resource keys,
// followed live from Consul. The schedule of each resource is in Redis
// (queue.Reserve), shared by every worker and partition; this side waits
// for slots and brings throttled jobs back from delayed on time.
type limiter struct {
	w      *Worker
	consul *consulapi.Client // nil: no limits
	prefix string            // sluice/<stage>/limits/
	// pool has Redis connections of the limiter's own. In the worker's
	// pool, idle consumers' BLPOPs hold connections for up to a second,
	// and a start or its record could queue behind them: a record that
	// comes late lets the next start crowd a window.
	pool redisSide

	mu     sync.RWMutex
	limits map[string]limit // by resource key
	known  chan struct{}    // closed once the limits have been read

	promoter *promoter
	m        limitMetrics
	records  sync.WaitGroup // start times on their way to Redis
}

func newLimiter(w *Worker, poolCfg queue.PoolConfig) (*limiter, error) {
	l := &limiter{w: w, pool: w.pool, limits: map[string]limit{}, known: make(chan struct{}), m: newLimitMetrics(w.m.reg)}
	l.promoter = newPromoter(l)
	if w.cfg.ConsulAddr == "" {
		close(l.known)
		return l, nil
	}
	prefix, err := consul.Key(w.cfg.Stage, "limits")
	if err != nil {
		return nil, fmt.Errorf("worker: rate limits: %w", err)
	}
	l.prefix = prefix + "/"
	if l.consul, err = w.cfg.Config.Client("worker"); err != nil {
		return nil, err
	}
	if l.pool, err = openRedis(poolCfg); err != nil {
		return nil, err
	}
	return l, nil
}

// close waits for the start records still on their way, then closes the
// limiter's connections.
func (l *limiter) close() {
	l.records.Wait()
	if l.pool != l.w.pool {
		l.pool.Close()
	}
}

// run follows the limits in Consul and promotes throttled jobs on time,
// until ctx ends.
func (l *limiter) run(ctx context.Context) {
	log := l.w.log
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.promoter.run(ctx) }()
	defer wg.Wait()
	if l.consul == nil {
		log.Warn("no Consul address: execution rate limits are off, every job runs unlimited")
		return
	}
	prefix := l.prefix
	go func() {
		// Never unlimited for want of an answer: jobs wait meanwhile.
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
			log.Warn("no execution rate limits read from Consul yet; jobs wait until they are", "prefix", prefix, "consul", l.w.cfg.ConsulAddr)
		case <-l.known:
		case <-ctx.Done():
		}
	}()
	consul.WatchPrefix(ctx, l.consul, prefix, consul.WatchOptions{Log: log}, func(values map[string][]byte) {
		l.apply(values, log.With("prefix", prefix))
	})
}

// apply takes the limits Consul holds now. A value that does not parse
// keeps the limit in force for its key: a typo must not lift a limit.
func (l *limiter) apply(values map[string][]byte, log *slog.Logger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := make(map[string]limit, len(values))
	for key, v := range values {
		lim, err := limits.ParseLimit(v)
		if err != nil {
			old, had := l.limits[key]
			if had {
				next[key] = old
			}
			log.Error("ignoring an invalid execution limit; the last one stays in force", "resource", key, "err", err, "in_force", limitString(old, had))
			continue
		}
		next[key] = lim
	}
	for key, old := range l.limits {
		if lim, ok := next[key]; !ok || lim != old {
			log.Info("execution limit changed", "resource", key, "from", old.String(), "to", limitString(lim, ok))
		}
		if _, ok := next[key]; !ok {
			l.m.forget(key)
		}
	}
	for key, lim := range next {
		if _, had := l.limits[key]; !had {
			log.Info("execution limit set", "resource", key, "limit", lim.String())
		}
		l.m.limit.WithLabelValues(key).Set(lim.PerSecond)
	}
	l.limits = next
	select {
	case <-l.known:
	default:
		close(l.known)
	}
}

func limitString(l limit, ok bool) string {
	if !ok {
		return "unlimited"
	}
	return l.String()
}

// limitOf is the limit of a resource key, waiting for the first read of
// the limits if need be.
func (l *limiter) limitOf(ctx context.Context, key string) (limit, bool, error) {
	select {
	case <-l.known:
	case <-ctx.Done():
		return limit{}, false, ctx.Err()
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	lim, ok := l.limits[key]
	return lim, ok, nil
}

// admit holds a job to its resource key's limit: the run's step after the
// idempotency gate. It passes the job once it may start, its handler
// wrapped to record when it starts, or sets it aside: deferred to its slot
// in delayed (settle writes that), or left when the worker is stopping.
//
// A job whose slot is within RateLimitLead waits for it here; a later one
// goes into delayed until RateLimitLead before its slot, recorded in Redis,
// and coming back it finds that slot: throttled once. At its slot the
// window log has the last word: if jobs before it started late, it waits
// until its start leaves every one-second window within the limit; if that
// would take more than maxLogWait, it reserves a later slot instead.
func (c *consumer) admit(r *jobRun) settlement {
	w, l, ctx, j := c.w, c.w.limits, r.ctx, r.j
	key := resourceKey(j)
	lim, limited, err := l.limitOf(ctx, key)
	if err != nil {
		return settlement{end: endLeft} // stopping: the job is handed back
	}
	if !limited {
		l.m.granted.WithLabelValues("other").Inc()
		return passed
	}
	cfg, id := w.cfg, r.h.claimed.ID
	var notBefore time.Time
	throttles := 0
	for {
		now := cfg.Now()
		// A Redis that cannot write now (MISCONF, ...) is waited out
		// here: the deferral could not be written either.
		var slot queue.Slot
		err := c.untilRedisAnswers(ctx, "reserving a rate-limit slot", func(redisSide) (err error) {
			slot, err = l.pool.Reserve(ctx, queue.Reservation{
				Resource: key, Job: id, Limit: lim.String(),
				Interval: slotInterval(lim, cfg.RateLimitMargin), Burst: lim.EffectiveBurst(),
				Hold: cfg.RateLimitLead, NotBefore: notBefore, Throttles: throttles,
			}, now)
			return err
		})
		if err != nil {
			// No slot can be known: look again later, without
			// spending an attempt, rather than run unlimited.
			c.log.Warn("reserving a rate-limit slot failed; the job waits", "job", id, "resource", key, "err", err)
			return deferred(now.Add(cfg.Backoff), time.Time{})
		}
		if !slot.Recorded {
			l.m.delay.WithLabelValues(key).Observe(max(slot.At.Sub(now), 0).Seconds())
		}
		if slot.Deferred {
			if slot.Throttles > throttles {
				w.count("throttled", j.Type, 1)
			}
			return deferred(slot.At.Add(-cfg.RateLimitLead), now)
		}
		if sleepUntil(ctx, cfg.Now, slot.At) != nil {
			return settlement{end: endLeft}
		}
		member, wait, err := l.admitStart(ctx, key, id, lim)
		if err != nil {
			c.log.Warn("checking a rate-limited start failed; the job waits", "job", id, "resource", key, "err", err)
			return deferred(cfg.Now().Add(cfg.Backoff), time.Time{})
		}
		if wait > 0 {
			// Held back long: starts before it ran late. Its slot is
			// spent; it takes one after the log's earliest time.
			l.m.rereserved.WithLabelValues(key).Inc()
			notBefore, throttles = cfg.Now().Add(wait), slot.Throttles
			continue
		}
		l.m.granted.WithLabelValues(key).Inc()
		l.m.throttles.WithLabelValues(key).Observe(float64(slot.Throttles))
		r.handler = l.recordStart(key, member, slot, r.handler)
		return passed
	}
}

// maxLogWait is the longest a job waits in process for the window log; a
// longer wait goes back through a reservation (and delayed), so that a
// backlog of late jobs does not hold every worker slot.
const maxLogWait = time.Second

// admitStart asks the window log for a start now, waiting up to maxLogWait
// for it. It returns the start's name in the log, or how much longer the
// job would have to wait.
func (l *limiter) admitStart(ctx context.Context, key, id string, lim limit) (member string, wait time.Duration, err error) {
	cfg := l.w.cfg
	deadline := cfg.Now().Add(maxLogWait)
	for {
		now := cfg.Now()
		member = id + ":" + strconv.FormatInt(now.UnixMicro(), 10)
		wait, err = l.pool.Admit(ctx, key, member, windowCap(lim), time.Second+startGuard(cfg.RateLimitMargin), now)
		if err != nil || wait == 0 {
			return member, 0, err
		}
		if now.Add(wait).After(deadline) {
			return "", wait, nil
		}
		if err := sleepUntil(ctx, cfg.Now, now.Add(wait)); err != nil {
			return "", 0, err
		}
	}
}

// startGuard lengthens the window the log checks, beyond one second, to
// cover the step from recording a start to its handler's first instruction
// (a goroutine can be preempted there). It takes a fifth of the margin,
// at most a millisecond: the rest of the margin is the slack that lets a
// schedule delayed by late starts catch up.
func startGuard(margin time.Duration) time.Duration { return min(margin/5, time.Millisecond) }

// windowCap is the most starts a limit allows in a one-second window.
func windowCap(l limit) int { return int(math.Ceil(l.PerSecond)) + l.EffectiveBurst() - 1 }

// recordStart wraps the handler of an admitted job: when it starts, the
// window log learns the actual start time (a stalled process can start a
// handler later than the log was told), and the job its throttles.
func (l *limiter) recordStart(key, member string, slot queue.Slot, next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, job *Job) ([]byte, error) {
		job.Throttles = slot.Throttles
		started := make(chan time.Time, 1)
		l.records.Add(1)
		go func() {
			defer l.records.Done()
			at := <-started
			l.m.lag.WithLabelValues(key).Observe(max(at.Sub(slot.At), 0).Seconds())
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := l.pool.Started(rctx, key, member, at); err != nil {
				l.w.log.Warn("recording a rate-limited start failed", "job", job.ID, "resource", key, "err", err)
			}
		}()
		// The clock is read last, as close to the handler as can be.
		started <- l.w.cfg.Now()
		return next.Handle(ctx, job)
	})
}

// slotInterval is the spacing of a limit's slots, stretched so that rate
// consecutive slots span one second plus margin: a job that starts up to
// margin late then still leaves every one-second window within the limit.
func slotInterval(l limit, margin time.Duration) time.Duration {
	us := math.Ceil(float64(time.Second+margin) / l.PerSecond / float64(time.Microsecond))
	return time.Duration(us) * time.Microsecond
}

// sleepUntil waits until the clock reads at, or ctx ends.
func sleepUntil(ctx context.Context, now func() time.Time, at time.Time) error {
	return retry.Sleep(ctx, at.Sub(now()))
}

// promoter brings throttled jobs back into ready when they are due: the
// maintainer's tick (Maintain, 500 ms) would bring them back up to a tick
// late, bunching their starts. It promotes each queue partition at the due
// times of the jobs this process deferred there. Should this process die, the
// maintainers of the others promote them at their tick; late, such jobs
// reserve again.
type promoter struct {
	l       *limiter
	mu      sync.Mutex
	due     dueHeap
	changed chan struct{} // cap 1: a new earliest due time
}

type dueJob struct {
	at time.Time
	q  queue.Queue
	id string
}

func newPromoter(l *limiter) *promoter { return &promoter{l: l, changed: make(chan struct{}, 1)} }

// at schedules the promotion of a job deferred until t.
func (p *promoter) at(q queue.Queue, t time.Time, id string) {
	p.mu.Lock()
	heap.Push(&p.due, dueJob{at: t, q: q, id: id})
	first := p.due[0].id == id
	p.mu.Unlock()
	if first {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

func (p *promoter) run(ctx context.Context) {
	w := p.l.w
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		p.mu.Lock()
		wait := time.Hour
		if len(p.due) > 0 {
			wait = p.due[0].at.Sub(w.cfg.Now())
		}
		p.mu.Unlock()
		t.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
			continue
		case <-t.C:
		}
		now := w.cfg.Now()
		queues := map[queue.Queue]bool{}
		p.mu.Lock()
		for len(p.due) > 0 && !p.due[0].at.After(now) {
			d := heap.Pop(&p.due).(dueJob)
			queues[d.q] = true
		}
		p.mu.Unlock()
		for q := range queues {
			for {
				n, err := p.l.pool.Promote(ctx, q, 500, now)
				if err != nil && ctx.Err() == nil {
					w.log.Warn("promoting throttled jobs failed; the maintainer will", "queue", q.String(), "err", err)
				}
				if err != nil || n < 500 {
					break
				}
			}
		}
	}
}

// dueHeap orders deferred jobs by due time.
type dueHeap []dueJob

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueJob)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// limitMetrics are the rate limits' metrics. Their resource label is a
// key with a configured limit, or "other": clients choose resource names.
type limitMetrics struct {
	throttles  *prometheus.HistogramVec // resource
	granted    *prometheus.CounterVec   // resource
	delay      *prometheus.HistogramVec // resource
	lag        *prometheus.HistogramVec // resource
	rereserved *prometheus.CounterVec   // resource
	limit      *prometheus.GaugeVec     // resource
}

func newLimitMetrics(reg *prometheus.Registry) limitMetrics {
	m := limitMetrics{
		throttles: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_worker_rate_limit_throttles",
			Help:    "Times a rate-limited job waited in delayed for its slot, observed as its attempt starts: 1 when it waited once.",
			Buckets: []float64{0, 1, 2, 3, 4, 5, 10},
		}, []string{"resource"}),
		granted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_worker_rate_limit_granted_total",
			Help: "Jobs started, by resource key with a configured limit (other: the rest, unlimited); its rate is the granted rate.",
		}, []string{"resource"}),
		delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_worker_rate_limit_delay_seconds",
			Help:    "How far ahead of its reservation a job's slot was: 0 when it could start at once.",
			Buckets: []float64{0, .001, .01, .1, .5, 1, 5, 10, 60, 300, 1800, 3600},
		}, []string{"resource"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_worker_rate_limit_start_lag_seconds",
			Help:    "How long after its slot a rate-limited job's handler started: the promotion and claim (when late), a busy worker, starts before it that ran late.",
			Buckets: []float64{.0001, .0005, .001, .002, .005, .01, .02, .05, .1, .5, 1, 5},
		}, []string{"resource"}),
		rereserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_worker_rate_limit_rereserved_total",
			Help: "Jobs whose start the window log would have held back over a second (starts before them ran late): they reserved a later slot, one more throttle.",
		}, []string{"resource"}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_worker_rate_limit_per_second",
			Help: "The execution limit in force, starts per second, by resource key.",
		}, []string{"resource"}),
	}
	reg.MustRegister(m.throttles, m.granted, m.delay, m.lag, m.rereserved, m.limit)
	return m
}

// forget drops the series of a resource whose limit was removed: its jobs
// count as other from now on.
func (m limitMetrics) forget(key string) {
	m.throttles.DeleteLabelValues(key)
	m.granted.DeleteLabelValues(key)
	m.delay.DeleteLabelValues(key)
	m.lag.DeleteLabelValues(key)
	m.rereserved.DeleteLabelValues(key)
	m.limit.DeleteLabelValues(key)
}
