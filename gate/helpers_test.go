package gate_test

import (
	"flag"
	"io"
	"testing"

	"github.com/sluicehq/sluice/gate"
)

func flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
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
