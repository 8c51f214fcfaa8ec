package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tracing"
	"github.com/sluicehq/sluice/worker"
)

// BenchmarkWorkerNoopTracing: BenchmarkWorkerNoop's default (prefetch 64,
// claims of 32) with tracing off (the default; envelopes without a
// traceparent, as the gate writes them then) and on with 1% of the traces
// sampled (every envelope carries a traceparent, as the gate writes them
// when tracing is on: 1% with the sampled flag). Sampled jobs get their
// ready-wait and attempt spans; spans go through the SDK's batch processor
// to an exporter that drops them (docs/tracing.md).
//
//	go test ./worker -run '^$' -bench WorkerNoopTracing -benchtime 50000x
func BenchmarkWorkerNoopTracing(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchWorkerTraced(b, 0) })
	b.Run("on-sampled-1pct", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		defer tp.Shutdown(context.Background())
		defer tracing.Use(tp)()
		benchWorkerTraced(b, 0.01)
	})
}

func benchWorkerTraced(b *testing.B, sampled float64) {
	r := testenv.Redis(b)
	layout := queue.Layout{Stage: "bench", Partitions: 8}
	p, err := queue.NewPool(queue.PoolConfig{Layout: layout, Addr: r.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	p.LoadScripts(ctx)
	items := make([]queue.Item, 0, 1000)
	now := time.Now().UTC()
	for i := 0; i < b.N; i++ {
		id, g := "j"+strconv.Itoa(i), "g"+strconv.Itoa(i%100)
		j := &job.Job{ID: id, Type: "noop", Group: g, Topic: "jobs", EnqueuedAt: now}
		if sampled > 0 {
			flags := "00"
			if rand.Float64() < sampled {
				flags = "01"
			}
			j.Traceparent = fmt.Sprintf("00-%016x%016x-%016x-%s", rand.Uint64(), rand.Uint64()|1, rand.Uint64()|1, flags)
		}
		items = append(items, queue.Item{ID: id, Group: g, Topic: "jobs", Weight: 1, Envelope: j.AppendJSON(nil)})
		if len(items) == cap(items) || i == b.N-1 {
			if _, err := p.Enqueue(ctx, 1, items, time.Now()); err != nil {
				b.Fatal(err)
			}
			items = items[:0]
		}
	}
	cfg := worker.DefaultConfig()
	cfg.Stage, cfg.Partitions, cfg.RedisAddr = layout.Stage, layout.Partitions, r.Addr()
	cfg.Workers = 8
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	w.HandleOther(worker.Noop)
	b.ResetTimer()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	testenv.WaitFor(b, 10*time.Minute, "every job done", func() bool {
		total := 0
		for part := range layout.Partitions {
			n, _ := r.Client().HGet(ctx, layout.Keys(queue.Queue{Topic: "jobs", Part: part}).Stats(), "done").Int()
			total += n
		}
		return total >= b.N
	})
	b.StopTimer()
	stop()
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
