package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Report is a scenario's run: what was asked, what each phase measured,
// and the verdicts against the seed's numbers. It is written as JSON, as
// an HTML page with charts, and as text on the terminal.
type Report struct {
	Scenario  string    `json:"scenario"`
	Size      string    `json:"size,omitempty"`
	Started   time.Time `json:"started"`
	Elapsed   float64   `json:"elapsed_seconds"`
	Machine   Machine   `json:"machine"`
	Endpoints Endpoints `json:"endpoints"`
	// Processes are the stack's processes whose CPU the phases report,
	// when known (the loadtest started sluice dev).
	Processes []Process      `json:"processes,omitempty"`
	Params    map[string]any `json:"params,omitempty"`
	Phases    []PhaseResult  `json:"phases"`
	Verdicts  []Verdict      `json:"verdicts"`
	// Numbers are the scenario's own results beside the phases' (for
	// example a small group's completion times), by name.
	Numbers map[string]float64 `json:"numbers,omitempty"`
	// Yardsticks, when measured, are this machine's limits in the same
	// run; Ratios the headline numbers over them.
	Yardsticks *Yardsticks        `json:"yardsticks,omitempty"`
	Ratios     map[string]float64 `json:"ratios,omitempty"`
	Notes      []string           `json:"notes,omitempty"`
	// Steady is the steady scenario's table: each system at each load;
	// Idle the idle scenario's processes.
	Steady []SteadyRow `json:"steady,omitempty"`
	Idle   []IdleRow   `json:"idle,omitempty"`
}

// openLoop: every stream of ph sent at a rate it was given, so its end to
// end rate is that rate, not what the pipeline can do.
func openLoop(ph PhaseResult) bool {
	for _, s := range ph.Streams {
		if s.Mode != "open" {
			return false
		}
	}
	return len(ph.Streams) > 0
}

// AddYardsticks records y and the ratios of the throughput phases' end to
// end rates to them; with the list floor, each phase's Redis CPU per job
// over the floor's, and for the batch phase the target's verdict (at most
// 2x the list floor of the same run).
func (r *Report) AddYardsticks(y Yardsticks) {
	r.Yardsticks = &y
	r.Ratios = map[string]float64{}
	for _, ph := range r.Phases {
		if ph.EndToEndRate <= 0 || openLoop(ph) {
			continue
		}
		if y.BareHTTP > 0 {
			r.Ratios[ph.Name+"_jobs_per_bare_http_request"] = round3(ph.EndToEndRate / y.BareHTTP)
		}
		if y.KfakeProduce > 0 {
			r.Ratios[ph.Name+"_jobs_per_kfake_record"] = round3(ph.EndToEndRate / y.KfakeProduce)
		}
		if y.RedisEvalsha > 0 {
			r.Ratios[ph.Name+"_jobs_per_redis_evalsha"] = round3(ph.EndToEndRate / y.RedisEvalsha)
		}
		if f := y.JobFloor; f != nil && f.RedisMicrosPerJob > 0 {
			r.Ratios[ph.Name+"_of_redis_job_floor_at_one_core"] = round3(ph.EndToEndRate * f.RedisMicrosPerJob / 1e6)
		}
		if f := y.ListFloor; f != nil && f.RedisMicrosPerJob > 0 {
			r.Ratios[ph.Name+"_of_redis_list_floor_at_one_core"] = round3(ph.EndToEndRate * f.RedisMicrosPerJob / 1e6)
			if ph.CPU != nil && ph.CPU.RedisMicrosPerJob > 0 {
				over := round3(ph.CPU.RedisMicrosPerJob / f.RedisMicrosPerJob)
				r.Ratios[ph.Name+"_redis_cpu_per_job_over_list_floor"] = over
				if ph.Name == "batch" {
					r.verdict("Redis CPU per job in the batch phase", "≤ 2x the list floor of the same run",
						fmt.Sprintf("%.1f µs, %.2fx the list floor's %.1f µs (the keyed floor, the old contract's: %s)",
							ph.CPU.RedisMicrosPerJob, over, f.RedisMicrosPerJob, keyedFloorText(y.JobFloor)),
						over <= 2, "issue 8: 85 µs against a list floor of 3.7 µs")
				}
			}
		}
	}
}

func keyedFloorText(f *JobFloor) string {
	if f == nil {
		return "not measured"
	}
	return fmt.Sprintf("%.1f µs", f.RedisMicrosPerJob)
}

// floorCeiling is the most jobs/s one Redis core gives at the floor's cost.
func floorCeiling(f *JobFloor) float64 {
	if f.RedisMicrosPerJob <= 0 {
		return 0
	}
	return 1e6 / f.RedisMicrosPerJob
}

