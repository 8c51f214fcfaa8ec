package scenario

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A Rival is another job queue run beside sluice on the same machine and
// the same Redis, end to end: its client enqueueing while its server runs
// the jobs (asynq, in loadtest/asynqbench, which keeps asynq out of
// sluice's module).
type Rival interface {
	// Name is the rival and its version, for the report.
	Name() string
	// Start readies the rival's server against the Redis at addr (not
	// timed).
	Start(ctx context.Context, addr string) error
	// Run enqueues jobs no-op jobs with payload from conns goroutines
	// while the server runs them, and returns once every one has run, and
	// when the last enqueue returned. It is timed from its call.
	Run(ctx context.Context, jobs, conns int, payload []byte) (lastEnqueue time.Time, err error)
	// Stop ends the server and its connections (not timed).
	Stop()
}

// CompareConfig is a comparison with a rival: the same jobs, payload and
// machine, end to end.
type CompareConfig struct {
	// Jobs per system and phase (default 100,000).
	Jobs int
	// Conns is the rival's enqueueing goroutines and the connections of
	// sluice's single-job POSTs (default 64); BatchConns those of the
	// batched POSTs (default 16, as the throughput scenario's).
	Conns, BatchConns int
	// Batch is the jobs per batched POST (default 100).
	Batch int
	// PayloadBytes is each job's payload (default 100).
	PayloadBytes int
	// Groups spreads sluice's jobs over groups; 0: none, each job on its
	// partition's shared lane, as a rival's tasks share one queue.
	Groups int
	// Run prefixes sluice's sampled job ids; default: "cmp" and the time.
	Run string
	// DoneTimeout bounds each phase's wait for its last job (default 5
	// minutes).
	DoneTimeout time.Duration
}

// Compare runs the rival end to end, then sluice end to end through the
// gate with single-job POSTs, then with batched POSTs, the same number of
// jobs each, one after the other on this machine, and reports the rates
// and their ratios against the targets of issue 17 (single ≥ 2x the
// rival, batched ≥ 10x). Every phase reports the CPU per job of the
// machine's processes, as the scenarios do; in the rival's phase "this
// generator" is the rival's client and server, and the sluice processes
// are idle.
func (r *Runner) Compare(ctx context.Context, rival Rival, cfg CompareConfig) (*Report, error) {
	cfg.Jobs, cfg.Conns, cfg.BatchConns = or(cfg.Jobs, 100000), or(cfg.Conns, 64), or(cfg.BatchConns, 16)
	cfg.Batch, cfg.PayloadBytes, cfg.DoneTimeout = or(cfg.Batch, 100), or(cfg.PayloadBytes, 100), or(cfg.DoneTimeout, 5*time.Minute)
	if cfg.Run == "" {
		cfg.Run = "cmp" + fmt.Sprint(time.Now().UnixMilli())
	}
	payload := PaddedPayload(cfg.PayloadBytes)
	rep := &Report{Scenario: "compare-" + rival.Name(), Started: time.Now(), Machine: ThisMachine(), Endpoints: r.ep, Processes: r.t.procs,
		Params: map[string]any{"run": cfg.Run, "rival": rival.Name(), "jobs": cfg.Jobs, "conns": cfg.Conns, "batch_conns": cfg.BatchConns,
			"batch": cfg.Batch, "payload_bytes": len(payload), "groups": cfg.Groups, "redis": r.ep.Redis}}
	defer func() { rep.Elapsed = round3(time.Since(rep.Started).Seconds()) }()
	r.memoryCheck(ctx, rep, cfg.Jobs)

	r.progress.Printf("%s: %d jobs, its client enqueueing from %d goroutines while its server runs them, on the Redis at %s\n",
		rival.Name(), cfg.Jobs, cfg.Conns, r.ep.Redis)
	pr, err := r.runRival(ctx, rival, cfg, payload)
	rep.Phases = append(rep.Phases, pr)
	if err != nil {
		return rep, err
	}
	work := func(phase string) *Workload {
		return &Workload{Run: cfg.Run + "-" + phase, Type: "noop", Payload: payload, Groups: cfg.Groups}
	}
	single := r.load("single", work("s"))
	single.Conns, single.Jobs, single.Batch, single.SampleEvery = cfg.Conns, cfg.Jobs, 1, singleSampleEvery
	ps, err := r.Run(ctx, Phase{Name: "single", Streams: []*Load{single}, WaitDone: true, DoneTimeout: cfg.DoneTimeout})
	rep.Phases = append(rep.Phases, ps)
	if err != nil {
		return rep, err
	}
	batch := r.load("batch", work("b"))
	batch.Conns, batch.Jobs, batch.Batch = cfg.BatchConns, cfg.Jobs, cfg.Batch
	pb, err := r.Run(ctx, Phase{Name: "batch", Streams: []*Load{batch}, WaitDone: true, DoneTimeout: cfg.DoneTimeout})
	rep.Phases = append(rep.Phases, pb)
	if err != nil {
		return rep, err
	}
	rep.compareVerdicts(rival.Name(), pr, ps, pb, cfg.Batch)
	return rep, nil
}

