package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/tracing"
)

// The worker's spans (docs/tracing.md): the job's waits in Redis and each
// attempt of its handler, children of the gate's produce span named by the
// envelope's traceparent. Nothing here runs unless tracing is on and the
// envelope carries a trace context.

// traceJob returns ctx with the job's trace context as its remote parent (so
// log lines about it carry its trace id), and, when the gate's head decision
// sampled the trace, records the wait in Redis before a first attempt's
// claim: from when the job was due (run_at, else enqueued_at: the gate's
// clock; that wait includes the hops before Redis, which have spans of their
// own) to now. An unsampled trace gets no spans here: parsing its context is
// all it costs, unless an attempt fails (endAttempt).
func (c *consumer) traceJob(ctx context.Context, h *heldJob, j *job.Job) context.Context {
	sc, ok := tracing.Parse(j.Traceparent)
	if !ok {
		return ctx
	}
	h.trace = sc
	ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	if h.claimed.Attempt == 1 && sc.IsSampled() {
		since := j.EnqueuedAt
		if j.RunAt.After(since) {
			since = j.RunAt
		}
		if !since.IsZero() {
			c.traceWait(ctx, h, "ready", since, c.w.cfg.Now())
		}
	}
	return ctx
}

// traceWait records a wait of the job in Redis, from start to end: "ready"
// (on its lane), "throttled" (in delayed for its rate-limit slot) or
// "retry_backoff" (in delayed until its next try). A span may end in the
// future: the time the job is due.
func (c *consumer) traceWait(ctx context.Context, h *heldJob, reason string, start, end time.Time) {
	if !h.trace.IsSampled() {
		return
	}
	ctx = trace.ContextWithRemoteSpanContext(ctx, h.trace)
	_, span := tracing.Tracer().Start(ctx, tracing.SpanRedisWait, trace.WithTimestamp(start),
		trace.WithAttributes(append(c.jobAttrs(h), tracing.AttrWaitReason.String(reason))...))
	span.End(trace.WithTimestamp(end))
}

func (c *consumer) jobAttrs(h *heldJob) []attribute.KeyValue {
	a := []attribute.KeyValue{
		tracing.AttrSystem.String("sluice"),
		tracing.AttrTopic.String(h.q.Topic), tracing.AttrRedisPartition.Int(c.part),
		tracing.AttrJobID.String(h.claimed.ID), tracing.AttrJobType.String(h.jobType),
		tracing.AttrAttempt.Int(h.claimed.Attempt),
	}
	if h.claimed.Group != "" {
		a = append(a, tracing.AttrGroup.String(h.claimed.Group))
	}
	return a
}

// startAttempt starts the span of one attempt of the handler; the handler's
// ctx carries it, so user code can add spans of its own.
func (c *consumer) startAttempt(ctx context.Context, h *heldJob, j *job.Job, maxAttempts int, start time.Time) (context.Context, trace.Span) {
	attrs := append(c.jobAttrs(h), tracing.AttrMaxAttempts.Int(maxAttempts))
	if j.Resource != "" {
		attrs = append(attrs, tracing.AttrResource.String(j.Resource))
	}
	return tracing.Tracer().Start(trace.ContextWithRemoteSpanContext(ctx, h.trace), tracing.SpanWorkerAttempt,
		trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// endAttempt records the attempt's outcome: succeeded, retry, dead or lost.
// span is nil for a trace the head sampler dropped: a failed attempt of one
// is recorded all the same, as a root span of its own linked to the job's
// trace (sluice.keep=true), so no failure goes unseen (docs/tracing.md,
// Sampling).
func (c *consumer) endAttempt(ctx context.Context, span trace.Span, h *heldJob, maxAttempts int, herr error, lost bool, start, end time.Time) {
	if span == nil && herr == nil {
		return
	}
	outcome := "succeeded"
	switch {
	case lost:
		outcome = "lost"
	case herr != nil && (IsPermanent(herr) || h.claimed.Attempt >= maxAttempts):
		outcome = "dead"
	case herr != nil:
		outcome = "retry"
	}
	if span != nil {
		span.SetAttributes(tracing.AttrOutcome.String(outcome))
		tracing.RecordError(span, herr)
		span.End(trace.WithTimestamp(end))
		if herr == nil || span.SpanContext().IsSampled() {
			return
		}
	}
	attrs := append(c.jobAttrs(h), tracing.AttrMaxAttempts.Int(maxAttempts), tracing.AttrOutcome.String(outcome), tracing.AttrKeep.Bool(true))
	_, kept := tracing.Tracer().Start(context.WithoutCancel(ctx), tracing.SpanWorkerAttempt, trace.WithNewRoot(),
		trace.WithLinks(trace.Link{SpanContext: h.trace}), trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	tracing.RecordError(kept, herr)
	kept.End(trace.WithTimestamp(end))
}
