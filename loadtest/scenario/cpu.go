package scenario

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// CPUUse is where the machine's time went during a phase, per job: the
// sluice processes, Redis, Consul (when its process is known), and this
// generator. With every core busy at these costs the machine would give
// CeilingJobsPerSecond, which is what a phase's rate is worth comparing to
// on a shared 2-core host: a rate near the ceiling can only grow by
// costing less per job.
type CPUUse struct {
	// PipelineSeconds is the CPU time of the sluice processes: when the
	// loadtest started sluice dev, of its processes (/proc/<pid>/stat; with
	// --split-processes Kafka and each part has one of its own); else of
	// the processes behind the parts' metrics (their
	// process_cpu_seconds_total; processes that report the same start time
	// count once, so sluice dev's parts count once).
	PipelineSeconds float64 `json:"pipeline_cpu_seconds"`
	RedisSeconds    float64 `json:"redis_cpu_seconds"`
	// ConsulSeconds is the Consul agent's, when its process is known.
	ConsulSeconds    float64 `json:"consul_cpu_seconds,omitempty"`
	GeneratorSeconds float64 `json:"generator_cpu_seconds"`
	WallSeconds      float64 `json:"wall_seconds"`

	PipelineMicrosPerJob  float64 `json:"pipeline_cpu_us_per_job"`
	RedisMicrosPerJob     float64 `json:"redis_cpu_us_per_job"`
	ConsulMicrosPerJob    float64 `json:"consul_cpu_us_per_job,omitempty"`
	GeneratorMicrosPerJob float64 `json:"generator_cpu_us_per_job"`
	TotalMicrosPerJob     float64 `json:"total_cpu_us_per_job"`
	// Busy is the share of the machine's cores they used.
	Busy                 float64 `json:"busy_share_of_cores"`
	Cores                int     `json:"cores"`
	CeilingJobsPerSecond float64 `json:"ceiling_jobs_per_second"`
	// Parts is the use per process, when the stack's processes are known
	// (the loadtest started sluice dev): each part in a process of its own
	// with --split-processes, else sluice dev's one process; then Consul,
	// Redis and the generator. A process is never split between parts nor
	// counted twice: processes are told apart by pid and start time.
	Parts []PartCPU `json:"parts,omitempty"`
	// RedisCommands are Redis's commands during the phase (its INFO
	// commandstats), the costliest first: calls per job tell round trips
	// added to a job's path, which a script's own cost does not show.
	RedisCommands []RedisCommand `json:"redis_commands,omitempty"`
	// Errors name the readings that failed; the numbers then leave them out.
	Errors []string `json:"errors,omitempty"`
}

// RedisCommand is one command's use in a phase, per job. Microseconds are
// the time Redis spent executing it, without reading and writing the
// connection (which INFO cpu counts).
type RedisCommand struct {
	Name         string  `json:"name"`
	CallsPerJob  float64 `json:"calls_per_job"`
	MicrosPerJob float64 `json:"us_per_job"`
}

// PartCPU is one process's CPU during a phase.
type PartCPU struct {
	// Name is the part ("gate", "kafka", "relay", "worker", "coordinator"),
	// "dev" (the --split-processes parent), "sluice dev" (every part in one
	// process), "consul", "redis" or "generator".
	Name string `json:"name"`
	// Parts are the pipeline's parts the process runs.
	Parts        []string `json:"parts,omitempty"`
	Pid          int      `json:"pid,omitempty"`
	Seconds      float64  `json:"cpu_seconds"`
	MicrosPerJob float64  `json:"cpu_us_per_job"`
	// Share is its part of TotalMicrosPerJob; CoresBusy its CPU seconds
	// per second of the phase.
	Share     float64 `json:"share_of_total"`
	CoresBusy float64 `json:"cores_busy"`
	// OneCoreJobsPerSecond is the most jobs/s this process allows at one
	// whole core (1e6 / MicrosPerJob): the bound of a process that does
	// its work on one thread (Redis; kfake's cluster loop).
	OneCoreJobsPerSecond float64 `json:"one_core_jobs_per_second"`
}

// cpuMark is one reading of the CPU times.
type cpuMark struct {
	at                         time.Time
	pipeline, redis, generator float64
	pipelineErr, redisErr      error
	// commands is Redis's INFO commandstats (nil when unread).
	commands map[string]commandStat
	// procs are the stack's processes when known; pipeline is then left
	// to cpuUse, from them.
	procs []procMark
}

