package loadtest

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// The real worker under the real coordinator: a backlog in partition 1 of
// 4 scales partition 1 only, the others stay at the base; a restarted
// worker resumes partition 1's count from its checkpoint, and the
// coordinator has nothing to say about it.
func TestWorkerAndCoordinatorScaleOnlyTheLoadedPartition(t *testing.T) {
	r, c := testenv.Redis(t), testenv.Consul(t)
	layout := queue.Layout{Stage: "scaling-test", Partitions: 4}
	ctx := context.Background()

	ccfg := coordinator.DefaultConfig()
	ccfg.Stage, ccfg.Partitions, ccfg.RedisAddr, ccfg.ConsulAddr = layout.Stage, layout.Partitions, r.Addr(), c.Addr()
	ccfg.LockDelay, ccfg.LockRetryWait = 0, 50*time.Millisecond
	ccfg.ScaleEvery, ccfg.ConsumerTTL = 100*time.Millisecond, time.Second
	ccfg.Scaling = coordinator.Params{Threshold: 5, Cycles: 2, Base: 2, MaxFactor: 4, HalfLife: time.Hour}
	co, err := coordinator.New(ccfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cctx, stopCo := context.WithCancel(ctx)
	coDone := make(chan error, 1)
	go func() { defer co.Close(); coDone <- co.Run(cctx) }()
	t.Cleanup(func() { stopCo(); <-coDone })
	testenv.WaitFor(t, 15*time.Second, "the coordinator to lead", co.Holds)

	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	startWorker := func() (*worker.Worker, func()) {
		wcfg := worker.DefaultConfig()
		wcfg.Stage, wcfg.Partitions, wcfg.RedisAddr, wcfg.Workers = layout.Stage, layout.Partitions, r.Addr(), 2
		wcfg.Maintain, wcfg.Drain = 20*time.Millisecond, 100*time.Millisecond
		w, err := worker.New(wcfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("hold", worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}))
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		var stopOnce sync.Once
		stopFn := func() { stopOnce.Do(func() { stop(); <-done }) }
		t.Cleanup(stopFn)
		return w, stopFn
	}
	w, stopW := startWorker()

	pool, err := queue.NewPool(queue.PoolConfig{Layout: layout, Addr: r.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	items := make([]queue.Item, 200)
	for i := range items {
		g := ScalingGroup(layout, 1, i%4)
		id := "hold-" + strconv.Itoa(i)
		items[i] = queue.Item{ID: id, Group: g, Topic: "t", Weight: 1, Envelope: (&job.Job{ID: id, Type: "hold", Group: g}).AppendJSON(nil)}
	}
	if _, err := pool.Enqueue(ctx, 1, items, time.Now()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "partition 1 at the max of 8", func() bool { return w.Workers(1) == 8 })
	decisions := func() float64 {
		return testenv.Metric(t, co.Registry(), "sluice_coordinator_scaling_decisions_total")
	}
	cycles := func() float64 { return testenv.Metric(t, co.Registry(), "sluice_coordinator_scaling_cycles_total") }
	from := cycles()
	testenv.WaitFor(t, 10*time.Second, "5 more cycles", func() bool { return cycles() >= from+5 })
	for _, p := range []int{0, 2, 3} {
		if n := w.Workers(p); n != 2 {
			t.Errorf("partition %d runs %d workers, want the base 2", p, n)
		}
	}
	if n := decisions(); n != 2 {
		t.Fatalf("%v decisions, want 2 (2 -> 4 -> 8 on partition 1)", n)
	}

	// A restart: the held jobs go back to ready, the new worker resumes 8.
	stopW()
	w, _ = startWorker()
	testenv.WaitFor(t, 10*time.Second, "the restarted worker at 8 on partition 1", func() bool { return w.Workers(1) == 8 })
	from = cycles()
	testenv.WaitFor(t, 10*time.Second, "5 more cycles", func() bool { return cycles() >= from+5 })
	if n := decisions(); n != 2 || w.Workers(0) != 2 {
		t.Fatalf("after the worker's restart: %v decisions, partition 0 at %d", n, w.Workers(0))
	}
	once.Do(func() { close(release) })
}

// The picture is well-formed SVG with a line per partition and panel.
func TestWriteTraceSVG(t *testing.T) {
	cfg := ScaledScaling
	rep := ScalingReport{Config: cfg, Jobs: cfg.Jobs, Elapsed: 25 * time.Second}
	for i := range 100 {
		s := ScalingSample{At: time.Duration(i) * 250 * time.Millisecond, Workers: make([]int, 4), Ready: make([]int64, 4)}
		for p := range 4 {
			s.Workers[p] = min(16, 2<<(i/12))
			s.Ready[p] = int64(max(0, 2500-25*i))
		}
		rep.Trace = append(rep.Trace, s)
	}
	var buf bytes.Buffer
	if err := WriteTraceSVG(&buf, rep, "a <test> & trace"); err != nil {
		t.Fatal(err)
	}
	paths := 0
	dec := xml.NewDecoder(&buf)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "path" {
			paths++
		}
	}
	if paths != 8 {
		t.Fatalf("%d paths, want 8 (4 partitions x 2 panels)", paths)
	}
	if WriteTraceSVG(io.Discard, ScalingReport{}, "") == nil {
		t.Fatal("an empty trace was drawn")
	}
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
func BenchmarkScalingScaled(b *testing.B) { benchScaling(b, ScaledScaling) }

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
	benchScaling(b, FullScaling)
}

func benchScaling(b *testing.B, cfg ScalingConfig) {
	r := testenv.Redis(b)
	c := testenv.Consul(b)
	cfg.RedisAddr, cfg.ConsulAddr = r.Addr(), c.Addr()
	if os.Getenv("SLUICE_BENCH_SCALING_FIXED") == "1" {
		cfg.Dynamic = false
	}
	if testing.Verbose() {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	var rep ScalingReport
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r.Client().FlushAll(context.Background())
		b.StartTimer()
		var err error
		if rep, err = RunScaling(context.Background(), cfg); err != nil {
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
		if err := WriteTraceSVG(f, rep, title); err != nil {
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
func traceTable(rep ScalingReport, step time.Duration) string {
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
