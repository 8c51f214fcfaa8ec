package scenario

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestCPUUsePerJobAndCeiling(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := cpuMark{at: t0, pipeline: 10, redis: 5, generator: 1}
	b := cpuMark{at: t0.Add(2 * time.Second), pipeline: 10.8, redis: 5.6, generator: 1.2}
	u := cpuUse(a, b, 8000)
	// 0.8 s + 0.6 s + 0.2 s over 8,000 jobs: 100 + 75 + 25 µs.
	if u.PipelineMicrosPerJob != 100 || u.RedisMicrosPerJob != 75 || u.GeneratorMicrosPerJob != 25 || u.TotalMicrosPerJob != 200 {
		t.Fatalf("per job: %+v", u)
	}
	cores := runtime.NumCPU()
	if u.Cores != cores || u.CeilingJobsPerSecond != round3(float64(cores)*1e6/200) {
		t.Fatalf("ceiling %v with %d cores, want %d cores × 5,000", u.CeilingJobsPerSecond, u.Cores, cores)
	}
	if want := round3(1.6 / 2 / float64(cores)); u.Busy != want {
		t.Fatalf("busy %v, want %v", u.Busy, want)
	}
	if !strings.Contains(u.describe(), "200.0 µs") {
		t.Fatalf("describe: %s", u.describe())
	}
	// A failed reading leaves its part out and says so, rather than
	// counting a process as free.
	b.redisErr = errors.New("connection refused")
	u = cpuUse(a, b, 8000)
	if u.RedisSeconds != 0 || u.TotalMicrosPerJob != 125 || len(u.Errors) != 1 || !strings.Contains(u.Errors[0], "connection refused") {
		t.Fatalf("with Redis unread: %+v", u)
	}
}

// procMarks are readings of processes: name -> pid, start ticks, CPU s.
func procMarks(ps ...procMark) []procMark { return ps }

func pm(name string, parts []string, pid int, start uint64, seconds float64) procMark {
	sluice := name != "consul"
	return procMark{Process{Name: name, Parts: parts, Pid: pid, Sluice: sluice}, procSample{pid: pid, start: start, seconds: seconds}}
}

func partsByName(u CPUUse) map[string]PartCPU {
	out := map[string]PartCPU{}
	for _, p := range u.Parts {
		out[p.Name] = p
	}
	return out
}

// With --split-processes every part is a process of its own: each one's
// CPU is its own line, the sluice processes add up to the pipeline's, and
// Consul, Redis and the generator stand apart. Two children started in
// the same clock tick (the same process_start_time_seconds) stay two: the
// processes are told apart by pid.
func TestCPUUsePerPart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const tick = 5000 // every child started in the same tick
	a := cpuMark{at: t0, redis: 5, generator: 1, procs: procMarks(
		pm("gate", []string{"gate"}, 11, tick, 1.00),
		pm("kafka", []string{"kafka"}, 12, tick, 2.00),
		pm("relay", []string{"relay"}, 13, tick, 3.00),
		pm("worker", []string{"worker"}, 14, tick, 4.00),
		pm("coordinator", []string{"coordinator"}, 15, tick, 5.00),
		pm("dev", nil, 10, tick-10, 0.50),
		pm("consul", nil, 16, tick, 7.00),
	)}
	b := cpuMark{at: t0.Add(2 * time.Second), redis: 5.6, generator: 1.2, procs: procMarks(
		pm("gate", []string{"gate"}, 11, tick, 1.32),               // 320 ms
		pm("kafka", []string{"kafka"}, 12, tick, 2.16),             // 160 ms
		pm("relay", []string{"relay"}, 13, tick, 3.08),             // 80 ms
		pm("worker", []string{"worker"}, 14, tick, 4.24),           // 240 ms
		pm("coordinator", []string{"coordinator"}, 15, tick, 5.01), // 10 ms
		pm("dev", nil, 10, tick-10, 0.50),                          // 0
		pm("consul", nil, 16, tick, 7.02),                          // 20 ms
	)}
	u := cpuUse(a, b, 8000)
	if len(u.Errors) != 0 {
		t.Fatalf("errors: %v", u.Errors)
	}
	// Per job over 8,000 jobs: 1 ms is 0.125 µs.
	want := map[string]float64{"gate": 40, "kafka": 20, "relay": 10, "worker": 30, "coordinator": 1.25, "dev": 0,
		"consul": 2.5, "redis": 75, "generator": 25}
	got := partsByName(u)
	if len(u.Parts) != len(want) {
		t.Fatalf("%d parts, want %d: %+v", len(u.Parts), len(want), u.Parts)
	}
	for name, us := range want {
		if got[name].MicrosPerJob != us {
			t.Errorf("%s: %v µs per job, want %v", name, got[name].MicrosPerJob, us)
		}
	}
	// The pipeline is the sluice processes (810 ms: 101.25 µs), Consul
	// apart; the total and the ceiling count every process.
	if u.PipelineSeconds != 0.81 || u.PipelineMicrosPerJob != 101.25 || u.ConsulMicrosPerJob != 2.5 {
		t.Fatalf("pipeline %v s, %v µs; consul %v µs", u.PipelineSeconds, u.PipelineMicrosPerJob, u.ConsulMicrosPerJob)
	}
	if u.TotalMicrosPerJob != 203.75 || u.CeilingJobsPerSecond != round3(float64(u.Cores)*1e6/203.75) {
		t.Fatalf("total %v µs, ceiling %v", u.TotalMicrosPerJob, u.CeilingJobsPerSecond)
	}
	sum := 0.0
	for _, p := range u.Parts {
		sum += p.MicrosPerJob
	}
	if round3(sum) != u.TotalMicrosPerJob {
		t.Fatalf("the parts add up to %v µs, the total is %v", sum, u.TotalMicrosPerJob)
	}
	if g := got["gate"]; g.CoresBusy != 0.16 || g.OneCoreJobsPerSecond != 25000 || g.Share != round3(0.32/1.63) || g.Pid != 11 {
		t.Fatalf("gate: %+v", g)
	}
	lines := u.describeParts()
	if len(lines) != len(want) || !strings.HasPrefix(lines[0], "gate") || !strings.Contains(lines[0], "40.0 µs") ||
		!strings.Contains(lines[0], "25,000 jobs/s") || !strings.Contains(strings.Join(lines, "\n"), "the parent of --split-processes") {
		t.Fatalf("lines:\n%s", strings.Join(lines, "\n"))
	}
	if d := u.describe(); !strings.Contains(d, "sluice 101.2 µs") && !strings.Contains(d, "sluice 101.3 µs") || !strings.Contains(d, "Consul 2.5 µs") {
		t.Fatalf("describe: %s", d)
	}
}

