package scenario

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// CPUUse is where the machine's time went during a phase, per job: the
// sluice processes, Redis, and this generator. With every core busy at
// these costs the machine would give CeilingJobsPerSecond, which is what
// a phase's rate is worth comparing to on a shared 2-core host: a rate
// near the ceiling can only grow by costing less per job.
type CPUUse struct {
	// PipelineSeconds is the CPU time of the processes behind the parts'
	// metrics (their process_cpu_seconds_total; processes that report the
	// same start time count once, so sluice dev's parts count once).
	PipelineSeconds  float64 `json:"pipeline_cpu_seconds"`
	RedisSeconds     float64 `json:"redis_cpu_seconds"`
	GeneratorSeconds float64 `json:"generator_cpu_seconds"`
	WallSeconds      float64 `json:"wall_seconds"`

	PipelineMicrosPerJob  float64 `json:"pipeline_cpu_us_per_job"`
	RedisMicrosPerJob     float64 `json:"redis_cpu_us_per_job"`
	GeneratorMicrosPerJob float64 `json:"generator_cpu_us_per_job"`
	TotalMicrosPerJob     float64 `json:"total_cpu_us_per_job"`
	// Busy is the share of the machine's cores the three used.
	Busy                 float64 `json:"busy_share_of_cores"`
	Cores                int     `json:"cores"`
	CeilingJobsPerSecond float64 `json:"ceiling_jobs_per_second"`
	// Errors name the readings that failed; the numbers then leave them out.
	Errors []string `json:"errors,omitempty"`
}

// cpuMark is one reading of the three CPU times.
type cpuMark struct {
	at                         time.Time
	pipeline, redis, generator float64
	pipelineErr, redisErr      error
}

func (t *target) cpuMark(ctx context.Context) cpuMark {
	m := cpuMark{at: time.Now(), generator: cpuTime().Seconds()}
	m.pipeline, m.pipelineErr = t.pipelineCPU(ctx)
	m.redis, m.redisErr = redisCPU(ctx, t.rdb)
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
	for _, err := range []error{a.pipelineErr, b.pipelineErr} {
		if err != nil {
			u.Errors = append(u.Errors, "the parts' process_cpu_seconds_total: "+err.Error())
		}
	}
	for _, err := range []error{a.redisErr, b.redisErr} {
		if err != nil {
			u.Errors = append(u.Errors, "Redis's INFO cpu: "+err.Error())
		}
	}
	if a.pipelineErr == nil && b.pipelineErr == nil {
		u.PipelineSeconds = round3(b.pipeline - a.pipeline)
	}
	if a.redisErr == nil && b.redisErr == nil {
		u.RedisSeconds = round3(b.redis - a.redis)
	}
	if jobs <= 0 || u.WallSeconds <= 0 {
		return u
	}
	per := func(s float64) float64 { return round3(s * 1e6 / float64(jobs)) }
	u.PipelineMicrosPerJob = per(u.PipelineSeconds)
	u.RedisMicrosPerJob = per(u.RedisSeconds)
	u.GeneratorMicrosPerJob = per(u.GeneratorSeconds)
	total := u.PipelineSeconds + u.RedisSeconds + u.GeneratorSeconds
	u.TotalMicrosPerJob = per(total)
	u.Busy = round3(total / u.WallSeconds / float64(u.Cores))
	if u.TotalMicrosPerJob > 0 {
		u.CeilingJobsPerSecond = round3(float64(u.Cores) * 1e6 / u.TotalMicrosPerJob)
	}
	return u
}

// describe is the use in one line of the reports.
func (u *CPUUse) describe() string {
	return fmt.Sprintf("CPU per job: sluice %.1f µs, Redis %.1f µs, this generator %.1f µs: %.1f µs; %.0f%% of %d cores busy; at these costs with every core busy: %s jobs/s",
		u.PipelineMicrosPerJob, u.RedisMicrosPerJob, u.GeneratorMicrosPerJob, u.TotalMicrosPerJob, u.Busy*100, u.Cores, thousands(int(u.CeilingJobsPerSecond)))
}