// Verdict is one check against a target.
type Verdict struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
	// Seed is the number the seed (Slack's or Channel.io's story, or an
	// earlier prototype) measured, to compare against.
	Seed string `json:"seed,omitempty"`
}

// Pass is true when every verdict passed (and there is at least one).
func (r *Report) Pass() bool {
	for _, v := range r.Verdicts {
		if !v.Pass {
			return false
		}
	}
	return len(r.Verdicts) > 0
}

func (r *Report) verdict(name, want, got string, pass bool, seed string) {
	r.Verdicts = append(r.Verdicts, Verdict{Name: name, Want: want, Got: got, Pass: pass, Seed: seed})
}

func (r *Report) number(name string, v float64) {
	if r.Numbers == nil {
		r.Numbers = map[string]float64{}
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = -1
	}
	r.Numbers[name] = round3(v)
}

// Machine is where the run happened.
type Machine struct {
	Host      string `json:"host"`
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model,omitempty"`
	MemoryMB  int    `json:"memory_mb,omitempty"`
	OS        string `json:"os"`
	GoVersion string `json:"go"`
	Load1     string `json:"load_avg_at_start,omitempty"`
}

// ThisMachine describes the machine the generator runs on.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, GoVersion: runtime.Version()}
	m.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		for line := range strings.SplitSeq(string(b), "\n") {
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				m.MemoryMB = kb / 1024
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			m.Load1 = f[0]
		}
	}
	return m
}

// WriteJSON writes the report, indented.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonSafe(r))
}

// jsonSafe is r with NaNs (absent gauges) turned into -1: JSON has no NaN.
func jsonSafe(r *Report) *Report {
	c := *r
	c.Phases = make([]PhaseResult, len(r.Phases))
	for i, ph := range r.Phases {
		ph.Series = append([]Sample(nil), ph.Series...)
		for j, s := range ph.Series {
			s.Ready, s.Workers = noNaN(s.Ready), noNaN(s.Workers)
			ph.Series[j] = s
		}
		c.Phases[i] = ph
	}
	return &c
}

func noNaN(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			x = -1
		}
		out[i] = x
	}
	return out
}

