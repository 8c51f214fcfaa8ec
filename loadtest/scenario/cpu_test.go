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
