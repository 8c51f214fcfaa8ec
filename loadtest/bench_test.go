package main

// The seed benchmarks (make bench-seed, bench-seed-full, bench-scaling,
// bench-scaling-full) run the library's in-process scenarios against a real
// Redis and Consul. They stay here, in ./loadtest, so that their commands
// are unchanged since the library moved to ./loadtest/scenario.

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/scenario"
	"github.com/sluicehq/sluice/worker"
)

// BenchmarkSeedScaled: the seed scenario scaled down, 3 groups × 1,000 jobs,
// each group's resource limited to 100/s (ideal 10 s), against a real Redis
// and Consul; one worker process with the default configuration. Reports
// elapsed/ideal, throttles per job, the most starts of a resource in any
// one-second window, and the combined rate.
//
//	make bench-seed
//	go test ./loadtest -run '^$' -bench '^BenchmarkSeedScaled$' -benchtime 1x
func BenchmarkSeedScaled(b *testing.B) { benchSeed(b, scenario.ScaledSeed) }

// BenchmarkSeedFull: the seed scenario at full size, 3 × 5,000 jobs at
// 10/s each (ideal 500 s, about 8.5 minutes). It runs only when
// SLUICE_BENCH_SEED_FULL=1, so that `make bench` stays short.
//
//	make bench-seed-full
//	SLUICE_BENCH_SEED_FULL=1 go test ./loadtest -run '^$' -bench '^BenchmarkSeedFull$' -benchtime 1x -timeout 30m
func BenchmarkSeedFull(b *testing.B) {
	if os.Getenv("SLUICE_BENCH_SEED_FULL") != "1" {
		b.Skip("the full seed takes ~8.5 minutes: set SLUICE_BENCH_SEED_FULL=1 (make bench-seed-full)")
	}
	benchSeed(b, scenario.FullSeed)
}

