package scenario

import (
	"context"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// SteadyConfig is the steady scenario (issue 34): open loops of
// single-job POSTs at shares of the single-POST maximum, where most
// deployments spend their days, each reporting CPU per job per part and
// enqueue-to-start and enqueue-to-done percentiles.
type SteadyConfig struct {
	// Max is the single-POST maximum in jobs/s; 0 measures it first, in
	// the same run: single-job POSTs in a closed loop for MaxDuration,
	// end to end (the throughput scenario's single phase).
	Max         float64
	MaxDuration time.Duration // default 10 s
	// Shares of Max to run, in order (default 1%, 10%, 25%, 50%).
	Shares []float64
	// Duration of each load (default 20 s: 1% of 17k jobs/s is 3,400
	// jobs, so a 10 ms /proc tick is 3 µs per job).
	Duration time.Duration
	// Conns are the open loops' connections (default 64, as the
	// throughput scenario's half phase: enough for 50%).
	Conns        int
	PayloadBytes int // default 100
	Groups       int // default 64, the throughput scenario's; -1: none
	Run          string
}

// A SteadyRival is another job queue run through the same open loops in
// the same run, on the same Redis (asynq, in loadtest/asynqbench).
type SteadyRival interface {
	Name() string
	// Start readies the rival's server against the Redis at addr.
	Start(ctx context.Context, addr string) error
	// OpenLoop enqueues rate jobs a second for d, each when due whatever
	// the enqueues before it took, and returns once every one has run,
	// with each job's enqueue-to-start and enqueue-to-done (its
	// handler's return) from its due time.
	OpenLoop(ctx context.Context, rate float64, d time.Duration, payload []byte) (RivalLoad, error)
	Stop()
}

// RivalLoad is what a rival's open loop measured.
type RivalLoad struct {
	Jobs            int
	ToStart, ToDone *Hist
}

// SteadyRow is one system at one load.
type SteadyRow struct {
	System string  `json:"system"`
	Share  float64 `json:"share_of_max"`
	Rate   float64 `json:"jobs_per_second"`
	Jobs   int     `json:"jobs"`
	// CPU per job by process, µs (the parts, kafka, redis; a rival's own
	// process), and Total: the system's processes and Redis, not the
	// generator (a rival's client runs in its process and is counted).
	CPU   map[string]float64 `json:"cpu_us_per_job"`
	Total float64            `json:"total_cpu_us_per_job"`
	// Cores is Total's CPU seconds per second.
	Cores float64 `json:"cores_busy"`
	// Enqueue-to-start and enqueue-to-done, ms. sluice's: the worker's
	// histograms (every job, interpolated in their buckets); a rival's:
	// exact, from each job's due time.
	StartP50 float64 `json:"start_p50_ms"`
	StartP99 float64 `json:"start_p99_ms"`
	DoneP50  float64 `json:"done_p50_ms"`
	DoneP99  float64 `json:"done_p99_ms"`
}

// steadyParts are the columns of the steady table, in the flow's order.
var steadyParts = []string{"gate", "kafka", "relay", "worker", "coordinator", "dev", "consul", "redis"}

// Steady runs the steady scenario: the maximum (unless given), then each
// share of it as an open loop of single-job POSTs, and with a rival the
// same open loop through it right after each of sluice's, so that each
// pair is measured under the same machine load.
func (r *Runner) Steady(ctx context.Context, cfg SteadyConfig, rival SteadyRival) (*Report, error) {
	cfg.MaxDuration, cfg.Duration = or(cfg.MaxDuration, 10*time.Second), or(cfg.Duration, 20*time.Second)
	cfg.Conns, cfg.PayloadBytes, cfg.Groups = or(cfg.Conns, 64), or(cfg.PayloadBytes, 100), or(cfg.Groups, 64)
	if len(cfg.Shares) == 0 {
		cfg.Shares = []float64{.01, .1, .25, .5}
	}
	if cfg.Run == "" {
		cfg.Run = "st" + fmt.Sprint(time.Now().UnixMilli())
	}
	groups := max(cfg.Groups, 0)
	payload := PaddedPayload(cfg.PayloadBytes)
	rep := &Report{Scenario: "steady", Started: time.Now(), Machine: ThisMachine(), Endpoints: r.ep, Processes: r.t.procs,
		Params: map[string]any{"run": cfg.Run, "duration": cfg.Duration.String(), "conns": cfg.Conns, "payload_bytes": len(payload), "groups": groups, "shares": cfg.Shares}}
	defer func() { rep.Elapsed = round3(time.Since(rep.Started).Seconds()) }()
	work := func(phase string) *Workload {
		return &Workload{Run: cfg.Run + "-" + phase, Type: "noop", Payload: payload, Groups: groups}
	}
	maxRate := cfg.Max
	if maxRate <= 0 {
		l := r.load("max", work("max"))
		l.Conns, l.Duration, l.Batch, l.SampleEvery = 64, cfg.MaxDuration, 1, singleSampleEvery
		ph, err := r.Run(ctx, Phase{Name: "max", Streams: []*Load{l}, WaitDone: true})
		rep.Phases = append(rep.Phases, ph)
		if err != nil {
			return rep, err
		}
		if !ph.AllDone || ph.EndToEndRate <= 0 {
			return rep, fmt.Errorf("measuring the single-POST maximum: %v", ph.Errors)
		}
		maxRate = ph.EndToEndRate
	}
	rep.number("single_max_jobs_per_second", maxRate)
	for i, share := range cfg.Shares {
		rate := math.Max(math.Round(maxRate*share), 10)
		name := fmt.Sprintf("%g%%", share*100)
		l := r.load(name, work(fmt.Sprintf("l%d", i)))
		// One job in 100 sampled, as the throughput scenario's single and
		// half phases: a sampled job's record costs Redis about 40% more
		// than a plain job, and CPU per job is what this measures; the
		// percentiles are the worker's, of every job.
		l.Conns, l.Duration, l.Batch, l.Rate, l.SampleEvery = cfg.Conns, cfg.Duration, 1, rate, singleSampleEvery
		ph, err := r.Run(ctx, Phase{Name: name, Streams: []*Load{l}, WaitDone: true})
		rep.Phases = append(rep.Phases, ph)
		if err != nil {
			return rep, err
		}
		rep.Steady = append(rep.Steady, sluiceRow(ph, share, rate))
		if rival == nil {
			continue
		}
		row, err := r.rivalLoad(ctx, rival, share, rate, cfg.Duration, payload)
		if err != nil {
			return rep, err
		}
		rep.Steady = append(rep.Steady, row)
	}
	rep.steadyVerdicts(rival)
	return rep, nil
}

// sluiceRow is a steady phase's row.
func sluiceRow(ph PhaseResult, share, rate float64) SteadyRow {
	row := SteadyRow{System: "sluice", Share: share, Rate: rate, Jobs: ph.Accepted, CPU: map[string]float64{},
		StartP50: ms3(ph.EnqueueToStart.Quantile(.5)), StartP99: ms3(ph.EnqueueToStart.Quantile(.99)),
		DoneP50: ms3(ph.EnqueueToDone.Quantile(.5)), DoneP99: ms3(ph.EnqueueToDone.Quantile(.99))}
	if c := ph.CPU; c != nil {
		for _, p := range c.Parts {
			if p.Name == "generator" {
				continue
			}
			row.CPU[p.Name] += p.MicrosPerJob
			if p.Name == "consul" { // the stack's, not the pipeline's: the rival's row has none
				continue
			}
			row.Total += p.MicrosPerJob
			row.Cores += p.CoresBusy
		}
		if len(c.Parts) == 0 { // processes unknown: sluice and Redis together
			row.Total = c.PipelineMicrosPerJob + c.RedisMicrosPerJob
			row.CPU["redis"] = c.RedisMicrosPerJob
		}
	}
	row.Total, row.Cores = round3(row.Total), round3(row.Cores)
	return row
}

// ms3 is s seconds in ms; 0 when unknown (NaN: no job observed), which
// JSON cannot carry.
func ms3(s float64) float64 {
	if math.IsNaN(s) {
		return 0
	}
	return round3(s * 1000)
}

// rivalLoad runs the rival's open loop and reads the machine's CPU around
// it: the rival's process (this one) and Redis.
func (r *Runner) rivalLoad(ctx context.Context, rival SteadyRival, share, rate float64, d time.Duration, payload []byte) (SteadyRow, error) {
	name := strings.Fields(rival.Name())[0]
	r.progress.Printf("%s: %g jobs/s for %s\n", rival.Name(), rate, d)
	// Its server runs only during its own loads: idle, asynq's workers
	// poll Redis (each every TaskCheckInterval), which would load sluice's.
	if err := rival.Start(ctx, r.ep.Redis); err != nil {
		return SteadyRow{}, fmt.Errorf("starting %s: %w", rival.Name(), err)
	}
	defer rival.Stop()
	cpu0 := r.t.cpuMark(ctx)
	res, err := rival.OpenLoop(ctx, rate, d, payload)
	cpu1 := r.t.cpuMark(ctx)
	if err != nil {
		return SteadyRow{}, fmt.Errorf("%s at %g jobs/s: %w", rival.Name(), rate, err)
	}
	use := cpuUse(cpu0, cpu1, res.Jobs)
	row := SteadyRow{System: name, Share: share, Rate: rate, Jobs: res.Jobs, CPU: map[string]float64{},
		StartP50: msOf(res.ToStart.Quantile(.5)), StartP99: msOf(res.ToStart.Quantile(.99)),
		DoneP50: msOf(res.ToDone.Quantile(.5)), DoneP99: msOf(res.ToDone.Quantile(.99))}
	row.CPU[name] = use.GeneratorMicrosPerJob
	row.CPU["redis"] = use.RedisMicrosPerJob
	row.Total = round3(use.GeneratorMicrosPerJob + use.RedisMicrosPerJob)
	if use.WallSeconds > 0 {
		row.Cores = round3((use.GeneratorSeconds + use.RedisSeconds) / use.WallSeconds)
	}
	// The sluice processes idle meanwhile: their use is the idle cost,
	// not the rival's, and is left out.
	return row, nil
}

func msOf(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

// steadyVerdicts are issue 34's targets: at 10% of the maximum, sluice's
// CPU per job at most the rival's and enqueue-to-start p50 under 10 ms
// and p99 under 50 ms; at 50%, enqueue-to-done p99 under 25 ms.
func (rep *Report) steadyVerdicts(rival SteadyRival) {
	for _, s := range rep.Steady {
		if s.System != "sluice" {
			continue
		}
		key := fmt.Sprintf("%g", s.Share*100)
		rep.number("steady_"+key+"_cpu_us_per_job", s.Total)
		switch s.Share {
		case .1:
			rep.verdict("enqueue-to-start at 10% of the maximum", "p50 < 10 ms, p99 < 50 ms",
				fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", s.StartP50, s.StartP99), s.StartP50 < 10 && s.StartP99 < 50, "issue 34")
			if rival == nil {
				continue
			}
			for _, o := range rep.Steady {
				if o.System != "sluice" && o.Share == s.Share && o.Total > 0 {
					ratio := round3(s.Total / o.Total)
					if rep.Ratios == nil {
						rep.Ratios = map[string]float64{}
					}
					rep.Ratios["steady_10_cpu_per_job_over_rival"] = ratio
					rep.verdict("CPU per job at 10% of the maximum against "+rival.Name(), "≤ 1x",
						fmt.Sprintf("%.2fx: %.1f µs against %.1f µs", ratio, s.Total, o.Total), ratio <= 1, "issue 34: 2.2x before it")
				}
			}
		case .5:
			rep.verdict("enqueue-to-done at 50% of the maximum", "p99 < 25 ms",
				fmt.Sprintf("p99 %.2f ms (every job, the worker's buckets)", s.DoneP99), s.DoneP99 < 25, "issue 34: 44-55 ms before it")
		}
	}
	if rival != nil {
		for _, s := range rep.Steady {
			if s.System == "sluice" {
				continue
			}
			for _, o := range rep.Steady {
				if o.System == "sluice" && o.Share == s.Share && s.Total > 0 {
					if rep.Ratios == nil {
						rep.Ratios = map[string]float64{}
					}
					rep.Ratios[fmt.Sprintf("steady_%g_cpu_per_job_over_rival", s.Share*100)] = round3(o.Total / s.Total)
				}
			}
		}
	}
}

// SteadyTable is the rows as a Markdown table, for BENCHMARKS.md.
func SteadyTable(rows []SteadyRow) string {
	var b strings.Builder
	b.WriteString("| load | system | jobs/s | CPU µs/job | cores | gate | kafka | relay | worker | coord. | redis | start p50 / p99 ms | done p50 / p99 ms |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rows {
		cell := func(k string) string {
			v, ok := s.CPU[k]
			if !ok {
				return "–"
			}
			return fmt.Sprintf("%.1f", v)
		}
		fmt.Fprintf(&b, "| %g%% | %s | %s | **%.1f** | %.2f | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s |\n",
			s.Share*100, s.System, thousands(int(s.Rate)), s.Total, s.Cores, cell("gate"), cell("kafka"), cell("relay"), cell("worker"), cell("coordinator"), cell("redis"),
			fmtMS(s.StartP50), fmtMS(s.StartP99), fmtMS(s.DoneP50), fmtMS(s.DoneP99))
	}
	return b.String()
}

// IdleRow is one process's CPU over an idle minute.
type IdleRow struct {
	Name string `json:"name"`
	// Share is its CPU seconds per second: the share of one core.
	Share float64 `json:"share_of_one_core"`
}

// Idle measures the stack with no jobs flowing but its own (the
// coordinator's heartbeat canaries, when on) for d after settle: each
// process's share of one core, from /proc, and Redis's from INFO cpu.
func (r *Runner) Idle(ctx context.Context, settle, d time.Duration) (*Report, error) {
	rep := &Report{Scenario: "idle", Started: time.Now(), Machine: ThisMachine(), Endpoints: r.ep, Processes: r.t.procs,
		Params: map[string]any{"settle": settle.String(), "duration": d.String()}}
	defer func() { rep.Elapsed = round3(time.Since(rep.Started).Seconds()) }()
	r.progress.Printf("idle: settling %s, then measuring %s with no jobs but the canaries\n", settle, d)
	if err := sleepCtx(ctx, settle); err != nil {
		return rep, err
	}
	cpu0 := r.t.cpuMark(ctx)
	if err := sleepCtx(ctx, d); err != nil {
		return rep, err
	}
	cpu1 := r.t.cpuMark(ctx)
	use := cpuUse(cpu0, cpu1, 0)
	total := 0.0
	for _, p := range use.Parts {
		if p.Name == "generator" {
			continue
		}
		s := math.Round(p.Seconds/use.WallSeconds*1e5) / 1e5
		rep.Idle = append(rep.Idle, IdleRow{Name: p.Name, Share: s})
		if p.Name != "consul" {
			total += p.Seconds
		}
	}
	if len(use.Parts) == 0 {
		total = use.PipelineSeconds + use.RedisSeconds
		rep.Idle = append(rep.Idle, IdleRow{Name: "sluice", Share: use.PipelineSeconds / use.WallSeconds}, IdleRow{Name: "redis", Share: use.RedisSeconds / use.WallSeconds})
	}
	share := total / use.WallSeconds
	rep.number("idle_parts_and_redis_share_of_one_core", math.Round(share*1e5)/1e5)
	rep.Phases = append(rep.Phases, PhaseResult{Name: "idle", Started: time.Now().Add(-d), CPU: &use, Errors: use.Errors})
	rep.verdict("idle: sluice's parts and Redis, canaries on", "< 1% of one core",
		fmt.Sprintf("%.2f%% over %s", share*100, d), share < .01, "issue 34: 2.2% before it")
	return rep, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WriteSteadySVG draws the steady table: CPU per job against load on the
// left, enqueue-to-start and enqueue-to-done p50 and p99 on the right,
// both on log scales (asynq's starts wait about a second where sluice's
// take milliseconds); one line style per system.
func WriteSteadySVG(w io.Writer, rows []SteadyRow, title string) error {
	if len(rows) == 0 {
		return fmt.Errorf("loadtest: no steady rows to draw")
	}
	const (
		width, height = 980, 420
		top, ph, pw   = 70, 280, 330
	)
	lefts := []float64{70, 520}
	var shares []float64
	systems := []string{}
	for _, r := range rows {
		if !slices.Contains(shares, r.Share) {
			shares = append(shares, r.Share)
		}
		if !slices.Contains(systems, r.System) {
			systems = append(systems, r.System)
		}
	}
	slices.Sort(shares)
	x := func(panel int, share float64) float64 {
		i := slices.Index(shares, share)
		return lefts[panel] + 20 + float64(i)*(pw-40)/math.Max(float64(len(shares)-1), 1)
	}
	logRange := func(vals []float64) (lo, hi float64) {
		lo, hi = math.Inf(1), 0
		for _, v := range vals {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		if hi == 0 {
			return 1, 10
		}
		return math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	}
	var cpus, lats []float64
	for _, r := range rows {
		cpus = append(cpus, r.Total)
		lats = append(lats, r.StartP50, r.StartP99, r.DoneP50, r.DoneP99)
	}
	ranges := [2][2]float64{}
	ranges[0][0], ranges[0][1] = logRange(cpus)
	ranges[1][0], ranges[1][1] = logRange(lats)
	y := func(panel int, v float64) float64 {
		lo, hi := ranges[panel][0], ranges[panel][1]
		v = math.Max(v, lo)
		return top + ph - (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*ph
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="70" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	for panel, label := range []string{"CPU per job, µs (system and Redis)", "enqueue-to-start and -to-done, ms"} {
		l := lefts[panel]
		fmt.Fprintf(&b, `<rect x="%.0f" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", l, top, pw, ph)
		fmt.Fprintf(&b, `<text x="%.0f" y="%d">%s</text>`+"\n", l, top-10, label)
		for v := ranges[panel][0]; v <= ranges[panel][1]*1.001; v *= 10 {
			yy := y(panel, v)
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", l, l+pw, yy, yy)
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", l-6, yy, tickLabel(v))
		}
		for _, s := range shares {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%g%%</text>`+"\n", x(panel, s), top+ph+16, s*100)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">load, share of the single-POST maximum</text>`+"\n", l+pw/2, top+ph+34)
	}
	dashes := []string{"", "6 4", "2 3"}
	type series struct {
		panel  int
		name   string
		colour string
		v      func(SteadyRow) float64
	}
	all := []series{
		{0, "CPU per job", "#333", func(r SteadyRow) float64 { return r.Total }},
		{1, "start p50", "#1f77b4", func(r SteadyRow) float64 { return r.StartP50 }},
		{1, "start p99", "#17becf", func(r SteadyRow) float64 { return r.StartP99 }},
		{1, "done p50", "#d62728", func(r SteadyRow) float64 { return r.DoneP50 }},
		{1, "done p99", "#ff7f0e", func(r SteadyRow) float64 { return r.DoneP99 }},
	}
	legend := 0
	for si, sys := range systems {
		for _, s := range all {
			var path strings.Builder
			for _, r := range rows {
				if r.System != sys || s.v(r) <= 0 {
					continue
				}
				cmd := "L"
				if path.Len() == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, x(s.panel, r.Share), y(s.panel, s.v(r)))
			}
			if path.Len() == 0 {
				continue
			}
			dash := dashes[si%len(dashes)]
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n", path.String(), s.colour, dash)
			ly := top + 8 + legend*16
			lx := 870.0
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n", lx, lx+24, ly, ly, s.colour, dash)
			fmt.Fprintf(&b, `<text x="%.0f" y="%d" dominant-baseline="middle" font-size="11">%s %s</text>`+"\n", lx+28, ly, html.EscapeString(sys), s.name)
			legend++
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
