package gate_test

import (
	"encoding/json"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tracing"
)

// postedJob posts one job to topic "jobs" and reads back the envelope
// Kafka holds for it.
func postedJob(t *testing.T, k *testenv.KafkaCluster, gateURL, body string, header ...string) *job.Job {
	t.Helper()
	a := post(t, gateURL+"/v1/topics/jobs/jobs", body, header...)
	if a.status != http.StatusAccepted {
		t.Fatalf("%d %s", a.status, a.body)
	}
	var acc accepted
	json.Unmarshal(a.body, &acc)
	j, err := job.Decode(readRecord(t, k, "jobs", acc.Partition, acc.Offset).Value)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// Off, the gate writes no traceparent, and drops one a client put in the
// body: the envelope's is the gate's alone.
func TestUntracedGateWritesNoTraceparent(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	j := postedJob(t, k, g.url, `{"type":"a","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if j.Traceparent != "" {
		t.Errorf("tracing off, the envelope carries %q", j.Traceparent)
	}
}

// On, the produce span is a child of the client's traceparent header, names
// where Kafka put the job, and its context is the envelope's traceparent
// (not the one the client wrote in the body).
func TestTracedGateCarriesTheProduceSpanInTheEnvelope(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	defer tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))()
	k := newKafka(t)
	g := startGate(t, k, nil)
	const client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	j := postedJob(t, k, g.url, `{"type":"a","id":"j1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`, "traceparent", client)
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != tracing.SpanGateProduce {
		t.Fatalf("%d spans ended, want the produce span", len(spans))
	}
	s := spans[0]
	if s.Parent().SpanID().String() != "00f067aa0ba902b7" || s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("the produce span is not the client's child: parent %v", s.Parent())
	}
	if want := tracing.Traceparent(s.SpanContext()); j.Traceparent != want {
		t.Errorf("envelope traceparent %q, want the produce span's %q", j.Traceparent, want)
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["messaging.message.id"] != "j1" || attrs["messaging.destination.name"] != "jobs" || attrs["messaging.kafka.offset"] == "" {
		t.Errorf("the produce span's attributes: %v", attrs)
	}
}

// A bulk group's items are traces of their own, each linked to the group's
// produce span, not one giant trace.
func TestTracedBulkGroupItemsLinkToTheGroupsSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	defer tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))()
	k := newKafka(t)
	g := startGate(t, k, nil)
	a := post(t, g.url+"/v1/topics/jobs/groups", `{"id":"traced-group","type":"email","items":[{"n":1},{"n":2},{"n":3}]}`, "Content-Type", "application/json")
	if a.status != http.StatusAccepted {
		t.Fatalf("%d %s", a.status, a.body)
	}
	items, _ := groupRecords(t, k, "traced-group", 4)
	var groupSpan sdktrace.ReadOnlySpan
	itemSpans := map[string]sdktrace.ReadOnlySpan{} // by traceparent
	for _, s := range rec.Ended() {
		if len(s.Links()) == 0 {
			groupSpan = s
			continue
		}
		itemSpans[tracing.Traceparent(s.SpanContext())] = s
	}
	if groupSpan == nil {
		t.Fatal("no span for the group")
	}
	traces := map[string]bool{}
	for _, j := range items {
		s, ok := itemSpans[j.Traceparent]
		if !ok {
			t.Fatalf("item %s's traceparent %q is no item span's", j.ID, j.Traceparent)
		}
		if s.Parent().IsValid() || s.Links()[0].SpanContext.SpanID() != groupSpan.SpanContext().SpanID() {
			t.Errorf("item %s's span is not a root linked to the group's", j.ID)
		}
		traces[s.SpanContext().TraceID().String()] = true
	}
	if len(items) != 3 || len(traces) != 3 || traces[groupSpan.SpanContext().TraceID().String()] {
		t.Errorf("%d items in %d traces (the group's among them: %v), want 3 traces of their own", len(items), len(traces), traces[groupSpan.SpanContext().TraceID().String()])
	}
}
