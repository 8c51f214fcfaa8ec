package kafka

import (
	"errors"
	"fmt"
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
// answer within probeLimit lets the next record probe.
type shortISR struct {
	hold time.Duration
	now  func() time.Time
	// partitionOf is the partition a record goes to (the producer's
	// partitioner over the topic's partitions), or -1 when unknown.
	partitionOf func(*sarama.ProducerMessage) int32

	open   atomic.Int32 // len(byPart): the healthy path reads only this
	mu     sync.Mutex
	byPart map[topicPartition]*refusal
}

type topicPartition struct {
	topic     string
	partition int32
}

// refusal is an open breaker: the last refusal, and the probe in flight.
type refusal struct {
	at       time.Time
	probing  bool
	probedAt time.Time
}

// probeLimit bounds how long a probe may go unanswered before another
// record probes: sarama answers every record in the end, but a probe whose
// answer was a close or a shutdown must not keep the breaker open for ever.
const probeLimit = 10 * time.Second

func newShortISR(hold time.Duration, now func() time.Time, partitionOf func(*sarama.ProducerMessage) int32) *shortISR {
	return &shortISR{hold: hold, now: now, partitionOf: partitionOf, byPart: map[topicPartition]*refusal{}}
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

// answered records Kafka's answer for a record that was sent: a refusal
// for a short in-sync set opens (or keeps open) its partition's breaker,
// any other answer closes it.
func (s *shortISR) answered(topic string, partition int32, err error) {
	refused := err != nil && isShortISR(err)
	if !refused && s.open.Load() == 0 {
		return
	}
	tp := topicPartition{topic, partition}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !refused {
		if _, ok := s.byPart[tp]; ok {
			delete(s.byPart, tp)
			s.open.Add(-1)
		}
		return
	}
	r := s.byPart[tp]
	if r == nil {
		r = &refusal{}
		s.byPart[tp] = r
		s.open.Add(1)
	}
	r.at, r.probing = s.now(), false
}
