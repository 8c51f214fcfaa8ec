package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tracing"
	"github.com/sluicehq/sluice/worker"
)

// A sampled job's attempt is a span under the gate's, and the handler's ctx
// carries it; a job whose trace the head sampler dropped gets no spans,
// except for a failed attempt, kept as a root span linked to the job's trace.
func TestAttemptSpansAndKeptFailures(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	sampler, err := tracing.SamplerFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	defer tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(rec)))()

	r := testenv.Redis(t)
	layout := queue.Keyspace{Stage: "trace", Partitions: 2}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	const (
		sampled   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	)
	var items []queue.Item
	for id, tp := range map[string]string{"ok": sampled, "fails": unsampled} {
		env := (&job.Job{ID: id, Type: "t", Topic: "jobs", EnqueuedAt: time.Now().UTC(), MaxAttempts: 1, Traceparent: tp}).AppendJSON(nil)
		items = append(items, queue.Item{ID: id, Topic: "jobs", Weight: 1, Envelope: env})
	}
	if _, err := p.Enqueue(ctx, 1, items, time.Now()); err != nil {
		t.Fatal(err)
	}
	cfg := worker.DefaultConfig()
	cfg.Stage, cfg.Partitions, cfg.RedisAddr, cfg.Listen = layout.Stage, layout.Partitions, r.Addr(), ""
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	handlerSpan := make(chan trace.SpanContext, 1)
	w.Handle("t", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if j.ID == "fails" {
			return nil, errors.New("boom")
		}
		handlerSpan <- trace.SpanContextFromContext(ctx)
		return nil, nil
	}))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	find := func(pred func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
		for _, s := range rec.Ended() {
			if pred(s) {
				return s
			}
		}
		return nil
	}
	attr := func(s sdktrace.ReadOnlySpan, k string) string {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == k {
				return kv.Value.Emit()
			}
		}
		return ""
	}
	testenv.WaitFor(t, 10*time.Second, "both jobs' attempt spans", func() bool {
		n := 0
		for _, s := range rec.Ended() {
			if s.Name() == tracing.SpanWorkerAttempt {
				n++
			}
		}
		return n == 2
	})
	ok := find(func(s sdktrace.ReadOnlySpan) bool {
		return attr(s, "messaging.message.id") == "ok" && s.Name() == tracing.SpanWorkerAttempt
	})
	if ok.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || ok.Parent().SpanID().String() != "00f067aa0ba902b7" || attr(ok, "sluice.outcome") != "succeeded" {
		t.Errorf("the sampled job's attempt: trace %s parent %s outcome %q", ok.SpanContext().TraceID(), ok.Parent().SpanID(), attr(ok, "sluice.outcome"))
	}
	if got := <-handlerSpan; got.SpanID() != ok.SpanContext().SpanID() {
		t.Errorf("the handler's ctx carries span %s, want the attempt's %s", got.SpanID(), ok.SpanContext().SpanID())
	}
	if find(func(s sdktrace.ReadOnlySpan) bool {
		return attr(s, "messaging.message.id") == "ok" && s.Name() == tracing.SpanRedisWait
	}) == nil {
		t.Error("the sampled job has no wait span")
	}
	kept := find(func(s sdktrace.ReadOnlySpan) bool { return attr(s, "messaging.message.id") == "fails" })
	if kept == nil || kept.Parent().IsValid() || len(kept.Links()) != 1 || kept.Links()[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		attr(kept, "sluice.outcome") != "dead" || attr(kept, "sluice.keep") != "true" {
		t.Fatalf("the unsampled job's failure was not kept as a linked root span: %+v", kept)
	}
	for _, s := range rec.Ended() {
		if attr(s, "messaging.message.id") == "fails" && s != kept {
			t.Errorf("the unsampled job got span %s", s.Name())
		}
	}
}