// runRival times the rival's run and the machine's CPU during it.
func (r *Runner) runRival(ctx context.Context, rival Rival, cfg CompareConfig, payload []byte) (PhaseResult, error) {
	res := PhaseResult{Name: rival.Name()}
	if err := rival.Start(ctx, r.ep.Redis); err != nil {
		return res, fmt.Errorf("starting %s: %w", rival.Name(), err)
	}
	defer rival.Stop()
	cpu0 := r.t.cpuMark(ctx)
	start := time.Now()
	res.Started = start
	runCtx, cancel := context.WithTimeout(ctx, cfg.DoneTimeout)
	defer cancel()
	lastEnqueue, err := rival.Run(runCtx, cfg.Jobs, cfg.Conns, payload)
	elapsed := time.Since(start)
	cpu1 := r.t.cpuMark(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%s did not run %d jobs within %s", rival.Name(), cfg.Jobs, cfg.DoneTimeout)
		}
		res.Errors = append(res.Errors, err.Error())
		return res, err
	}
	res.Accepted, res.Completed, res.AllDone = cfg.Jobs, cfg.Jobs, true
	res.SendSeconds = round3(lastEnqueue.Sub(start).Seconds())
	res.DoneSeconds = round3(elapsed.Seconds())
	if res.SendSeconds > 0 {
		res.EnqueueRate = round3(float64(cfg.Jobs) / res.SendSeconds)
	}
	res.EndToEndRate = round3(float64(cfg.Jobs) / elapsed.Seconds())
	use := cpuUse(cpu0, cpu1, cfg.Jobs)
	// This process ran the rival's client and server: its line is the
	// rival's, named by the rival's first word ("asynq").
	for i := range use.Parts {
		if use.Parts[i].Name == "generator" {
			use.Parts[i].Name, use.Parts[i].Parts = strings.Fields(rival.Name() + " rival")[0], []string{"rival"}
		}
	}
	res.CPU = &use
	return res, nil
}

// compareVerdicts are the targets of issue 17 against the rival, end to
// end: single-job POSTs at least 2x its rate, batched ones at least 10x.
func (rep *Report) compareVerdicts(rival string, pr, ps, pb PhaseResult, batch int) {
	ratio := func(p PhaseResult) float64 {
		if pr.EndToEndRate <= 0 || !p.AllDone {
			return 0
		}
		return round3(p.EndToEndRate / pr.EndToEndRate)
	}
	rs, rb := ratio(ps), ratio(pb)
	rep.Ratios = map[string]float64{"single_over_rival": rs, "batch_over_rival": rb}
	rep.number("rival_jobs_per_second", pr.EndToEndRate)
	rep.number("single_jobs_per_second", ps.EndToEndRate)
	rep.number("batch_jobs_per_second", pb.EndToEndRate)
	if c := pr.CPU; c != nil && c.TotalMicrosPerJob > 0 {
		rep.number("rival_redis_cpu_us_per_job", c.RedisMicrosPerJob)
	}
	for _, p := range []PhaseResult{ps, pb} {
		if c := p.CPU; c != nil && c.TotalMicrosPerJob > 0 {
			rep.number(p.Name+"_redis_cpu_us_per_job", c.RedisMicrosPerJob)
		}
	}
	rep.verdict("single-job POSTs against "+rival+", end to end", "≥ 2x",
		fmt.Sprintf("%.2fx: %s jobs/s against %s", rs, thousands(int(ps.EndToEndRate)), thousands(int(pr.EndToEndRate))),
		ps.AllDone && missing(ps) == 0 && rs >= 2, "issue 17's target")
	rep.verdict(fmt.Sprintf("%d-job POSTs against %s, end to end", batch, rival), "≥ 10x",
		fmt.Sprintf("%.2fx: %s jobs/s against %s", rb, thousands(int(pb.EndToEndRate)), thousands(int(pr.EndToEndRate))),
		pb.AllDone && missing(pb) == 0 && rb >= 10, "issue 17's target")
}