// WriteText writes the report for a terminal: each phase's numbers, then
// the verdicts.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\n== %s", r.Scenario)
	if r.Size != "" {
		fmt.Fprintf(w, " (%s)", r.Size)
	}
	fmt.Fprintf(w, ": %s, %d CPUs, load %s at start, %.1f s ==\n", r.Machine.Host, r.Machine.CPUs, r.Machine.Load1, r.Elapsed)
	for _, ph := range r.Phases {
		fmt.Fprintf(w, "\nphase %s: %s jobs accepted in %.2f s (%s jobs/s)", ph.Name, thousands(ph.Accepted), ph.SendSeconds, thousands(int(ph.EnqueueRate)))
		if ph.AllDone {
			fmt.Fprintf(w, "; all done at %.2f s: %s jobs/s end to end", ph.DoneSeconds, thousands(int(ph.EndToEndRate)))
		}
		fmt.Fprintln(w)
		for _, s := range ph.Streams {
			loop := "closed loop"
			if s.Mode == "open" {
				loop = fmt.Sprintf("open loop %g req/s", s.Rate)
			}
			fmt.Fprintf(w, "  %-8s %s, %d conns, %d jobs/request, %s jobs: %s requests (%d dropped), status %v\n",
				s.Name, loop, s.Conns, s.Batch, s.JobType, thousands(s.Requests), s.Dropped, s.Status)
			fmt.Fprintf(w, "           enqueue          %s\n", latencyLine(s.Enqueue))
			if s.Sampled > 0 {
				fmt.Fprintf(w, "           enqueue-to-done  %s  (%d sampled, %d missing)\n", latencyLine(s.EnqueueToDone), s.Sampled, s.Missing)
			}
		}
		if b := ph.EnqueueToStart; b.Count > 0 {
			fmt.Fprintf(w, "  enqueue-to-start (worker's buckets, %s jobs): p50 ~%.2f ms, %.1f%% under 1 ms, %.1f%% under 5 ms, %.1f%% under 10 ms\n",
				thousands(int(b.Count)), b.Quantile(.5)*1000, b.Under(.001)*100, b.Under(.005)*100, b.Under(.01)*100)
		}
		if b := ph.EnqueueToDone; b.Count > 0 {
			fmt.Fprintf(w, "  enqueue-to-done (worker's buckets, %s jobs): p50 ~%.2f ms, p99 ~%.2f ms, %.2f%% under 50 ms\n",
				thousands(int(b.Count)), b.Quantile(.5)*1000, b.Quantile(.99)*1000, b.Under(.05)*100)
		}
		if ph.RedisMaxMemory > 0 || ph.RedisMaxUsedMB > 0 {
			fmt.Fprintf(w, "  redis: at most %.1f MB used (%.0f%% of maxmemory); relay's memory guard paused in %d samples\n",
				ph.RedisMaxUsedMB, ph.RedisMaxMemory*100, ph.GuardPausedSeconds)
		}
		if c := ph.CPU; c != nil && c.TotalMicrosPerJob > 0 {
			fmt.Fprintf(w, "  %s\n", c.describe())
			if l := c.describeCommands(6); l != "" {
				fmt.Fprintf(w, "  %s\n", l)
			}
			for _, l := range c.describeParts() {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
		for _, e := range ph.Errors {
			fmt.Fprintf(w, "  error: %s\n", e)
		}
	}
	if y := r.Yardsticks; y != nil {
		fmt.Fprintf(w, "\nyardsticks (same run): bare HTTP handler %s req/s, kfake produce %s records/s, redis-benchmark EVALSHA -P 16 %s calls/s\n",
			thousands(int(y.BareHTTP)), thousands(int(y.KfakeProduce)), thousands(int(y.RedisEvalsha)))
		if f := y.ListFloor; f != nil {
			fmt.Fprintf(w, "  the list floor in Redis (the contract's): %s jobs/s, %.1f µs of Redis CPU per job (at most %s jobs/s with Redis at one whole core)\n",
				thousands(int(f.JobsPerSecond)), f.RedisMicrosPerJob, thousands(int(floorCeiling(f))))
		}
		if f := y.JobFloor; f != nil {
			fmt.Fprintf(w, "  the keyed job floor in Redis (the old contract's): %s jobs/s, %.1f µs of Redis CPU per job (at most %s jobs/s with Redis at one whole core)\n",
				thousands(int(f.JobsPerSecond)), f.RedisMicrosPerJob, thousands(int(floorCeiling(f))))
		}
		for _, e := range y.Errors {
			fmt.Fprintf(w, "  error: %s\n", e)
		}
	}
	if len(r.Steady) > 0 {
		fmt.Fprintf(w, "\nsteady loads (CPU per job in µs; latencies in ms):\n%s", SteadyTable(r.Steady))
	}
	if len(r.Idle) > 0 {
		fmt.Fprintln(w, "\nidle, share of one core:")
		for _, i := range r.Idle {
			fmt.Fprintf(w, "  %-12s %6.3f%%\n", i.Name, i.Share*100)
		}
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nratios:")
		for _, k := range slices.Sorted(maps.Keys(r.Ratios)) {
			fmt.Fprintf(w, "  %-40s %.3f\n", k, r.Ratios[k])
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w, "\nverdicts:")
	for _, v := range r.Verdicts {
		mark := "PASS"
		if !v.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s  %s: %s (want %s)", mark, v.Name, v.Got, v.Want)
		if v.Seed != "" {
			fmt.Fprintf(w, "; seed: %s", v.Seed)
		}
		fmt.Fprintln(w)
	}
}

func latencyLine(l Latency) string {
	if l.Count == 0 {
		return "(none)"
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  max %s ms  (n=%s)",
		fmtMS(l.P50), fmtMS(l.P90), fmtMS(l.P99), fmtMS(l.P999), fmtMS(l.Max), thousands(int(l.Count)))
}

func fmtMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// Publish prints the report to stdout and saves it in dir (Save), saying
// where on stdout or, prefixed with who, why not on stderr.
func (r *Report) Publish(stdout, stderr io.Writer, dir, who string) {
	r.WriteText(stdout)
	if path, err := r.Save(dir); err != nil {
		fmt.Fprintf(stderr, "%s: writing the report: %v\n", who, err)
	} else {
		fmt.Fprintf(stdout, "\nreport: %s.json and %s.html\n", path, path)
	}
}

// Save writes the report as <dir>/<scenario>-<time>.json and .html and
// returns the path without its extension.
func (r *Report) Save(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := strings.NewReplacer(" ", "-", "/", "-").Replace(r.Scenario)
	path := filepath.Join(dir, name+"-"+r.Started.Format("20060102-150405"))
	writers := map[string]func(io.Writer) error{".json": r.WriteJSON, ".html": r.WriteHTML}
	if len(r.Steady) > 0 {
		writers[".svg"] = func(w io.Writer) error {
			return WriteSteadySVG(w, r.Steady, fmt.Sprintf("steady loads, %s, %d CPUs, load %s", r.Started.Format("2006-01-02"), r.Machine.CPUs, r.Machine.Load1))
		}
	}
	for ext, write := range writers {
		f, err := os.Create(path + ext)
		if err != nil {
			return "", err
		}
		if err := write(f); err != nil {
			f.Close()
			return "", err
		}
		if err := f.Close(); err != nil {
			return "", err
		}
	}
	return path, nil
}
