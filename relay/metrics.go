package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/queue"
)

type metrics struct {
	jobs          *prometheus.CounterVec // topic, outcome
	lag           *prometheus.GaugeVec   // topic, partition
	rateWait      *prometheus.CounterVec // topic
	ratePaused    *prometheus.GaugeVec   // topic
	rateLimit     *prometheus.GaugeVec   // topic
	memPaused     *prometheus.GaugeVec   // redis
	memRatio      *prometheus.GaugeVec   // redis
	lockHeld      *prometheus.GaugeVec   // topic
	redisRetries  *prometheus.CounterVec // topic
	batchSize     prometheus.Histogram   //
	enqueueTime   prometheus.Histogram   //
	lockAcquired  *prometheus.CounterVec // topic
	consumeErrors *prometheus.CounterVec // topic
	rewinds       *prometheus.CounterVec // topic
	replicaWaits  *prometheus.CounterVec // topic
	logChanges    *prometheus.CounterVec // topic, partition
	truncations   *prometheus.CounterVec // topic, partition
}

func newMetrics(reg prometheus.Registerer, outage *queue.Outage) *metrics {
	m := &metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_relay_jobs_total",
			Help: "Jobs read from Kafka by topic and outcome: queued, delayed, duplicate (deduped by id), dead_lettered (poison, to <topic>.dlq), requeued (a job-specific Redis error, produced to Kafka again), fenced (refused: a newer lock holder wrote), shadowed (--shadow: read, not written).",
		}, []string{"topic", "outcome"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_relay_lag_messages", Help: "Messages in Kafka not yet relayed, by topic and partition (high watermark minus next offset).",
		}, []string{"topic", "partition"}),
		rateWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_relay_rate_wait_seconds_total", Help: "Time batches spent waiting for the topic's relay rate (including while paused).",
		}, []string{"topic"}),
		ratePaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_relay_rate_paused", Help: "1 while the topic's relay rate in Consul is \"paused\".",
		}, []string{"topic"}),
		rateLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_relay_rate_limit_jobs_per_second", Help: "The topic's relay rate in force; +Inf when unlimited, 0 when paused.",
		}, []string{"topic"}),
		memPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_relay_memory_guard_paused", Help: "1 while the memory guard holds writes to this Redis back.",
		}, []string{"redis"}),
		memRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_relay_redis_memory_ratio", Help: "used_memory / maxmemory of this Redis at the last sample.",
		}, []string{"redis"}),
		lockHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_relay_lock_held", Help: "1 while this relay holds the topic's Consul lock and relays it.",
		}, []string{"topic"}),
		lockAcquired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_relay_lock_acquisitions_total", Help: "Times this relay acquired the topic's lock.",
		}, []string{"topic"}),
		redisRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_relay_redis_retries_total", Help: "Batches retried because Redis could not serve (down, loading, out of memory).",
		}, []string{"topic"}),
		rewinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_relay_rewinds_total", Help: "Times the relay went back to the committed offsets because Redis restarted under writes not yet durable (--durable-after).",
		}, []string{"topic"}),
		replicaWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_relay_replica_waits_failed_total", Help: "WAITs (--durable-after replicas:N) that fewer replicas answered in time, or that failed: the batch was written and waited for again, its offsets held back.",
		}, []string{"topic"}),
		logChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_relay_watermark_log_changes_total", Help: "Times a Redis partition's watermark of this Kafka partition belonged to another log of the topic (another topic id: deleted and created again): the batch was applied, not deduplicated against the old offsets, so records may run again.",
		}, []string{"topic", "partition"}),
		truncations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_relay_watermark_truncations_total", Help: "Times a Redis partition's watermark of this Kafka partition lay at or past the log's end when the relay started it: Kafka truncated the log (an unclean leader election); the watermark was lowered so that the records written at those offsets run.",
		}, []string{"topic", "partition"}),
		consumeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_relay_consume_errors_total", Help: "Errors reading from Kafka.",
		}, []string{"topic"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_relay_batch_size_jobs", Help: "Jobs per relayed batch.",
			Buckets: []float64{1, 8, 32, 128, 512, 1024, 4096},
		}),
		enqueueTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_relay_enqueue_duration_seconds", Help: "Time to enqueue one batch into Redis, retries included.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, 1, 5},
		}),
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_relay_redis_unavailable_seconds_total",
		Help: "Time the relay waited for a Redis that could not serve or could not write (down, loading, MISCONF: unable to persist, read-only, OOM): writes retried, nothing dead-lettered; alert when it grows.",
	}, outage.Seconds), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_relay_redis_unavailable", Help: "1 while the relay waits for a Redis that cannot serve or cannot write.",
	}, func() float64 { return b2f(outage.Waiting()) }))
	reg.MustRegister(m.jobs, m.lag, m.rateWait, m.ratePaused, m.rateLimit, m.memPaused, m.memRatio,
		m.lockHeld, m.lockAcquired, m.redisRetries, m.consumeErrors, m.rewinds, m.replicaWaits, m.logChanges, m.truncations, m.batchSize, m.enqueueTime)
	return m
}
