package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/ops"
)

type metrics struct {
	reg       *prometheus.Registry
	jobs      *prometheus.CounterVec // outcome
	execution prometheus.Histogram
	queueWait prometheus.Histogram
	inflight  prometheus.Gauge
	workers   *prometheus.GaugeVec // partition
}

func newMetrics() *metrics {
	buckets := []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300}
	m := &metrics{
		reg: ops.NewRegistry(),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_worker_jobs_total",
			Help: "Job attempts by outcome: done, retried, dead, lost (lease expired while running), reaped (expired leases returned), released (handed back on shutdown).",
		}, []string{"outcome"}),
		execution: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_worker_execution_seconds", Help: "Time from claim to the handler's return, per attempt.", Buckets: buckets,
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_worker_queue_wait_seconds", Help: "Time from the gate accepting a job to its first attempt starting.", Buckets: buckets,
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_worker_inflight_jobs", Help: "Jobs whose handler runs now.",
		}),
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_worker_workers", Help: "Goroutines that run jobs, per partition.",
		}, []string{"partition"}),
	}
	m.reg.MustRegister(m.jobs, m.execution, m.queueWait, m.inflight, m.workers)
	return m
}

// Registry holds the worker's metrics.
func (w *Worker) Registry() *prometheus.Registry { return w.m.reg }
