package funnel

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
)

// Sources say where Gather reads the optional inputs.
type Sources struct {
	// Kafka, when it names brokers, is read for the relay's lag of every
	// topic, as consumer group <ConsumerGroup>.<topic>.
	Kafka         *kafka.Config
	ConsumerGroup string
	// GateMetrics are the gates' /metrics URLs.
	GateMetrics []string
	// GateHTTP reads GateMetrics: the TLS of gates serving HTTPS. nil:
	// http.DefaultClient.
	GateHTTP *http.Client
	// KafkaTimeout bounds the dial to Kafka; 0: 5 s.
	KafkaTimeout time.Duration
	// Topics are read besides those the relays registered (see
	// queue.Pool.Topics).
	Topics []string
}

// RedisError is Gather's failure to read Redis, the report's backbone.
type RedisError struct{ Err error }

func (e *RedisError) Error() string { return "Redis: " + e.Err.Error() }
func (e *RedisError) Unwrap() error { return e.Err }

// Redis is what Gather does in Redis (a *queue.Pool has it): a caller
// lists it in its own Redis surface.
type Redis interface {
	Topics(ctx context.Context, also ...string) ([]string, error)
	Keyspace() queue.Keyspace
	Funnel(ctx context.Context, q queue.Queue) (queue.PartitionFunnel, error)
	canary.Redis // the canaries' records
}

// Gather reads the report's inputs: every queue partition's funnel and the
// canaries from Redis (required: a failure is a *RedisError), the relay's
// lag from Kafka and the gates' counters (optional: a Kafka failure is
// said in the report; a gate that cannot be read is an error, since it was
// named). sluice stats and the admin API's /api/v1/stats share it.
func Gather(ctx context.Context, pool Redis, src Sources, now time.Time) (Input, error) {
	in := Input{Now: now}
	queues, err := pool.Topics(ctx, src.Topics...)
	if err != nil {
		return in, &RedisError{err}
	}
	for _, topic := range queues {
		for p := range pool.Keyspace().Partitions {
			pf, err := pool.Funnel(ctx, queue.Queue{Topic: topic, Part: p})
			if err != nil {
				return in, &RedisError{err}
			}
			in.Partitions = append(in.Partitions, pf)
		}
	}
	if in.CanarySettings, in.CanaryMonitor, in.CanaryRecords, err = canary.Read(ctx, pool); err != nil {
		return in, &RedisError{err}
	}
	topics := map[string]bool{}
	for _, pf := range in.Partitions {
		for t := range pf.Milestones {
			topics[t] = true
		}
	}
	if len(src.GateMetrics) > 0 {
		in.Gate = map[string]map[string]float64{}
		for _, u := range src.GateMetrics {
			if err := scrapeGateJobs(ctx, src.GateHTTP, u, in.Gate); err != nil {
				return in, fmt.Errorf("%s: %w", u, err)
			}
		}
		for t := range in.Gate {
			topics[t] = true
		}
	}
	if src.Kafka != nil && len(src.Kafka.Brokers) > 0 {
		in.KafkaLag, in.KafkaErr = lag(ctx, src, topics)
	}
	return in, nil
}

func lag(ctx context.Context, src Sources, topics map[string]bool) (map[string]int64, string) {
	sc, err := src.Kafka.Sarama()
	if err != nil {
		return nil, err.Error()
	}
	sc.Net.DialTimeout = src.KafkaTimeout
	if sc.Net.DialTimeout <= 0 {
		sc.Net.DialTimeout = 5 * time.Second
	}
	client, err := src.Kafka.Connect(ctx, sc)
	if err != nil {
		return nil, err.Error()
	}
	defer client.Close()
	out := map[string]int64{}
	for t := range topics {
		total, _, err := kafka.Lag(client, kafka.RelayGroup(src.ConsumerGroup, t), t)
		if err != nil {
			return out, fmt.Sprintf("Kafka lag of %s: %v", t, err)
		}
		out[t] = total
	}
	return out, ""
}

// scrapeGateJobs adds a gate's sluice_gate_jobs_total to into, by topic and
// outcome.
func scrapeGateJobs(ctx context.Context, hc *http.Client, url string, into map[string]map[string]float64) error {
	if hc == nil {
		hc = http.DefaultClient
	}
	fs, err := ops.Scrape(ctx, hc, url)
	if err != nil {
		return err
	}
	mf := fs["sluice_gate_jobs_total"]
	if mf == nil {
		return nil
	}
	for _, m := range mf.GetMetric() {
		t := ops.Label(m, "topic")
		if into[t] == nil {
			into[t] = map[string]float64{}
		}
		into[t][ops.Label(m, "outcome")] += ops.Value(m)
	}
	return nil
}
