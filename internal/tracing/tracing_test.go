package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceparentRoundTrips(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc, ok := Parse(tp)
	if !ok || !sc.IsSampled() {
		t.Fatalf("Parse(%q) = %v, %v", tp, sc, ok)
	}
	if got := Traceparent(sc); got != tp {
		t.Errorf("Traceparent = %q, want %q", got, tp)
	}
	unsampled, _ := Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	if got := Traceparent(unsampled); !strings.HasSuffix(got, "-00") {
		t.Errorf("an unsampled context wrote %q", got)
	}
	for _, bad := range []string{"", "x", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"} {
		if _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted a malformed traceparent", bad)
		}
	}
	if Traceparent(trace.SpanContext{}) != "" {
		t.Error("an invalid context wrote a traceparent")
	}
}

func TestSamplerFromEnv(t *testing.T) {
	for _, c := range []struct{ sampler, arg, wantErr string }{
		{"", "", ""},
		{"parentbased_traceidratio", "0.01", ""},
		{"always_off", "", ""},
		{"sometimes", "", "OTEL_TRACES_SAMPLER"},
		{"traceidratio", "2", "OTEL_TRACES_SAMPLER_ARG"},
	} {
		t.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", c.arg)
		_, err := SamplerFromEnv()
		if (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s:%s: err %v, want one naming %q", c.sampler, c.arg, err, c.wantErr)
		}
	}
}

// A span started with sluice.keep=true is recorded whatever the head
// sampler says: how a failed attempt of an unsampled trace is kept.
func TestKeepSamplerRecordsKeptSpansOfUnsampledTraces(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "")
	s, err := SamplerFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(s), sdktrace.WithSpanProcessor(rec))
	tr := tp.Tracer("test")
	_, plain := tr.Start(context.Background(), "plain")
	plain.End()
	_, kept := tr.Start(context.Background(), "kept", trace.WithAttributes(AttrKeep.Bool(true)))
	kept.End()
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != "kept" {
		names := []string{}
		for _, s := range ended {
			names = append(names, s.Name())
		}
		t.Fatalf("recorded %v, want only the kept span", names)
	}
}

func TestLogHandlerAddsTheSpansIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewTextHandler(&buf, nil))).With("part", "worker")
	sc, _ := Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "job dead", "job", "a")
	log.Info("no span")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.Contains(lines[0], "trace_id=4bf92f3577b34da6a3ce929d0e0e4736") || !strings.Contains(lines[0], "span_id=00f067aa0ba902b7") || !strings.Contains(lines[0], "part=worker") {
		t.Errorf("a line about a traced job lacks its ids: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("a line without a span got ids: %s", lines[1])
	}
}
