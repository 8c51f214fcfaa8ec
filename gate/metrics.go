package gate

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests        *counterCache
	requestDuration *prometheus.HistogramVec
	produceDuration *prometheus.HistogramVec
	batchSize       prometheus.Histogram
	inflight        prometheus.Gauge
	jobs            *counterCache
	groups          *prometheus.CounterVec // topic, outcome
}

// counterCache remembers the children of a two-label CounterVec: a label
// lookup costs a hash and a lock per request, and the combinations are few.
type counterCache struct {
	vec *prometheus.CounterVec
	mu  sync.RWMutex
	m   map[[2]string]prometheus.Counter
}

func newCounterCache(opts prometheus.CounterOpts, a, b string) *counterCache {
	return &counterCache{vec: prometheus.NewCounterVec(opts, []string{a, b}), m: map[[2]string]prometheus.Counter{}}
}

func (c *counterCache) with(a, b string) prometheus.Counter {
	key := [2]string{a, b}
	c.mu.RLock()
	ctr, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return ctr
	}
	ctr = c.vec.WithLabelValues(a, b)
	c.mu.Lock()
	c.m[key] = ctr
	c.mu.Unlock()
	return ctr
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: newCounterCache(prometheus.CounterOpts{
			Name: "sluice_gate_requests_total", Help: "HTTP requests to the enqueue API by route and status code.",
		}, "route", "code"),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_gate_request_duration_seconds", Help: "Enqueue request latency, from first byte read to response written.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		produceDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_gate_produce_duration_seconds", Help: "Time from handing jobs to the Kafka producer to its acknowledgement, by acks level.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 5},
		}, []string{"acks"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_gate_batch_size_jobs", Help: "Jobs per batch request.",
			Buckets: []float64{1, 10, 50, 100, 250, 500, 1000, 5000},
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_gate_inflight_requests", Help: "Enqueue requests being served now.",
		}),
		jobs: newCounterCache(prometheus.CounterOpts{
			Name: "sluice_gate_jobs_total", Help: "Jobs by topic and outcome: accepted (Kafka acknowledged), rejected (invalid or not allowed), failed (valid, but Kafka did not take them or did not answer in time: 5xx or 504), canary (heartbeat canaries, never counted as accepted).",
		}, "topic", "outcome"),
		groups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gate_groups_total", Help: "Bulk group submissions by topic and outcome: accepted (every item and the close acknowledged) or rejected.",
		}, []string{"topic", "outcome"}),
	}
	reg.MustRegister(m.requests.vec, m.requestDuration, m.produceDuration, m.batchSize, m.inflight, m.jobs.vec, m.groups)
	return m
}
