package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/client"
)

// The caller's span travels as the W3C traceparent header, so the gate makes
// the job's trace its child; a ctx without a span sends none.
func TestTheCallersSpanIsSentAsTraceparent(t *testing.T) {
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(`{"id":"a","topic":"jobs","partition":0,"offset":1}`))
	}))
	defer srv.Close()
	c, err := client.New(client.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	if _, err := c.Enqueue(ctx, "jobs", "a", nil); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("traceparent %q", h)
	}
	if _, err := c.Enqueue(context.Background(), "jobs", "a", nil); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h != "" {
		t.Errorf("a ctx without a span sent traceparent %q", h)
	}
}
