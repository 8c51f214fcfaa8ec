package loadtest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

func TestPeakWindow(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		starts []time.Duration
		want   int
	}{
		{nil, 0},
		{[]time.Duration{0}, 1},
		// Ten at 100 ms spacing: the eleventh, exactly 1 s after the
		// first, is outside [t, t+1s).
		{[]time.Duration{0, 100 * ms, 200 * ms, 300 * ms, 400 * ms, 500 * ms, 600 * ms, 700 * ms, 800 * ms, 900 * ms, 1000 * ms}, 10},
		// The knife edge: the first 1 ms late, the rest on time.
		{[]time.Duration{1 * ms, 100 * ms, 200 * ms, 300 * ms, 400 * ms, 500 * ms, 600 * ms, 700 * ms, 800 * ms, 900 * ms, 1000 * ms}, 11},
		{[]time.Duration{0, 0, 0, 2 * time.Second}, 3},
	} {
		if got := PeakWindow(tc.starts, time.Second); got != tc.want {
			t.Errorf("PeakWindow(%v) = %d, want %d", tc.starts, got, tc.want)
		}
	}
}

// BenchmarkSeedScaled: the seed scenario scaled down, 3 groups × 1,000 jobs,
// each group's resource limited to 100/s (ideal 10 s), against a real Redis
// and Consul; one worker process with the default configuration. Reports
// elapsed/ideal, throttles per job, the most starts of a resource in any
// one-second window, and the combined rate.
//
//	make bench-seed
//	go test ./loadtest -run '^$' -bench '^BenchmarkSeedScaled$' -benchtime 1x
func BenchmarkSeedScaled(b *testing.B) { benchSeed(b, ScaledSeed) }

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
	benchSeed(b, FullSeed)
}

func benchSeed(b *testing.B, cfg SeedConfig) {
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
	var rep SeedReport
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r.Client().FlushAll(context.Background())
		redisCPU := r.CPUSeconds(b)
		b.StartTimer()
		var err error
		if rep, err = RunSeed(context.Background(), cfg); err != nil {
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
				b.Log(FirstCrowdedWindow(rep.Starts[res], int(cfg.Rate)))
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
