package relay_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

// A Redis that cannot persist (MISCONF: its disk full, a failed save) is
// an outage to wait out: the relay retries its batches until Redis takes
// them, then every job is in Redis once, and none was requeued or
// dead-lettered for it. The outage is logged once and its time counted.
// (Before: MISCONF was no Transient error; the enqueue script refused the
// jobs as "wrong type", the relay requeued them 3 times and produced them
// to jobs.dlq.)
func TestARedisThatCannotPersistIsWaitedOutNotDeadLettered(t *testing.T) {
	b := newBed(t)
	var logged testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&logged, testWriter{t, "r1"}), nil))
	r, err := relay.New(context.Background(), b.config(nil), log)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Serve(t, r.Serve)
	testenv.WaitFor(t, 30*time.Second, "the relay to hold the topic's lock", func() bool { return r.Holds(topic) })
	persistAgain := b.redis.RefusePersisting(t)
	b.produce(t, 0, 200)
	// Until the relay has met the refusal several times: retried, or
	// (as before the fix) requeued or dead-lettered.
	testenv.WaitFor(t, 30*time.Second, "the relay to meet Redis's refusals", func() bool {
		return testenv.Metric(t, r.Registry(), "sluice_relay_redis_retries_total") >= 3 ||
			testenv.Metric(t, r.Registry(), "sluice_relay_jobs_total", "outcome", "requeued") > 0 ||
			testenv.Metric(t, r.Registry(), "sluice_relay_jobs_total", "outcome", "dead_lettered") > 0
	})
	if g := testenv.Metric(t, r.Registry(), "sluice_relay_redis_unavailable"); g != 1 {
		t.Errorf("sluice_relay_redis_unavailable = %v while Redis refuses, want 1", g)
	}
	persistAgain()
	b.waitRelayed(t, 200, 30*time.Second)
	for _, outcome := range []string{"requeued", "dead_lettered"} {
		if n := testenv.Metric(t, r.Registry(), "sluice_relay_jobs_total", "outcome", outcome); n != 0 {
			t.Errorf("%v jobs %s while Redis could not persist, want 0", n, outcome)
		}
	}
	client, err := sarama.NewClient(b.kafka.Brokers(), sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if end, err := client.GetOffset(topic+".dlq", 0, sarama.OffsetNewest); err != nil || end != 0 {
		t.Errorf("%s.dlq holds %d records (%v), want none", topic, end, err)
	}
	testenv.WaitFor(t, 10*time.Second, "the outage to end", func() bool {
		return testenv.Metric(t, r.Registry(), "sluice_relay_redis_unavailable") == 0
	})
	if s := testenv.Metric(t, r.Registry(), "sluice_relay_redis_unavailable_seconds_total"); s <= 0 {
		t.Errorf("sluice_relay_redis_unavailable_seconds_total = %v after an outage", s)
	}
	if n := strings.Count(logged.String(), "Redis cannot serve or cannot write now"); n != 1 {
		t.Errorf("the outage was logged %d times, want once:\n%s", n, logged.String())
	}
}

// A relay refuses to start against a Redis whose maxmemory-policy evicts
// keys, naming the setting and the fix.
func TestTheRelayRefusesAnEvictingRedis(t *testing.T) {
	b := newBed(t)
	if err := b.redis.Client().ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := relay.New(context.Background(), b.config(nil), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "maxmemory-policy is allkeys-lru") || !strings.Contains(err.Error(), "set maxmemory-policy noeviction") {
		t.Fatalf("relay.New against allkeys-lru: %v", err)
	}
}