// procMark is a process and its reading.
type procMark struct {
	Process
	procSample
}

func (t *target) cpuMark(ctx context.Context) cpuMark {
	m := cpuMark{at: time.Now(), generator: cpuTime().Seconds()}
	if len(t.procs) > 0 {
		for _, p := range t.procs {
			m.procs = append(m.procs, procMark{p, readProc(t.procRoot, p.Pid)})
		}
	} else {
		m.pipeline, m.pipelineErr = t.pipelineCPU(ctx)
	}
	m.redis, m.redisErr = redisCPU(ctx, t.rdb)
	if m.redisErr == nil {
		m.commands, _ = redisCommands(ctx, t.rdb)
	}
	return m
}

// pipelineCPU sums process_cpu_seconds_total over the distinct processes
// behind the parts' metrics endpoints.
func (t *target) pipelineCPU(ctx context.Context) (float64, error) {
	seen := map[float64]bool{}
	total := 0.0
	var firstErr error
	for _, base := range []string{t.ep.Gate, t.ep.Relay, t.ep.Worker, t.ep.Coordinator} {
		ms, err := t.scrape(ctx, base)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		start := ms.sum("process_start_time_seconds")
		if start == 0 || seen[start] {
			continue
		}
		seen[start] = true
		total += ms.sum("process_cpu_seconds_total")
	}
	if len(seen) == 0 && firstErr != nil {
		return 0, firstErr
	}
	return total, nil
}

// cpuUse is the use between two marks for jobs jobs.
func cpuUse(a, b cpuMark, jobs int) CPUUse {
	u := CPUUse{
		WallSeconds:      round3(b.at.Sub(a.at).Seconds()),
		GeneratorSeconds: round3(b.generator - a.generator),
		Cores:            runtime.NumCPU(),
	}
	if len(b.procs) > 0 {
		u.addProcesses(a.procs, b.procs)
	} else {
		for _, err := range []error{a.pipelineErr, b.pipelineErr} {
			if err != nil {
				u.Errors = append(u.Errors, "the parts' process_cpu_seconds_total: "+err.Error())
			}
		}
		if a.pipelineErr == nil && b.pipelineErr == nil {
			u.PipelineSeconds = round3(b.pipeline - a.pipeline)
		}
	}
	for _, err := range []error{a.redisErr, b.redisErr} {
		if err != nil {
			u.Errors = append(u.Errors, "Redis's INFO cpu: "+err.Error())
		}
	}
	redisRead := a.redisErr == nil && b.redisErr == nil
	if redisRead {
		u.RedisSeconds = round3(b.redis - a.redis)
	}
	if u.Parts != nil {
		if redisRead {
			u.Parts = append(u.Parts, PartCPU{Name: "redis", Seconds: u.RedisSeconds})
		}
		u.Parts = append(u.Parts, PartCPU{Name: "generator", Seconds: u.GeneratorSeconds})
	}
	if jobs <= 0 || u.WallSeconds <= 0 {
		return u
	}
	u.RedisCommands = commandUse(a.commands, b.commands, jobs)
	per := func(s float64) float64 { return round3(s * 1e6 / float64(jobs)) }
	u.PipelineMicrosPerJob = per(u.PipelineSeconds)
	u.RedisMicrosPerJob = per(u.RedisSeconds)
	u.ConsulMicrosPerJob = per(u.ConsulSeconds)
	u.GeneratorMicrosPerJob = per(u.GeneratorSeconds)
	total := u.PipelineSeconds + u.RedisSeconds + u.ConsulSeconds + u.GeneratorSeconds
	u.TotalMicrosPerJob = per(total)
	u.Busy = round3(total / u.WallSeconds / float64(u.Cores))
	if u.TotalMicrosPerJob > 0 {
		u.CeilingJobsPerSecond = round3(float64(u.Cores) * 1e6 / u.TotalMicrosPerJob)
	}
	for i := range u.Parts {
		p := &u.Parts[i]
		p.MicrosPerJob = per(p.Seconds)
		p.CoresBusy = round3(p.Seconds / u.WallSeconds)
		if total > 0 {
			p.Share = round3(p.Seconds / total)
		}
		if p.MicrosPerJob > 0 {
			p.OneCoreJobsPerSecond = round3(1e6 / p.MicrosPerJob)
		}
	}
	return u
}

