package scenario

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/worker"
)

// ScalingConfig is the seed's scaling scenario (Channel.io's): Jobs jobs of
// JobTime each, spread evenly over Partitions partitions and all in Redis
// before the worker starts; Base workers per partition. Fixed keeps them
// there: Partitions × Base workers in all, which is the "8 fixed workers"
// run. Dynamic runs a coordinator that scales each partition on its PWQD
// every Every, up to MaxFactor × Base.
type ScalingConfig struct {
	RedisAddr, ConsulAddr string
	// Stage names the scenario's keys; use a fresh Redis per run (job ids
	// repeat across runs).
	Stage      string
	Partitions int
	Jobs       int
	JobTime    time.Duration
	Base       int
	MaxFactor  int
	Dynamic    bool
	// Every is the scaling cycle; Threshold, Cycles and HalfLife the
	// scaler's other parameters.
	Every     time.Duration
	Threshold float64
	Cycles    int
	HalfLife  time.Duration
	// Sample is how often the trace records each partition's workers and
	// ready depth.
	Sample time.Duration
	Log    *slog.Logger
}

// FullScaling and ScaledScaling are the two sizes of the scenario: 100k
// jobs of 120 ms over 4 partitions, base 2 per partition, at most 8x, with
// the coordinator's default 5 s cycles (fixed: 25 min by construction;
// ideal with 64 workers: 187.5 s); and 10k jobs with 1 s cycles (fixed
// 150 s, ideal 18.75 s).
var (
	FullScaling = ScalingConfig{
		Stage: "scaling", Partitions: 4, Jobs: 100000, JobTime: 120 * time.Millisecond, Base: 2, MaxFactor: 8,
		Dynamic: true, Every: 5 * time.Second, Threshold: 100, Cycles: 3, HalfLife: 2 * time.Minute, Sample: time.Second,
	}
	ScaledScaling = ScalingConfig{
		Stage: "scaling", Partitions: 4, Jobs: 10000, JobTime: 120 * time.Millisecond, Base: 2, MaxFactor: 8,
		Dynamic: true, Every: time.Second, Threshold: 100, Cycles: 3, HalfLife: 2 * time.Minute, Sample: 250 * time.Millisecond,
	}
)

// Fixed is the time Partitions × Base workers take by construction.
func (c ScalingConfig) Fixed() time.Duration {
	return time.Duration(int64(c.Jobs) * int64(c.JobTime) / int64(c.Partitions*c.Base))
}

// Ideal is the time Partitions × Base × MaxFactor workers take from the
// first job, with no ramp.
func (c ScalingConfig) Ideal() time.Duration {
	return time.Duration(int64(c.Jobs) * int64(c.JobTime) / int64(c.Partitions*c.Base*c.MaxFactor))
}

// ScalingSample is the state of every partition at a point of the run.
type ScalingSample struct {
	At      time.Duration // from the worker's start
	Workers []int         // pool size per partition
	Ready   []int64       // ready depth per partition
}

// ScalingDecision is a command the coordinator logged.
type ScalingDecision struct {
	At        time.Duration
	Partition int
	Type      string
	Workers   int
	Reason    string
}

// ScalingReport is what a scaling run measured, from the worker's start.
type ScalingReport struct {
	Config ScalingConfig
	Jobs   int
	// Elapsed is until the last handler returned.
	Elapsed time.Duration
	// AtMax is when every partition first ran the max (0: never).
	AtMax time.Duration
	// Ran is how many jobs ran; RanTwice how many more than once; Done
	// what Redis counted done.
	Ran, RanTwice, Done int
	Decisions           []ScalingDecision
	Trace               []ScalingSample
}

// Ratio is Elapsed over the ideal time.
func (r ScalingReport) Ratio() float64 { return r.Elapsed.Seconds() / r.Config.Ideal().Seconds() }

func (r ScalingReport) String() string {
	mode := "fixed"
	if r.Config.Dynamic {
		mode = fmt.Sprintf("dynamic (every %s, threshold %g, %d cycles, max %dx)", r.Config.Every, r.Config.Threshold, r.Config.Cycles, r.Config.MaxFactor)
	}
	ups, downs := 0, 0
	for _, d := range r.Decisions {
		if d.Type == queue.ScaleUp {
			ups++
		} else {
			downs++
		}
	}
	atMax := "never at the max"
	if r.AtMax > 0 {
		atMax = "all partitions at the max after " + r.AtMax.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%s: %d jobs of %s over %d partitions, base %d: %s (%.2f min); ideal %s, ratio %.3f; fixed by construction %s (%.1f min); "+
		"%s; %d SCALE_UP, %d SCALE_DOWN; ran %d (twice %d), done %d",
		mode, r.Jobs, r.Config.JobTime, r.Config.Partitions, r.Config.Base, r.Elapsed.Round(time.Millisecond), r.Elapsed.Minutes(),
		r.Config.Ideal(), r.Ratio(), r.Config.Fixed(), r.Config.Fixed().Minutes(), atMax, ups, downs, r.Ran, r.RanTwice, r.Done)
}

