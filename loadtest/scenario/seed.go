package scenario

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/worker"
)

// SeedConfig is the rate-limited seed scenario (Channel.io's test): Groups
// groups of JobsPerGroup jobs, all in Redis before the worker starts; each
// group's jobs name a resource of its own, limited in Consul to Rate starts
// per second. The full scenario is 3 × 5,000 jobs at 10/s (ideal 500 s);
// the scaled one 3 × 1,000 at 100/s (ideal 10 s).
type SeedConfig struct {
	RedisAddr, ConsulAddr string
	// Stage names the scenario's Redis and Consul keys; use a fresh one
	// per run (or a fresh Redis): the scenario's job ids repeat.
	Stage        string
	Partitions   int
	Groups       int
	JobsPerGroup int
	Rate         float64
	Burst        int
	// Worker adjusts the worker's configuration, if set; the defaults are
	// worker.DefaultConfig's.
	Worker func(*worker.Config)
	Log    *slog.Logger
}

// FullSeed and ScaledSeed are the two sizes of the scenario.
var (
	FullSeed   = SeedConfig{Stage: "seed", Partitions: 8, Groups: 3, JobsPerGroup: 5000, Rate: 10, Burst: 1}
	ScaledSeed = SeedConfig{Stage: "seed", Partitions: 8, Groups: 3, JobsPerGroup: 1000, Rate: 100, Burst: 1}
)

// SeedReport is what a seed run measured, from the worker's start.
type SeedReport struct {
	Jobs int
	// Elapsed is until the last handler returned; Ideal is JobsPerGroup
	// at Rate.
	Elapsed, Ideal time.Duration
	// Throttles per job: how often each job waited in delayed for its
	// slot (worker.Job.Throttles of the run that succeeded).
	MeanThrottles float64
	MaxThrottles  int
	// Ran is how many jobs ran at least once; RanTwice how many ran more
	// than once. Done is what Redis counted done.
	Ran, RanTwice, Done int
	// PeakWindow is, per resource, the most handler starts in any
	// one-second window [t, t+1s).
	PeakWindow map[string]int
	// CombinedRate is Jobs / Elapsed; CombinedMin and CombinedMax the
	// fewest and most starts of all resources in a whole second of the
	// run, its first and last second left out.
	CombinedRate             float64
	CombinedMin, CombinedMax int
	// Rereserved is how many times the window log held a job back too long
	// (starts before it ran late), so that it reserved a later slot: one
	// more throttle each.
	Rereserved int
	// StartLag is the mean time from a job's slot to its handler's start
	// (the worker's sluice_worker_rate_limit_start_lag_seconds).
	StartLag time.Duration
	// CPU is this process's CPU time (user+system) during the run: the
	// worker, and the scenario's own bookkeeping.
	CPU time.Duration
	// Starts are the handler start times from the worker's start, by
	// resource, sorted.
	Starts map[string][]time.Duration
}

// Ratio is Elapsed / Ideal.
func (r SeedReport) Ratio() float64 { return r.Elapsed.Seconds() / r.Ideal.Seconds() }

func (r SeedReport) String() string {
	var peaks []string
	for _, res := range slices.Sorted(maps.Keys(r.PeakWindow)) {
		peaks = append(peaks, fmt.Sprintf("%s=%d", res, r.PeakWindow[res]))
	}
	return fmt.Sprintf("%d jobs in %s (ideal %s, ratio %.4f); throttles per job mean %.4f max %d; ran %d (twice %d), done %d; "+
		"peak starts in a 1s window %s; combined %.2f/s (whole seconds %d..%d); re-reserved %d; mean start lag %s; cpu %s",
		r.Jobs, r.Elapsed.Round(time.Millisecond), r.Ideal, r.Ratio(), r.MeanThrottles, r.MaxThrottles, r.Ran, r.RanTwice, r.Done,
		strings.Join(peaks, " "), r.CombinedRate, r.CombinedMin, r.CombinedMax, r.Rereserved, r.StartLag.Round(time.Microsecond), r.CPU.Round(time.Millisecond))
}

