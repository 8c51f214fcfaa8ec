package testenv_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tracing"
)

// The test bed's Jaeger takes spans from tracing.Setup, configured by the
// standard variables alone, and its query API returns them.
func TestSpansFromSetupArriveInJaeger(t *testing.T) {
	j := testenv.Jaeger(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", j.OTLPEndpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SERVICE_NAME", "testenv-jaeger")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	shutdown, err := tracing.Setup(context.Background(), "ignored", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracing.Tracer().Start(context.Background(), "hello")
	traceID := span.SpanContext().TraceID().String()
	span.End()
	if err := shutdown(context.Background()); err != nil { // flushes
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "Jaeger to return the span", func() bool {
		tr, err := j.Trace(context.Background(), traceID)
		return err == nil && tr != nil && len(tr.Spans) == 1 && tr.Spans[0].OperationName == "hello"
	})
	traces, err := j.Traces(context.Background(), "testenv-jaeger")
	if err != nil || len(traces) != 1 {
		t.Errorf("OTEL_SERVICE_NAME did not name the service: %d traces, %v", len(traces), err)
	}
}