// sluice dev's default layout is one process for every part: one line,
// never split between the parts.
func TestCPUUseOneProcessForEveryPart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	all := []string{"gate", "kafka", "relay", "worker", "coordinator"}
	a := cpuMark{at: t0, procs: procMarks(pm("sluice dev", all, 10, 7, 1), pm("consul", nil, 11, 8, 1))}
	b := cpuMark{at: t0.Add(time.Second), procs: procMarks(pm("sluice dev", all, 10, 7, 1.8), pm("consul", nil, 11, 8, 1))}
	u := cpuUse(a, b, 8000)
	got := partsByName(u)
	if len(u.Parts) != 4 || got["sluice dev"].MicrosPerJob != 100 || u.PipelineMicrosPerJob != 100 || got["gate"].Name != "" {
		t.Fatalf("parts %+v, pipeline %v µs", u.Parts, u.PipelineMicrosPerJob)
	}
	if l := u.describeParts()[0]; !strings.Contains(l, "gate, kafka, relay, worker, coordinator in one process") {
		t.Fatalf("line: %s", l)
	}
}

// A process that is gone, unread or replaced between the marks is left
// out and named, rather than counted as free or as another's.
func TestCPUUseProcessRestartedOrUnread(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := cpuMark{at: t0, procs: procMarks(
		pm("gate", []string{"gate"}, 11, 100, 1),
		pm("relay", []string{"relay"}, 12, 100, 1),
	)}
	gone := pm("worker", []string{"worker"}, 13, 100, 0)
	gone.err = errors.New("no such file or directory")
	b := cpuMark{at: t0.Add(time.Second), procs: procMarks(
		pm("gate", []string{"gate"}, 11, 100, 1.8),
		pm("relay", []string{"relay"}, 12, 900, 0.1), // the pid is another process's now
		gone, // and no reading at the start either
	)}
	u := cpuUse(a, b, 8000)
	if len(u.Parts) != 3 || u.Parts[0].Name != "gate" || u.Parts[1].Name != "redis" || u.PipelineMicrosPerJob != 100 {
		t.Fatalf("parts %+v, pipeline %v µs", u.Parts, u.PipelineMicrosPerJob)
	}
	errs := strings.Join(u.Errors, "\n")
	if len(u.Errors) != 2 || !strings.Contains(errs, "relay (pid 12): the pid is another process's") || !strings.Contains(errs, "worker (pid 13): no reading at the phase's start") {
		t.Fatalf("errors:\n%s", errs)
	}
}

// Without the processes (a stack the loadtest did not start), the sluice
// processes' CPU comes from their metrics as before, and no parts are
// listed.
func TestCPUUseWithoutProcesses(t *testing.T) {
	t0 := time.Unix(1000, 0)
	u := cpuUse(cpuMark{at: t0, pipeline: 1}, cpuMark{at: t0.Add(time.Second), pipeline: 1.8}, 8000)
	if u.Parts != nil || u.PipelineMicrosPerJob != 100 || len(u.describeParts()) != 0 {
		t.Fatalf("%+v", u)
	}
}

func TestRedisCommandsPerJobComeFromCommandstats(t *testing.T) {
	a := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=100,usec=1000,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\ncmdstat_time:calls=5,usec=5,usec_per_call=1.00\r\n")
	b := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=300,usec=5000,usec_per_call=16.67,rejected_calls=0,failed_calls=0\r\ncmdstat_time:calls=5,usec=5,usec_per_call=1.00\r\ncmdstat_hincrby:calls=100,usec=100,usec_per_call=1.00\r\n")
	got := commandUse(a, b, 1000)
	if len(got) != 2 {
		t.Fatalf("commands with calls in the phase: %+v, want evalsha and hincrby (time had no new calls)", got)
	}
	if got[0] != (RedisCommand{Name: "evalsha", CallsPerJob: 0.2, MicrosPerJob: 4}) || got[1] != (RedisCommand{Name: "hincrby", CallsPerJob: 0.1, MicrosPerJob: 0.1}) {
		t.Fatalf("per job: %+v", got)
	}
	u := CPUUse{RedisCommands: got}
	if l := u.describeCommands(6); !strings.Contains(l, "evalsha 0.2 calls 4 µs") {
		t.Fatalf("described: %q", l)
	}
	if commandUse(nil, b, 1000) != nil {
		t.Fatal("a missing reading gives no commands")
	}
}