// SeedResource is the resource key of group g's jobs.
func SeedResource(g int) string { return "seed-r" + strconv.Itoa(g) }

// RunSeed sets the limits in Consul, puts the jobs in Redis as the relay
// would, runs a worker until every job ran and Redis counts it done, and
// reports. It removes its limits from Consul when done.
func RunSeed(ctx context.Context, cfg SeedConfig) (SeedReport, error) {
	if cfg.Groups < 1 || cfg.JobsPerGroup < 1 || cfg.Rate <= 0 {
		return SeedReport{}, errors.New("loadtest: seed needs groups, jobs and a rate")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	layout := queue.Keyspace{Stage: cfg.Stage, Partitions: cfg.Partitions}
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: cfg.RedisAddr})
	if err != nil {
		return SeedReport{}, err
	}
	defer pool.Close()
	if err := pool.LoadScripts(ctx); err != nil {
		return SeedReport{}, err
	}
	ccfg := consulapi.DefaultConfig()
	ccfg.Address = cfg.ConsulAddr
	cc, err := consulapi.NewClient(ccfg)
	if err != nil {
		return SeedReport{}, err
	}
	limit := fmt.Sprintf(`{"rate": %g, "burst": %d}`, cfg.Rate, max(cfg.Burst, 1))
	for g := range cfg.Groups {
		key, err := consul.Key(cfg.Stage, "limits", SeedResource(g))
		if err != nil {
			return SeedReport{}, err
		}
		if _, err := cc.KV().Put(&consulapi.KVPair{Key: key, Value: []byte(limit)}, nil); err != nil {
			return SeedReport{}, fmt.Errorf("setting the limit in consul: %w", err)
		}
		defer cc.KV().Delete(key, nil)
	}
	if err := enqueueSeed(ctx, pool, cfg); err != nil {
		return SeedReport{}, err
	}

	wcfg := worker.DefaultConfig()
	wcfg.Topics = worker.TopicWeights{{Topic: seedTopic, Weight: 1}}
	wcfg.Stage, wcfg.Partitions, wcfg.RedisAddr, wcfg.ConsulAddr = cfg.Stage, cfg.Partitions, cfg.RedisAddr, cfg.ConsulAddr
	if cfg.Worker != nil {
		cfg.Worker(&wcfg)
	}
	w, err := worker.New(wcfg, cfg.Log)
	if err != nil {
		return SeedReport{}, err
	}
	total := cfg.Groups * cfg.JobsPerGroup
	rec := &seedRecorder{runs: map[string]int{}, throttles: map[string]int{}, starts: map[string][]time.Duration{}, total: total, all: make(chan struct{})}
	var start time.Time
	w.Handle("seed", worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
		rec.started(j, time.Since(start))
		return nil, nil
	}))
	cpu0 := cpuTime()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start = time.Now()
	go func() { done <- w.Run(runCtx) }()
	select {
	case <-rec.all:
	case err := <-done:
		return SeedReport{}, fmt.Errorf("the worker stopped: %v", err)
	case <-ctx.Done():
		stop()
		<-done
		return SeedReport{}, ctx.Err()
	}
	elapsed := time.Since(start)
	// Every ack reaches Redis within moments of its handler's return.
	counted := 0
	for t := time.NewTicker(10 * time.Millisecond); ; <-t.C {
		if counted, err = doneCount(ctx, pool, layout, seedTopic); err != nil || counted >= total || ctx.Err() != nil || time.Since(start) > elapsed+30*time.Second {
			t.Stop()
			break
		}
	}
	stop()
	<-done
	rep := rec.report(cfg, elapsed)
	rep.Done = counted
	rep.CPU = cpuTime() - cpu0
	rep.Rereserved = int(counterSum(w, "sluice_worker_rate_limit_rereserved_total"))
	if n, sum := histogramSum(w, "sluice_worker_rate_limit_start_lag_seconds"); n > 0 {
		rep.StartLag = time.Duration(sum / float64(n) * float64(time.Second))
	}
	return rep, err
}