func benchSeed(b *testing.B, cfg scenario.SeedConfig) {
	r := testenv.Redis(b)
	c := testenv.Consul(b)
	cfg.RedisAddr, cfg.ConsulAddr = r.Addr(), c.Addr()
	if testing.Verbose() {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	// SLUICE_BENCH_SEED_MARGIN=0s measures what the default margin costs.
	if m := os.Getenv("SLUICE_BENCH_SEED_MARGIN"); m != "" {
		margin, err := time.ParseDuration(m)
		if err != nil {
			b.Fatalf("SLUICE_BENCH_SEED_MARGIN: %v", err)
		}
		cfg.Worker = func(c *worker.Config) { c.RateLimitMargin = margin }
	}
	var rep scenario.SeedReport
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r.Client().FlushAll(context.Background())
		redisCPU := r.CPUSeconds(b)
		b.StartTimer()
		var err error
		if rep, err = scenario.RunSeed(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.Logf("%s; redis cpu %.2fs", rep, r.CPUSeconds(b)-redisCPU)
		if rep.Ran != rep.Jobs || rep.RanTwice != 0 || rep.Done != rep.Jobs {
			b.Errorf("every job must run once and be done: %s", rep)
		}
		for res, peak := range rep.PeakWindow {
			if float64(peak) > cfg.Rate {
				b.Errorf("%s: %d starts in a one-second window, over its limit of %g", res, peak, cfg.Rate)
				b.Log(scenario.FirstCrowdedWindow(rep.Starts[res], int(cfg.Rate)))
			}
		}
	}
	b.ReportMetric(rep.Ratio(), "elapsed/ideal")
	b.ReportMetric(rep.MeanThrottles, "throttles/job")
	b.ReportMetric(float64(rep.MaxThrottles), "max-throttles")
	peak := 0
	for _, p := range rep.PeakWindow {
		peak = max(peak, p)
	}
	b.ReportMetric(float64(peak), "peak-1s-window")
	b.ReportMetric(rep.CombinedRate, "combined-jobs/s")
	b.ReportMetric(rep.CPU.Seconds(), "worker-cpu-s")
	b.ReportMetric(float64(rep.StartLag.Microseconds()), "start-lag-µs")
}

// BenchmarkScalingScaled: the seed's scaling scenario scaled down: 10,000
// jobs of 120 ms over 4 partitions, base 2 per partition, up to 8x, 1 s
// cycles (ideal 18.75 s; fixed 150 s by construction), against a real
// Redis and Consul, the real worker and coordinator in this process.
// SLUICE_BENCH_SCALING_FIXED=1 runs the fixed construction instead (no
// coordinator); SLUICE_BENCH_SCALING_SVG=<file> draws the trace.
//
//	make bench-scaling
//	go test ./loadtest -run '^$' -bench '^BenchmarkScalingScaled$' -benchtime 1x
func BenchmarkScalingScaled(b *testing.B) { benchScaling(b, scenario.ScaledScaling) }

// BenchmarkScalingFull: the scenario at full size, 100,000 jobs with 5 s
// cycles (ideal 187.5 s, about 3.5 minutes; fixed 25 minutes). It runs only
// when SLUICE_BENCH_SCALING_FULL=1, so that `make bench` stays short.
//
//	make bench-scaling-full
//	SLUICE_BENCH_SCALING_FULL=1 go test ./loadtest -run '^$' -bench '^BenchmarkScalingFull$' -benchtime 1x -timeout 40m
func BenchmarkScalingFull(b *testing.B) {
	if os.Getenv("SLUICE_BENCH_SCALING_FULL") != "1" {
		b.Skip("the full scaling scenario takes ~3.5 minutes (fixed: 25): set SLUICE_BENCH_SCALING_FULL=1 (make bench-scaling-full)")
	}
	benchScaling(b, scenario.FullScaling)
}

func benchScaling(b *testing.B, cfg scenario.ScalingConfig) {
	r := testenv.Redis(b)
	c := testenv.Consul(b)
	cfg.RedisAddr, cfg.ConsulAddr = r.Addr(), c.Addr()
	if os.Getenv("SLUICE_BENCH_SCALING_FIXED") == "1" {
		cfg.Dynamic = false
	}
	if testing.Verbose() {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	var rep scenario.ScalingReport
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r.Client().FlushAll(context.Background())
		b.StartTimer()
		var err error
		if rep, err = scenario.RunScaling(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.Logf("%s\n%s", rep, rep.DecisionLog())
		b.Log(traceTable(rep, 5*time.Second))
		if rep.Ran != rep.Jobs || rep.Done != rep.Jobs {
			b.Errorf("every job must run and be done: %s", rep)
		}
	}
	if path := os.Getenv("SLUICE_BENCH_SCALING_SVG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		title := "Scaling trace: " + map[bool]string{true: "dynamic", false: "fixed"}[cfg.Dynamic]
		if err := scenario.WriteTraceSVG(f, rep, title); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(rep.Elapsed.Seconds(), "elapsed-s")
	b.ReportMetric(rep.Ratio(), "elapsed/ideal")
	b.ReportMetric(cfg.Fixed().Seconds()/rep.Elapsed.Seconds(), "fixed/elapsed")
	b.ReportMetric(rep.AtMax.Seconds(), "at-max-s")
	b.ReportMetric(float64(len(rep.Decisions)), "decisions")
}

// traceTable prints the trace every step: workers and ready per partition.
func traceTable(rep scenario.ScalingReport, step time.Duration) string {
	var sb strings.Builder
	sb.WriteString("trace (workers / ready per partition):\n")
	next := time.Duration(0)
	for i, s := range rep.Trace {
		if s.At < next && i != len(rep.Trace)-1 {
			continue
		}
		next = s.At + step
		sb.WriteString("  " + strconv.FormatFloat(s.At.Seconds(), 'f', 1, 64) + "s")
		for p := range s.Workers {
			sb.WriteString("  p" + strconv.Itoa(p) + " " + strconv.Itoa(s.Workers[p]) + "/" + strconv.FormatInt(s.Ready[p], 10))
		}
		sb.WriteString("\n")
	}
	return sb.String()
}
