package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestShortISRRefusesAtOnceThenProbes walks a partition's breaker through
// its states on an injected clock: closed, opened by a refusal for short
// in-sync replicas, refusing at once for the hold, one probe after it while
// the others are still refused, reopened by the probe's refusal, closed by
// a success; other errors never open it and close it when it is open;
// answers to records sent before it opened never close it.
func TestShortISRRefusesAtOnceThenProbes(t *testing.T) {
	now := time.Unix(1_000, 0)
	s := newShortISR(time.Second, func() time.Time { return now }, func(m *sarama.ProducerMessage) int32 {
		if m.Key == nil {
			return -1
		}
		return int32(m.Key.Length()) // the test's partitioner: the key's length
	}, slog.New(slog.DiscardHandler))
	rec := func(key string) *sarama.ProducerMessage {
		m := &sarama.ProducerMessage{Topic: "jobs"}
		if key != "" {
			m.Key = sarama.StringEncoder(key)
		}
		return m
	}
	var gen uint64 // the generation of the last record admitted
	admitted := func(what string, m *sarama.ProducerMessage, want bool) {
		t.Helper()
		gen = s.generation()
		err := s.admit(m)
		if (err == nil) != want {
			t.Fatalf("%s: admit = %v, want admitted %v", what, err, want)
		}
		if err != nil && (!errors.Is(err, sarama.ErrNotEnoughReplicas) || !Unavailable(err) || !BrokerAnswered(err)) {
			t.Fatalf("%s: the refusal %v must read as Kafka's NOT_ENOUGH_REPLICAS (a 503 for that partition alone)", what, err)
		}
	}

	admitted("closed", rec("ab"), true)
	before := gen // sent before the breaker opens, answered after
	s.answered("jobs", 2, before, sarama.ErrNotEnoughReplicas)
	admitted("just refused", rec("ab"), false)
	admitted("another partition", rec("abc"), true)
	admitted("another topic", &sarama.ProducerMessage{Topic: "other", Key: sarama.StringEncoder("ab")}, true)
	admitted("no key: its partition unknown", rec(""), true)
	now = now.Add(999 * time.Millisecond)
	admitted("within the hold", rec("xy"), false)
	s.answered("jobs", 2, before, nil)
	admitted("a success for a record sent before it opened closes nothing", rec("xy"), false)
	s.answered("jobs", 2, before, sarama.ErrNotLeaderForPartition)
	admitted("nor does another answer to one", rec("xy"), false)

	now = now.Add(time.Millisecond)
	admitted("the probe, after the hold", rec("ab"), true)
	admitted("while the probe is out", rec("ab"), false)
	s.answered("jobs", 2, gen, fmt.Errorf("wrapped: %w", sarama.ErrNotEnoughReplicasAfterAppend))
	admitted("the probe refused: open again", rec("ab"), false)
	now = now.Add(time.Second)
	admitted("the next probe", rec("ab"), true)
	now = now.Add(probeLimit)
	admitted("a probe unanswered for probeLimit: another may go", rec("ab"), true)
	s.answered("jobs", 2, gen, nil)
	admitted("the probe succeeded: closed", rec("ab"), true)
	admitted("closed stays closed", rec("ab"), true)
	if n := s.open.Load(); n != 0 {
		t.Fatalf("%d breakers open after the success, want 0", n)
	}

	s.answered("jobs", 2, gen, sarama.ErrNotLeaderForPartition)
	admitted("a leader change opens nothing", rec("ab"), true)
	s.answered("jobs", 2, gen, sarama.ErrNotEnoughReplicas)
	now = now.Add(time.Second)
	admitted("a probe", rec("ab"), true)
	s.answered("jobs", 2, gen, sarama.ErrRequestTimedOut)
	admitted("any answer but a short in-sync set closes it", rec("ab"), true)
}
