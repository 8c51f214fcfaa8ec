package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestShortISRRefusesAtOnceUntilKafkaShowsItWhole walks a partition's
// breaker through its states: closed; opened by a refusal for short in-sync
// replicas (and by no other error); refusing that partition's records at
// once, and only that partition's; kept open by answers that arrive after
// (records sent before it opened) and by checks that find the partition
// short or cannot ask; closed by a check that finds it whole, without a
// record sent. The watcher's ticks are replaced by calls to check.
func TestShortISRRefusesAtOnceUntilKafkaShowsItWhole(t *testing.T) {
	now := time.Unix(1_000, 0)
	var (
		mu     sync.Mutex
		whole  = map[int32]bool{}
		askErr error
		asked  []int32
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	s := newShortISR(ctx, &wg, time.Hour, func() time.Time { return now }, func(m *sarama.ProducerMessage) int32 {
		if m.Key == nil {
			return -1
		}
		return int32(m.Key.Length()) // the test's partitioner: the key's length
	}, func(_ context.Context, topic string, p int32) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, p)
		return whole[p], askErr
	}, slog.New(slog.DiscardHandler))
	defer func() { cancel(); wg.Wait() }()

	rec := func(key string) *sarama.ProducerMessage {
		m := &sarama.ProducerMessage{Topic: "jobs"}
		if key != "" {
			m.Key = sarama.StringEncoder(key)
		}
		return m
	}
	admitted := func(what string, m *sarama.ProducerMessage, want bool) {
		t.Helper()
		err := s.admit(m)
		if (err == nil) != want {
			t.Fatalf("%s: admit = %v, want admitted %v", what, err, want)
		}
		if err != nil && (!errors.Is(err, sarama.ErrNotEnoughReplicas) || !Unavailable(err) || !BrokerAnswered(err)) {
			t.Fatalf("%s: the refusal %v must read as Kafka's NOT_ENOUGH_REPLICAS (a 503 for that partition alone)", what, err)
		}
	}

	admitted("closed", rec("ab"), true)
	s.refused("jobs", 2, sarama.ErrNotLeaderForPartition)
	s.refused("jobs", 2, sarama.ErrRequestTimedOut)
	admitted("a leader change or a timeout opens nothing", rec("ab"), true)
	if s.check(ctx) {
		t.Fatal("check reports a breaker open with none opened")
	}

	s.refused("jobs", 2, fmt.Errorf("wrapped: %w", sarama.ErrNotEnoughReplicasAfterAppend))
	admitted("just refused", rec("ab"), false)
	admitted("another partition", rec("abc"), true)
	admitted("another topic", &sarama.ProducerMessage{Topic: "other", Key: sarama.StringEncoder("ab")}, true)
	admitted("no key: its partition unknown", rec(""), true)
	s.refused("jobs", 2, sarama.ErrNotEnoughReplicas) // a record sent before it opened
	now = now.Add(time.Minute)
	admitted("a minute on, not yet checked", rec("xy"), false)

	if !s.check(ctx) {
		t.Fatal("check closed a breaker whose partition Kafka shows short")
	}
	admitted("checked: still short", rec("ab"), false)
	mu.Lock()
	whole[2], askErr = true, errors.New("no broker answered")
	mu.Unlock()
	if !s.check(ctx) {
		t.Fatal("check closed a breaker though asking Kafka failed")
	}
	admitted("the check could not ask", rec("ab"), false)
	mu.Lock()
	askErr = nil
	mu.Unlock()
	if s.check(ctx) {
		t.Fatal("check left the breaker open though Kafka shows the partition whole")
	}
	admitted("whole again: closed", rec("ab"), true)
	if n := s.open.Load(); n != 0 {
		t.Fatalf("%d breakers open after the check, want 0", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 3 || asked[0] != 2 {
		t.Fatalf("asked Kafka about partitions %v, want partition 2 three times", asked)
	}
}