// addProcesses adds the processes' CPU between two readings: each
// process's as a part of its own, the sluice processes' into the
// pipeline's, Consul's apart. A process is matched by pid and start time;
// one unread, gone or replaced (a pid now another process's) is left out
// and named in Errors.
func (u *CPUUse) addProcesses(a, b []procMark) {
	u.Parts = []PartCPU{}
	for _, pb := range b {
		i := -1
		for j, pa := range a {
			if pa.Pid == pb.Pid && pa.Name == pb.Name {
				i = j
				break
			}
		}
		what := pb.Name + " (pid " + strconv.Itoa(pb.Pid) + ")"
		switch {
		case i < 0:
			u.Errors = append(u.Errors, what+": no reading at the phase's start")
			continue
		case a[i].err != nil || pb.err != nil:
			for _, err := range []error{a[i].err, pb.err} {
				if err != nil {
					u.Errors = append(u.Errors, what+": "+err.Error())
				}
			}
			continue
		case a[i].start != pb.start:
			u.Errors = append(u.Errors, what+": the pid is another process's since the phase's start (restarted?)")
			continue
		}
		s := round3(pb.seconds - a[i].seconds)
		u.Parts = append(u.Parts, PartCPU{Name: pb.Name, Parts: pb.Parts, Pid: pb.Pid, Seconds: s})
		if pb.Sluice {
			u.PipelineSeconds += s
		} else if pb.Name == "consul" {
			u.ConsulSeconds += s
		}
	}
	u.PipelineSeconds = round3(u.PipelineSeconds)
	u.ConsulSeconds = round3(u.ConsulSeconds)
}

// describe is the use in one line of the reports.
func (u *CPUUse) describe() string {
	consul := ""
	if u.ConsulSeconds > 0 {
		consul = fmt.Sprintf("Consul %.1f µs, ", u.ConsulMicrosPerJob)
	}
	return fmt.Sprintf("CPU per job: sluice %.1f µs, Redis %.1f µs, %sthis generator %.1f µs: %.1f µs; %.0f%% of %d cores busy; at these costs with every core busy: %s jobs/s",
		u.PipelineMicrosPerJob, u.RedisMicrosPerJob, consul, u.GeneratorMicrosPerJob, u.TotalMicrosPerJob, u.Busy*100, u.Cores, thousands(int(u.CeilingJobsPerSecond)))
}

// describeParts is a line per process: its CPU per job, its share of the
// total, the cores it kept busy, and the rate it allows at one core.
func (u *CPUUse) describeParts() []string {
	var out []string
	for _, p := range u.Parts {
		oneCore := ""
		if p.OneCoreJobsPerSecond > 0 {
			oneCore = "  (at one core: " + thousands(int(p.OneCoreJobsPerSecond)) + " jobs/s)"
		}
		out = append(out, fmt.Sprintf("%-12s %7.1f µs  %3.0f%%  %.2f cores%s%s",
			p.Name, p.MicrosPerJob, p.Share*100, p.CoresBusy, oneCore, p.note()))
	}
	return out
}

// describeCommands is one line of Redis's costliest commands per job.
func (u *CPUUse) describeCommands(n int) string {
	var parts []string
	for _, c := range u.RedisCommands[:min(n, len(u.RedisCommands))] {
		parts = append(parts, fmt.Sprintf("%s %.3g calls %.2g µs", strings.ToLower(c.Name), c.CallsPerJob, c.MicrosPerJob))
	}
	if len(parts) == 0 {
		return ""
	}
	return "Redis commands per job: " + strings.Join(parts, ", ")
}

// note says what a process without a part of its own is.
func (p *PartCPU) note() string {
	switch {
	case len(p.Parts) > 1:
		return "  " + strings.Join(p.Parts, ", ") + " in one process"
	case p.Name == "dev":
		return "  the parent of --split-processes"
	case p.Name == "redis":
		return "  INFO cpu"
	case len(p.Parts) == 1 && p.Parts[0] == "rival":
		return "  client and server, in the generator's process"
	}
	return ""
}
