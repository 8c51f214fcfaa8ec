package gate_test

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/internal/tracing"
	"github.com/sluicehq/sluice/loadtest/openloop"
)

// The cost of tracing on the gate's handler (docs/tracing.md): off (the
// default), on with 1% of the traces sampled (parentbased_traceidratio
// 0.01: every job gets a span and a traceparent, 1% are exported), and on
// with all sampled. Spans go through the SDK's batch processor to an
// exporter that drops them, so the numbers are sluice's and the SDK's, not
// a collector's.
//
//	go test ./gate -run '^$' -bench Tracing -benchtime 5s
func BenchmarkHandlerSingleJobTracing(b *testing.B) {
	benchTracing(b, func(b *testing.B) { benchHandler(b, "/v1/topics/jobs/jobs", openloop.Envelope(1), 1) })
}

func BenchmarkHandlerBatch100Tracing(b *testing.B) {
	benchTracing(b, func(b *testing.B) { benchHandler(b, "/v1/topics/jobs/jobs:batch", openloop.NDJSON(100), 100) })
}

func benchTracing(b *testing.B, run func(*testing.B)) {
	b.Run("off", run)
	for _, c := range []struct {
		name  string
		ratio float64
	}{{"on-sampled-1pct", 0.01}, {"on-sampled-100pct", 1}} {
		b.Run(c.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.ratio))),
				sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			defer tp.Shutdown(b.Context())
			defer tracing.Use(tp)()
			run(b)
		})
	}
}
