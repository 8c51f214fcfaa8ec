package gate_test

import (
	"encoding/json"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/tracing"
)

// Off, the gate writes no traceparent, and drops one a client put in the
// body: the envelope's is the gate's alone.
func TestUntracedGateWritesNoTraceparent(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	a := post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"a","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if a.status != http.StatusAccepted {
		t.Fatalf("%d %s", a.status, a.body)
	}
	var acc accepted
	json.Unmarshal(a.body, &acc)
	j, err := job.Decode(readRecord(t, k, "jobs", acc.Partition, acc.Offset).Value)
	if err != nil {
		t.Fatal(err)
	}
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
	a := post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"a","id":"j1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`, "traceparent", client)
	if a.status != http.StatusAccepted {
		t.Fatalf("%d %s", a.status, a.body)
	}
	var acc accepted
	json.Unmarshal(a.body, &acc)
	j, err := job.Decode(readRecord(t, k, "jobs", acc.Partition, acc.Offset).Value)
	if err != nil {
		t.Fatal(err)
	}
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
