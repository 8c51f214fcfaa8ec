package relay

import (
	"flag"
	"io"
	"testing"
	"time"
)

// --durable-after takes a duration or replicas:N, each form clearing the
// other, and reads back as given.
func TestDurableAfterFlagForms(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if got := fs.Lookup("durable-after").DefValue; got != "3s" {
		t.Fatalf("default %q, want 3s", got)
	}
	if err := fs.Set("durable-after", "replicas:2"); err != nil {
		t.Fatal(err)
	}
	if c.DurableAfter != 0 || c.DurableReplicas != 2 || fs.Lookup("durable-after").Value.String() != "replicas:2" {
		t.Fatalf("replicas:2 gave DurableAfter %v, DurableReplicas %d", c.DurableAfter, c.DurableReplicas)
	}
	if err := fs.Set("durable-after", "5s"); err != nil {
		t.Fatal(err)
	}
	if c.DurableAfter != 5*time.Second || c.DurableReplicas != 0 {
		t.Fatalf("5s gave DurableAfter %v, DurableReplicas %d", c.DurableAfter, c.DurableReplicas)
	}
	for _, bad := range []string{"replicas:0", "replicas:x", "-1s", "soon"} {
		if err := fs.Set("durable-after", bad); err == nil {
			t.Errorf("--durable-after %s accepted", bad)
		}
	}
}