// DecisionLog lists the decisions, one a line.
func (r ScalingReport) DecisionLog() string {
	var b strings.Builder
	for _, d := range r.Decisions {
		fmt.Fprintf(&b, "%8s  partition %d  %-10s -> %2d  %s\n", d.At.Round(100*time.Millisecond), d.Partition, d.Type, d.Workers, d.Reason)
	}
	return b.String()
}

// ScalingGroup is the name of group g of partition part: the first name
// "scaling-p<part>-<n>" that hashes to part.
func ScalingGroup(layout queue.Keyspace, part, g int) string {
	found := 0
	for n := 0; ; n++ {
		name := "scaling-p" + strconv.Itoa(part) + "-" + strconv.Itoa(n)
		if layout.PartitionOf(name) != part {
			continue
		}
		if found == g {
			return name
		}
		found++
	}
}

// scalingGroups is how many groups share a partition's jobs.
const scalingGroups = 8

// RunScaling puts the jobs in Redis as the relay would, starts the
// coordinator (Dynamic) and then a worker with Base workers per partition,
// samples every partition until every job ran and Redis counts it done,
// and reports.
func RunScaling(ctx context.Context, cfg ScalingConfig) (ScalingReport, error) {
	if cfg.Partitions < 1 || cfg.Jobs < 1 || cfg.Base < 1 || cfg.MaxFactor < 1 || cfg.JobTime <= 0 {
		return ScalingReport{}, errors.New("loadtest: scaling needs partitions, jobs, a base, a max factor and a job time")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Sample <= 0 {
		cfg.Sample = time.Second
	}
	layout := queue.Keyspace{Stage: cfg.Stage, Partitions: cfg.Partitions}
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: cfg.RedisAddr})
	if err != nil {
		return ScalingReport{}, err
	}
	defer pool.Close()
	if err := pool.LoadScripts(ctx); err != nil {
		return ScalingReport{}, err
	}
	// As a relay does: the coordinator reads the registered topics.
	if err := pool.RegisterTopics(ctx, []string{scalingTopic}, time.Now()); err != nil {
		return ScalingReport{}, err
	}
	if err := enqueueScaling(ctx, pool, cfg); err != nil {
		return ScalingReport{}, err
	}
	rep := ScalingReport{Config: cfg, Jobs: cfg.Jobs}
	var start atomic.Pointer[time.Time]
	since := func() time.Duration {
		if s := start.Load(); s != nil {
			return time.Since(*s)
		}
		return 0
	}

	runCtx, stop := context.WithCancel(ctx)
	var parts sync.WaitGroup
	defer func() { stop(); parts.Wait() }()
	rec := &decisionRecorder{since: since}
	if cfg.Dynamic {
		ccfg := coordinator.DefaultConfig()
		ccfg.Stage, ccfg.Partitions, ccfg.RedisAddr, ccfg.ConsulAddr = cfg.Stage, cfg.Partitions, cfg.RedisAddr, cfg.ConsulAddr
		ccfg.LockDelay = 0
		ccfg.ScaleEvery = cfg.Every
		ccfg.Scaling = coordinator.Params{Threshold: cfg.Threshold, Cycles: cfg.Cycles, Base: cfg.Base, MaxFactor: cfg.MaxFactor, HalfLife: cfg.HalfLife}
		co, err := coordinator.New(ccfg, slog.New(teeHandler{rec, cfg.Log.Handler()}))
		if err != nil {
			return ScalingReport{}, err
		}
		parts.Go(func() {
			defer co.Close()
			if err := co.Run(runCtx); err != nil {
				cfg.Log.Error("the coordinator stopped", "err", err)
			}
		})
		// The worker starts once the coordinator leads: the ramp is
		// measured from the first job, not from an election.
		for !co.Holds() {
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ScalingReport{}, ctx.Err()
			}
		}
	}

	wcfg := worker.DefaultConfig()
	wcfg.Topics = worker.TopicWeights{{Topic: scalingTopic, Weight: 1}}
	wcfg.Stage, wcfg.Partitions, wcfg.RedisAddr, wcfg.Workers = cfg.Stage, cfg.Partitions, cfg.RedisAddr, cfg.Base
	wcfg.ConsulAddr = cfg.ConsulAddr // as deployed: the worker follows the (absent) rate limits
	w, err := worker.New(wcfg, cfg.Log)
	if err != nil {
		return ScalingReport{}, err
	}
	var (
		mu      sync.Mutex
		runs    = make(map[string]int, cfg.Jobs)
		lastEnd time.Duration
		all     = make(chan struct{})
	)
	w.Handle("scaling", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		t := time.NewTimer(cfg.JobTime)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		end := since()
		mu.Lock()
		defer mu.Unlock()
		runs[j.ID]++
		lastEnd = max(lastEnd, end)
		if len(runs) == cfg.Jobs && runs[j.ID] == 1 {
			close(all)
		}
		return nil, nil
	}))
	workerDone := make(chan error, 1)
	now := time.Now()
	start.Store(&now)
	go func() { workerDone <- w.Run(runCtx) }()

	// The trace: every Sample, each partition's pool and ready depth.
	sample := func() {
		s := ScalingSample{At: since(), Workers: make([]int, cfg.Partitions), Ready: make([]int64, cfg.Partitions)}
		for p := range cfg.Partitions {
			s.Workers[p] = w.Workers(p)
			if l, err := pool.Load(ctx, p, []string{scalingTopic}, time.Hour); err == nil {
				s.Ready[p] = l.Ready
			}
		}
		rep.Trace = append(rep.Trace, s)
		if rep.AtMax == 0 && slicesAll(s.Workers, cfg.Base*cfg.MaxFactor) {
			rep.AtMax = s.At
		}
	}
	tick := time.NewTicker(cfg.Sample)
	defer tick.Stop()
	sample()