func enqueueSeed(ctx context.Context, pool *queue.Pool, cfg SeedConfig) error {
	batch := newBatchEnqueuer(ctx, pool, "seed", 500)
	// Interleaved, as three bulk submissions arriving together would be.
	for i := range cfg.JobsPerGroup {
		for g := range cfg.Groups {
			id, group := fmt.Sprintf("seed-%d-%06d", g, i), "seed-g"+strconv.Itoa(g)
			env := (&job.Job{ID: id, Type: "seed", Group: group, Resource: SeedResource(g), Topic: seedTopic, EnqueuedAt: batch.now}).AppendJSON(nil)
			if err := batch.add(queue.Item{ID: id, Group: group, Topic: seedTopic, Weight: 1, Envelope: env}); err != nil {
				return err
			}
		}
	}
	return batch.flush()
}

type seedRecorder struct {
	mu        sync.Mutex
	runs      map[string]int // job id -> handler runs
	throttles map[string]int
	starts    map[string][]time.Duration // resource -> start times
	total     int
	all       chan struct{} // closed when every job ran
}

func (r *seedRecorder) started(j *worker.Job, at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[j.ID]++
	r.throttles[j.ID] = j.Throttles
	r.starts[j.Resource] = append(r.starts[j.Resource], at)
	if len(r.runs) == r.total && r.runs[j.ID] == 1 {
		close(r.all)
	}
}

func (r *seedRecorder) report(cfg SeedConfig, elapsed time.Duration) SeedReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := SeedReport{
		Jobs: r.total, Elapsed: elapsed,
		Ideal:      time.Duration(float64(cfg.JobsPerGroup) / cfg.Rate * float64(time.Second)),
		PeakWindow: map[string]int{}, Starts: map[string][]time.Duration{},
		CombinedRate: float64(r.total) / elapsed.Seconds(),
	}
	sum := 0
	for id, n := range r.runs {
		rep.Ran++
		if n > 1 {
			rep.RanTwice++
		}
		sum += r.throttles[id]
		rep.MaxThrottles = max(rep.MaxThrottles, r.throttles[id])
	}
	rep.MeanThrottles = float64(sum) / float64(max(rep.Ran, 1))
	perSecond := make([]int, int(elapsed/time.Second)+1)
	for res, starts := range r.starts {
		s := slices.Clone(starts)
		slices.Sort(s)
		rep.Starts[res] = s
		rep.PeakWindow[res] = PeakWindow(s, time.Second)
		for _, at := range s {
			perSecond[int(at/time.Second)]++
		}
	}
	if len(perSecond) > 2 {
		whole := perSecond[1 : len(perSecond)-1]
		rep.CombinedMin, rep.CombinedMax = slices.Min(whole), slices.Max(whole)
	}
	return rep
}

// PeakWindow is the most of the sorted times in any window [t, t+w).
func PeakWindow(sorted []time.Duration, w time.Duration) int {
	peak, j := 0, 0
	for i := range sorted {
		for sorted[i]-sorted[j] >= w {
			j++
		}
		peak = max(peak, i-j+1)
	}
	return peak
}

// counterSum sums a counter of the worker's over its series.
func counterSum(w *worker.Worker, name string) float64 {
	mfs, _ := w.Registry().Gather()
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// FirstCrowdedWindow describes the first one-second window of the sorted
// starts holding more than limit of them, for a failure message.
func FirstCrowdedWindow(starts []time.Duration, limit int) string {
	for i := 0; i+limit < len(starts); i++ {
		if d := starts[i+limit] - starts[i]; d < time.Second {
			return fmt.Sprintf("starts %d (%s) and %d (%s) are %s apart", i, starts[i], i+limit, starts[i+limit], d)
		}
	}
	return "no crowded window"
}

// histogramSum sums a histogram of the worker's over its series.
func histogramSum(w *worker.Worker, name string) (count uint64, sum float64) {
	mfs, _ := w.Registry().Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				count += m.GetHistogram().GetSampleCount()
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return count, sum
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// seedTopic is the topic the seed scenario's jobs are queued on and its
// worker serves.
const seedTopic = "seed"
