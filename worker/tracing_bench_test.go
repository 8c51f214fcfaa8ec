package worker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/tracing"
	"github.com/sluicehq/sluice/worker"
)

// BenchmarkWorkerNoopTracing: BenchmarkWorkerNoop's jobs under the worker's
// default configuration, with tracing off (the default; envelopes without a
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
	now := time.Now().UTC()
	r, layout := enqueueNoops(b, func(j *job.Job) {
		j.EnqueuedAt = now
		if sampled > 0 {
			flags := "00"
			if rand.Float64() < sampled {
				flags = "01"
			}
			j.Traceparent = fmt.Sprintf("00-%016x%016x-%016x-%s", rand.Uint64(), rand.Uint64()|1, rand.Uint64()|1, flags)
		}
	})
	runUntilAllDone(b, r, layout, worker.DefaultConfig())
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