wait:
	for {
		select {
		case <-all:
			break wait
		case <-tick.C:
			sample()
		case err := <-workerDone:
			return rep, fmt.Errorf("the worker stopped: %v", err)
		case <-ctx.Done():
			stop()
			<-workerDone
			return rep, ctx.Err()
		}
	}
	sample()
	mu.Lock()
	rep.Elapsed = lastEnd
	for _, n := range runs {
		rep.Ran++
		if n > 1 {
			rep.RanTwice++
		}
	}
	mu.Unlock()
	// Every ack reaches Redis within moments of its handler's return.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if rep.Done, err = doneCount(ctx, pool, layout, scalingTopic); err != nil || rep.Done >= cfg.Jobs {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	stop()
	if werr := <-workerDone; err == nil {
		err = werr
	}
	rep.Decisions = rec.list()
	return rep, err
}

func slicesAll(s []int, v int) bool {
	for _, x := range s {
		if x != v {
			return false
		}
	}
	return len(s) > 0
}

// enqueueScaling puts job i in partition i % Partitions, in one of its
// groups, as the relay would.
func enqueueScaling(ctx context.Context, pool *queue.Pool, cfg ScalingConfig) error {
	layout := pool.Keyspace()
	groups := make([][]string, cfg.Partitions)
	for p := range groups {
		for g := range scalingGroups {
			groups[p] = append(groups[p], ScalingGroup(layout, p, g))
		}
	}
	batch := newBatchEnqueuer(ctx, pool, "scenario", 1000)
	for i := range cfg.Jobs {
		p := i % cfg.Partitions
		group := groups[p][(i/cfg.Partitions)%scalingGroups]
		id := fmt.Sprintf("scaling-%07d", i)
		env := (&job.Job{ID: id, Type: "scaling", Group: group, Topic: scalingTopic, EnqueuedAt: batch.now}).AppendJSON(nil)
		if err := batch.add(queue.Item{ID: id, Group: group, Topic: scalingTopic, Weight: 1, Envelope: env}); err != nil {
			return err
		}
	}
	return batch.flush()
}

// decisionRecorder keeps the coordinator's "scaling decision" log records.
type decisionRecorder struct {
	since func() time.Duration
	mu    sync.Mutex
	got   []ScalingDecision
}

func (r *decisionRecorder) list() []ScalingDecision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ScalingDecision(nil), r.got...)
}

// teeHandler hands records to the recorder and to the scenario's log.
type teeHandler struct {
	rec  *decisionRecorder
	next slog.Handler
}

func (h teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "scaling decision" {
		d := ScalingDecision{At: h.rec.since()}
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "partition":
				d.Partition = int(a.Value.Int64())
			case "type":
				d.Type = a.Value.String()
			case "workers":
				d.Workers = int(a.Value.Int64())
			case "reason":
				d.Reason = a.Value.String()
			}
			return true
		})
		h.rec.mu.Lock()
		h.rec.got = append(h.rec.got, d)
		h.rec.mu.Unlock()
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return attrsHandler{h, as}
}

func (h teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{h.rec, h.next.WithGroup(name)}
}

// attrsHandler keeps the attributes a logger was made With, so that the
// recorder sees the partition of a scaler's records.
type attrsHandler struct {
	teeHandler
	attrs []slog.Attr
}

func (h attrsHandler) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	return h.teeHandler.Handle(ctx, r)
}

func (h attrsHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return attrsHandler{h.teeHandler, append(append([]slog.Attr(nil), h.attrs...), as...)}
}

// scalingTopic is the topic the scaling scenario's jobs are queued on and
// its worker serves.
const scalingTopic = "scaling"
