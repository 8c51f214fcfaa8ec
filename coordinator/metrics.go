package coordinator

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	lockHeld        prometheus.Gauge
	lockAcquired    prometheus.Counter
	groupsCompleted prometheus.Counter
	callbacks       *prometheus.CounterVec // outcome
	attempts        *prometheus.CounterVec // result
	deliveryLatency prometheus.Histogram
	aggregation     prometheus.Histogram
	delivering      prometheus.Gauge
	watchedQueues   prometheus.Gauge
	redisErrors     prometheus.Counter

	// The scaler's, per partition; reset when it stops (a standby shows none).
	scaleReady     *prometheus.GaugeVec
	scaleWorkers   *prometheus.GaugeVec
	scaleConsumers *prometheus.GaugeVec
	scaleBusy      *prometheus.GaugeVec
	scalePWQD      *prometheus.GaugeVec
	scaleTarget    *prometheus.GaugeVec
	scaleDecisions *prometheus.CounterVec // partition, type
	scaleCycles    prometheus.Counter

	// observe's, reset when it stops.
	inflight, delayed, dead *prometheus.GaugeVec // topic, partition
	funnel                  *prometheus.GaugeVec // topic, stage
}

func (m *metrics) resetObserved() {
	for _, g := range []*prometheus.GaugeVec{m.inflight, m.delayed, m.dead, m.funnel} {
		g.Reset()
	}
}

func (m *metrics) resetScaling() {
	for _, g := range []*prometheus.GaugeVec{m.scaleReady, m.scaleWorkers, m.scaleConsumers, m.scaleBusy, m.scalePWQD, m.scaleTarget} {
		g.Reset()
	}
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		lockHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_coordinator_lock_held", Help: "1 while this coordinator holds the coordinator lock and works; 0 while it stands by.",
		}),
		lockAcquired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_coordinator_lock_acquisitions_total", Help: "Times this coordinator acquired the coordinator lock.",
		}),
		groupsCompleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_coordinator_groups_completed_total", Help: "Completed bulk groups the watcher finished: callback delivered, given up, or none to send.",
		}),
		callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_coordinator_callbacks_total", Help: "Group callbacks by outcome: delivered (a 2xx answer), failed (given up), none (the group had no callback URL).",
		}, []string{"outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_coordinator_callback_attempts_total", Help: "Callback POSTs by result: 2xx, 3xx (redirects are not followed), 4xx, 5xx, error (no answer: refused, timed out, ...).",
		}, []string{"result"}),
		deliveryLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_coordinator_callback_delivery_seconds", Help: "Time from a group's completion (its last job ended) to its callback's 2xx answer.",
			Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 1800, 3600, 21600, 86400},
		}),
		aggregation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_coordinator_aggregation_seconds", Help: "Time to read a completed group's items and build its callback body.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60},
		}),
		delivering: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_coordinator_groups_delivering", Help: "Completed groups being aggregated or delivered now, retries included.",
		}),
		watchedQueues: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_coordinator_watched_queues", Help: "Queue partitions (a topic's partition) the group watchers watch now: the stage's topics x its partitions while this coordinator holds the lock, else 0.",
		}),
		redisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_coordinator_redis_errors_total", Help: "Redis calls of the group watchers and the scaler that failed and were retried.",
		}),
		scaleReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_scaling_ready_jobs", Help: "Ready depth per partition at the last scaling cycle, summed over the topics' queues: jobs a consumer could claim now.",
		}, []string{"partition"}),
		scaleWorkers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_scaling_workers", Help: "Live workers per partition at the last scaling cycle: the pool sizes of the live consumers' heartbeats, summed.",
		}, []string{"partition"}),
		scaleConsumers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_scaling_consumers", Help: "Live consumers per partition (heartbeat younger than --consumer-ttl).",
		}, []string{"partition"}),
		scaleBusy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_scaling_busy_workers", Help: "Workers per partition the load kept busy on average since the last cycle (0 while unknown).",
		}, []string{"partition"}),
		scalePWQD: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_scaling_pwqd", Help: "Per-worker queue depth per partition: ready jobs / live workers (+Inf: jobs and no worker).",
		}, []string{"partition"}),
		scaleTarget: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_scaling_target_workers", Help: "Workers per consumer the scaler wants for the partition (the last command's targetWorkers, or the checkpoint it started from).",
		}, []string{"partition"}),
		scaleDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_coordinator_scaling_decisions_total", Help: "Commands the scaler pushed, per partition and type (SCALE_UP, SCALE_DOWN).",
		}, []string{"partition", "type"}),
		scaleCycles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_coordinator_scaling_cycles_total", Help: "Scaling cycles run (one reads every partition).",
		}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_inflight_jobs", Help: "Jobs leased by workers per queue partition (topic, partition): running, or claimed ahead and waiting for a slot.",
		}, []string{"topic", "partition"}),
		delayed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_delayed_jobs", Help: "Jobs waiting in the delayed set per queue partition (topic, partition): scheduled, retrying, or throttled to a rate-limit slot.",
		}, []string{"topic", "partition"}),
		dead: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_dead_jobs", Help: "Jobs in the dead set per queue partition (topic, partition; capped by the workers' --dead-max).",
		}, []string{"topic", "partition"}),
		funnel: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_coordinator_funnel_jobs", Help: "The stage funnel: user jobs per topic and stage since the Redis data began (relayed, deduplicated, dropped, dead_lettered, requeued, dequeued, completed, retried, dead, cancelled), summed over the partitions; see docs/stats.md.",
		}, []string{"topic", "stage"}),
	}
	reg.MustRegister(m.inflight, m.delayed, m.dead, m.funnel)
	reg.MustRegister(m.lockHeld, m.lockAcquired, m.groupsCompleted, m.callbacks, m.attempts,
		m.deliveryLatency, m.aggregation, m.delivering, m.watchedQueues, m.redisErrors,
		m.scaleReady, m.scaleWorkers, m.scaleConsumers, m.scaleBusy, m.scalePWQD, m.scaleTarget, m.scaleDecisions, m.scaleCycles)
	return m
}
