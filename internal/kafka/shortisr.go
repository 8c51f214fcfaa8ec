package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// shortISR remembers the partitions whose leader refused an acks=all write
// because its in-sync replicas were fewer than min.insync.replicas, so that
// new records for them are refused at once instead of queueing in sarama.
//
// Why: sarama's idempotent producer keeps a refused partition muted while
// it retries the refused batch (Retry.Max times, Retry.Backoff apart, a
// metadata refresh each), and every record that arrives meanwhile waits
// for that, then for its own retries. Under load a record posted while the
// partition is short waited more than the gate's produce deadline and was
// answered 504 ("may or may not be stored"), though Kafka had refused it at
// once (the chaos suite's step "stop a Kafka follower until the in-sync set
// is below min.insync.replicas"). A short in-sync set lasts until a replica
// catches up or an operator acts: seconds at least.
//
// A refusal opens the partition's breaker for hold. After that one record
// goes to Kafka as a probe while the others are still refused at once;
// the probe's success, or any answer that is not a short in-sync set,
// closes the breaker; another refusal opens it again. A probe that gets no
// answer within probeLimit lets the next record probe. Only the answer to
// a record sent since the breaker last opened closes it: records sent
// before are still answered afterwards (a success the leader took before
// the in-sync set fell short), and one of them closing the breaker let the
// records after it queue behind the retries again (the chaos suite, again).
type shortISR struct {
	hold time.Duration
	now  func() time.Time
	// partitionOf is the partition a record goes to (the producer's
	// partitioner over the topic's partitions), or -1 when unknown.
	partitionOf func(*sarama.ProducerMessage) int32
	log         *slog.Logger

	open atomic.Int32 // len(byPart): the healthy path reads only this
	// opened counts the breakers' openings; a record is sent in the
	// generation it read at admit, and an answer closes a breaker only
	// from a generation at or after its opening.
	opened atomic.Uint64
	mu     sync.Mutex
	byPart map[topicPartition]*refusal
}

type topicPartition struct {
	topic     string
	partition int32
}

// refusal is an open breaker: the last refusal, and the probe in flight.
type refusal struct {
	opened   time.Time // the first refusal
	at       time.Time // the last
	gen      uint64    // opened's value when it last opened
	probing  bool
	probedAt time.Time
}

// probeLimit bounds how long a probe may go unanswered before another
// record probes: sarama answers every record in the end, but a probe whose
// answer was a close or a shutdown must not keep the breaker open for ever.
const probeLimit = 10 * time.Second

func newShortISR(hold time.Duration, now func() time.Time, partitionOf func(*sarama.ProducerMessage) int32, log *slog.Logger) *shortISR {
	return &shortISR{hold: hold, now: now, partitionOf: partitionOf, log: log, byPart: map[topicPartition]*refusal{}}
}

// ErrShortISR is the refusal a record gets without being sent (so it is not
// written): its partition's leader refused acks=all for too few in-sync
// replicas a moment ago. It unwraps to sarama.ErrNotEnoughReplicas.
type ErrShortISR struct {
	Topic     string
	Partition int32
	Since     time.Duration // since the last refusal
}

func (e *ErrShortISR) Error() string {
	return fmt.Sprintf("%v (partition %d of %s, refused %s ago: not sent; one record probes it each hold)", sarama.ErrNotEnoughReplicas, e.Partition, e.Topic, e.Since.Round(time.Millisecond))
}

func (e *ErrShortISR) Unwrap() error { return sarama.ErrNotEnoughReplicas }

// isShortISR reports whether a produce error says the partition's in-sync
// set is below min.insync.replicas.
func isShortISR(err error) bool {
	return errors.Is(err, sarama.ErrNotEnoughReplicas) || errors.Is(err, sarama.ErrNotEnoughReplicasAfterAppend)
}

// generation is what a record admitted now carries to answered.
func (s *shortISR) generation() uint64 { return s.opened.Load() }

// admit reports whether a record may go to Kafka; when not, the error to
// answer it with.
func (s *shortISR) admit(m *sarama.ProducerMessage) error {
	if s.open.Load() == 0 {
		return nil
	}
	part := s.partitionOf(m)
	if part < 0 {
		return nil
	}
	tp := topicPartition{m.Topic, part}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.byPart[tp]
	switch {
	case r == nil:
		return nil
	case now.Sub(r.at) >= s.hold && (!r.probing || now.Sub(r.probedAt) >= probeLimit):
		r.probing, r.probedAt = true, now
		return nil
	}
	return &ErrShortISR{Topic: tp.topic, Partition: part, Since: now.Sub(r.at)}
}

// answered records Kafka's answer for a record sent in generation gen: a
// refusal for a short in-sync set opens its partition's breaker (or keeps
// it open), any other answer to a record sent since it opened closes it.
func (s *shortISR) answered(topic string, partition int32, gen uint64, err error) {
	refused := err != nil && isShortISR(err)
	if !refused && s.open.Load() == 0 {
		return
	}
	tp := topicPartition{topic, partition}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.byPart[tp]
	switch {
	case !refused:
		if r != nil && gen >= r.gen {
			delete(s.byPart, tp)
			s.open.Add(-1)
			s.log.Info("a partition short of in-sync replicas took an acks=all write again: sending its records again", "topic", topic, "partition", partition, "short_for", s.now().Sub(r.opened).Round(time.Millisecond), "answer", errString(err))
		}
		return
	case r == nil:
		r = &refusal{opened: s.now()}
		s.byPart[tp] = r
		s.open.Add(1)
		s.log.Warn("a partition's leader refused acks=all for too few in-sync replicas: answering its acks=all records at once, without sending them, and probing it each hold", "topic", topic, "partition", partition, "hold", s.hold, "err", err)
	case gen < r.gen:
		// A record sent before the breaker last opened: the partition
		// is still short, and the probe out (if one is) still counts.
		r.at = s.now()
		return
	}
	r.at, r.gen, r.probing = s.now(), s.opened.Add(1), false
}

func errString(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}
