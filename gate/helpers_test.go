package gate_test

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
)

func flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// waitFor polls cond with a short backoff until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 250*time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(wait)
	}
}

// metricValue reads a gauge or counter without labels from the gate's registry.
func metricValue(t *testing.T, g *gate.Gate, name string) float64 {
	t.Helper()
	mfs, err := g.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Counter != nil:
				return m.Counter.GetValue()
			}
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
