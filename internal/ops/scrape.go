package ops

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is a parsed /metrics page, by metric family name.
type Families map[string]*dto.MetricFamily

// ParseMetrics reads a /metrics page in Prometheus's text format.
func ParseMetrics(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// Scrape GETs url (a part's /metrics) with client and parses it: what
// `sluice stats` reads of the gates and the load generator of every part.
func Scrape(ctx context.Context, client *http.Client, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("%s: answered %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// Value is a counter's, gauge's or untyped metric's value; NaN for other
// types, so that a sum can skip them.
func Value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

// Label is a metric's label value ("" when it has none of that name).
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
