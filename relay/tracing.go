package relay

import (
	"context"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/tracing"
)

// batchTrace gathers, while tracing is on, the jobs of one relayed batch
// whose envelopes carry the gate's trace context, to give each two spans
// once Redis answered (docs/tracing.md): the wait in Kafka, from the
// record's timestamp to the relay's fetch, and the relay's write.
type batchTrace struct {
	received time.Time
	jobs     map[string]tracedRecord // by job id
}

type tracedRecord struct {
	parent   trace.SpanContext
	m        *sarama.ConsumerMessage
	enqueued time.Time
	jobType  string
}

func (b *batchTrace) add(j *job.Job, m *sarama.ConsumerMessage) {
	sc, ok := tracing.Parse(j.Traceparent)
	if !ok || !sc.IsSampled() {
		return // the gate's head decision stands: no spans for its trace
	}
	if b.jobs == nil {
		b.jobs = map[string]tracedRecord{}
	}
	b.jobs[j.ID] = tracedRecord{parent: sc, m: m, enqueued: j.EnqueuedAt, jobType: j.Type}
}

// end records the spans of the traced jobs among items, whose enqueue
// ended now with results (or err for the whole batch).
func (b *batchTrace) end(topic string, layout queue.Keyspace, items []queue.Item, results []queue.Result, err error) {
	if len(b.jobs) == 0 {
		return
	}
	now := time.Now()
	tr := tracing.Tracer()
	for i := range items {
		it := &items[i]
		rec, ok := b.jobs[it.ID]
		if !ok {
			continue
		}
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), rec.parent)
		attrs := trace.WithAttributes(
			tracing.AttrSystem.String("kafka"), tracing.AttrTopic.String(topic),
			tracing.AttrKafkaPartition.String(strconv.Itoa(int(rec.m.Partition))), tracing.AttrKafkaOffset.Int64(rec.m.Offset),
			tracing.AttrJobID.String(it.ID), tracing.AttrJobType.String(rec.jobType))
		// The record's timestamp is the producer's (the gate's) clock;
		// enqueued_at when a producer left it unset.
		since := rec.m.Timestamp
		if since.IsZero() || since.Year() < 2000 {
			since = rec.enqueued
		}
		_, wait := tr.Start(ctx, tracing.SpanKafkaWait, trace.WithTimestamp(since), attrs)
		wait.End(trace.WithTimestamp(b.received))
		_, write := tr.Start(ctx, tracing.SpanRelayWrite, trace.WithTimestamp(b.received), trace.WithSpanKind(trace.SpanKindConsumer), attrs,
			trace.WithAttributes(tracing.AttrRedisPartition.Int(layout.PartitionOfJob(it.Group, it.ID))))
		switch {
		case err != nil:
			tracing.RecordError(write, err)
		case i < len(results):
			write.SetAttributes(tracing.AttrOutcome.String(results[i].Outcome.String()))
			if results[i].Err != nil {
				tracing.RecordError(write, results[i].Err)
			}
		}
		write.End(trace.WithTimestamp(now))
	}
}
