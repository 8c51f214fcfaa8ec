package job

import (
	"strings"
	"testing"
	"time"
)

// The envelope's traceparent belongs to the gate: a client's is dropped by
// Defaults, and the gate's travels through encode and decode unchanged.
func TestTraceparentIsTheGatesAndRoundTrips(t *testing.T) {
	j, err := Decode([]byte(`{"type":"a","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`))
	if err != nil {
		t.Fatal(err)
	}
	j.Defaults("jobs", time.Now())
	if j.Traceparent != "" {
		t.Fatalf("Defaults kept the client's traceparent %q", j.Traceparent)
	}
	if strings.Contains(string(j.AppendJSON(nil)), "traceparent") {
		t.Error("an envelope without a traceparent wrote the field")
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	j.Traceparent = tp
	back, err := Decode(j.AppendJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	if back.Traceparent != tp {
		t.Errorf("traceparent %q after a round trip, want %q", back.Traceparent, tp)
	}
}
