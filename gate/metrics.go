package gate

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	produceDuration *prometheus.HistogramVec
	batchSize       prometheus.Histogram
	inflight        prometheus.Gauge
	jobs            *prometheus.CounterVec

	// Label lookups cost a hash and a lock; cache the few combinations.
	mu       sync.RWMutex
	counters map[[2]string]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gate_requests_total", Help: "HTTP requests to the enqueue API by route and status code.",
		}, []string{"route", "code"}),
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
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gate_jobs_total", Help: "Jobs by topic and outcome: accepted (Kafka acknowledged) or rejected.",
		}, []string{"topic", "outcome"}),
		counters: map[[2]string]prometheus.Counter{},
	}
	reg.MustRegister(m.requests, m.requestDuration, m.produceDuration, m.batchSize, m.inflight, m.jobs)
	return m
}

func (m *metrics) request(route string, code int) prometheus.Counter {
	key := [2]string{route, strconv.Itoa(code)}
	m.mu.RLock()
	c, ok := m.counters[key]
	m.mu.RUnlock()
	if ok {
		return c
	}
	c = m.requests.WithLabelValues(key[0], key[1])
	m.mu.Lock()
	m.counters[key] = c
	m.mu.Unlock()
	return c
}
