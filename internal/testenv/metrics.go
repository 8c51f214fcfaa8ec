package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric sums the values of a counter, gauge or histogram (its count)
// named name, over the series whose labels match the pairs given
// ("outcome", "done", "type", "echo"); no pairs sums every series.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labelPairs ...string) float64 {
	t.Helper()
	if len(labelPairs)%2 != 0 {
		t.Fatalf("testenv.Metric: label pairs %q are not pairs", labelPairs)
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("testenv.Metric: gathering: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i < len(labelPairs); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labelPairs[i] && l.GetValue() == labelPairs[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}
