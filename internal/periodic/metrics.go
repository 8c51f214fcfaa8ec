package periodic

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the scheduler's, per schedule; a nil *Metrics counts
// nothing. deploy/prometheus/alerts.yml alerts on a next fire time left in
// the past (SluicePeriodicScheduleLate).
type Metrics struct {
	fires, catchUps *prometheus.CounterVec
	skips, errors   *prometheus.CounterVec
	nextFire        *prometheus.GaugeVec
	lastFire        *prometheus.GaugeVec
}

// NewMetrics registers the scheduler's metrics with reg under part's name
// (sluice_<part>_periodic_...).
func NewMetrics(reg prometheus.Registerer, part string) *Metrics {
	name := func(n string) string { return "sluice_" + part + "_periodic_" + n }
	m := &Metrics{
		fires:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("fires_total"), Help: "Jobs posted for a schedule's slots and run-nows."}, []string{"schedule"}),
		catchUps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("catchups_total"), Help: "Missed slots fired late (the schedule's catch_up)."}, []string{"schedule"}),
		skips:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("skips_total"), Help: "Slots not fired: reason missed (older than grace, beyond catch_up), paused, or refused (the gate refused the job for good, a 4xx such as an unknown topic)."}, []string{"schedule", "reason"}),
		errors:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("errors_total"), Help: "Failures: kind post (the gate failed or was unreachable; retried), refused (the gate refused the job for good: not retried) or schedule (a refused value; the last good one stays)."}, []string{"schedule", "kind"}),
		nextFire: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("next_fire_timestamp_seconds"), Help: "When the schedule's next slot is due (Unix seconds); in the past by more than its grace means it did not fire."}, []string{"schedule"}),
		lastFire: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("last_fire_timestamp_seconds"), Help: "When the schedule last posted a job (Unix seconds)."}, []string{"schedule"}),
	}
	reg.MustRegister(m.fires, m.catchUps, m.skips, m.errors, m.nextFire, m.lastFire)
	return m
}

func (m *Metrics) fired(name string, at time.Time) {
	if m != nil {
		m.fires.WithLabelValues(name).Inc()
		m.lastFire.WithLabelValues(name).Set(float64(at.UnixMilli()) / 1e3)
	}
}

func (m *Metrics) caughtUp(name string) {
	if m != nil {
		m.catchUps.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) skipped(name, reason string, n int) {
	if m != nil && n > 0 {
		m.skips.WithLabelValues(name, reason).Add(float64(n))
	}
}

func (m *Metrics) errored(name, kind string) {
	if m != nil {
		m.errors.WithLabelValues(name, kind).Inc()
	}
}

func (m *Metrics) next(name string, at time.Time) {
	if m == nil {
		return
	}
	if at.IsZero() {
		m.nextFire.DeleteLabelValues(name)
		return
	}
	m.nextFire.WithLabelValues(name).Set(float64(at.UnixMilli()) / 1e3)
}

// forget drops a deleted schedule's gauges (its counters stay, as counters do).
func (m *Metrics) forget(name string) {
	if m != nil {
		m.nextFire.DeleteLabelValues(name)
		m.lastFire.DeleteLabelValues(name)
	}
}
