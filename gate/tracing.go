package gate

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/tracing"
)

// startProduce starts the gate's produce span (docs/tracing.md): a child of
// the client's traceparent header, else a new root. Called only when
// tracing.Enabled().
func startProduce(r *http.Request, topic string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return tracing.Tracer().Start(ctx, tracing.SpanGateProduce,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(append(attrs, tracing.AttrSystem.String("kafka"), tracing.AttrTopic.String(topic))...))
}

// jobAttrs names a job on a span.
func jobAttrs(j *job.Job) []attribute.KeyValue {
	a := []attribute.KeyValue{tracing.AttrJobID.String(j.ID), tracing.AttrJobType.String(j.Type)}
	if j.Group != "" {
		a = append(a, tracing.AttrGroup.String(j.Group))
	}
	return a
}

// endProduce records where Kafka put the record, or why it did not.
func endProduce(span trace.Span, res kafka.Result, err error) {
	if err == nil {
		err = res.Err
	}
	if err != nil {
		tracing.RecordError(span, err)
	} else {
		span.SetAttributes(tracing.AttrKafkaPartition.String(strconv.Itoa(int(res.Partition))), tracing.AttrKafkaOffset.Int64(res.Offset))
	}
	span.End()
}

// itemTrace starts and ends a bulk group item's own root span, linked to the
// group's, and returns its traceparent for the item's envelope.
func itemTrace(ctx context.Context, group trace.Span, topic string, j *job.Job) string {
	_, span := tracing.Tracer().Start(ctx, tracing.SpanGateProduce,
		trace.WithNewRoot(),
		trace.WithLinks(trace.Link{SpanContext: group.SpanContext()}),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(append(jobAttrs(j), tracing.AttrSystem.String("kafka"), tracing.AttrTopic.String(topic))...))
	span.End()
	return tracing.Traceparent(span.SpanContext())
}
