package kafka

import (
	"context"
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
// partition was short waited more than the gate's produce deadline and was
// answered 504 ("may or may not be stored"), though Kafka refused it at
// once (the chaos suite's step "stop a Kafka follower until the in-sync set
// is below min.insync.replicas"). A short in-sync set lasts until a replica
// catches up or an operator acts: seconds at least.
//
// A refusal opens the partition's breaker. While it is open every acks=all
// record for the partition is refused without being sent, and every hold
// a watcher asks Kafka, without a record, whether the partition is whole
// again: its in-sync replicas from fresh metadata against the topic's
// min.insync.replicas (as the broker applies it: at most the replica
// count). When it is, the breaker closes; a refusal after that opens it
// again. A first version sent one user record as the probe instead: the
// request carrying it waited a whole retry cycle, which under the chaos
// load took longer than the produce deadline (a 504 again).
type shortISR struct {
	hold time.Duration
	now  func() time.Time
	// partitionOf is the partition a record goes to (the producer's
	// partitioner over the topic's partitions), or -1 when unknown.
	partitionOf func(*sarama.ProducerMessage) int32
	// whole asks Kafka whether a partition's in-sync set meets its
	// min.insync.replicas again.
	whole func(ctx context.Context, topic string, partition int32) (bool, error)
	log   *slog.Logger
	ctx   context.Context // the watcher's: ended by the producer's Close
	wg    *sync.WaitGroup // the producer's: Close waits for the watcher

	open     atomic.Int32 // len(byPart): the healthy path reads only this
	mu       sync.Mutex
	byPart   map[topicPartition]*refusal
	watching bool // a watcher runs (until no breaker is open)
}

type topicPartition struct {
	topic     string
	partition int32
}

// refusal is an open breaker.
type refusal struct {
	opened time.Time // the first refusal
	at     time.Time // the last
}

func newShortISR(ctx context.Context, wg *sync.WaitGroup, hold time.Duration, now func() time.Time, partitionOf func(*sarama.ProducerMessage) int32,
	whole func(context.Context, string, int32) (bool, error), log *slog.Logger) *shortISR {
	return &shortISR{ctx: ctx, wg: wg, hold: hold, now: now, partitionOf: partitionOf, whole: whole, log: log, byPart: map[topicPartition]*refusal{}}
}

// ErrShortISR is the refusal a record gets without being sent (so it is not
// written): its partition's leader refused acks=all for too few in-sync
// replicas, and Kafka has not shown it whole since. It unwraps to
// sarama.ErrNotEnoughReplicas.
type ErrShortISR struct {
	Topic     string
	Partition int32
	Since     time.Duration // since the first refusal
}

func (e *ErrShortISR) Error() string {
	return fmt.Sprintf("%v (partition %d of %s, short for %s: not sent)", sarama.ErrNotEnoughReplicas, e.Partition, e.Topic, e.Since.Round(time.Millisecond))
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
	s.mu.Lock()
	r := s.byPart[tp]
	s.mu.Unlock()
	if r == nil {
		return nil
	}
	return &ErrShortISR{Topic: tp.topic, Partition: part, Since: s.now().Sub(r.opened)}
}

// refused records a record's answer from Kafka, when it was an error: a
// refusal for a short in-sync set opens the partition's breaker (or keeps
// it open). Nothing but the watcher closes it: while it is open no record
// is sent, and the answers still coming are to records sent before.
func (s *shortISR) refused(topic string, partition int32, err error) {
	if !isShortISR(err) {
		return
	}
	tp := topicPartition{topic, partition}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.byPart[tp]; r != nil {
		r.at = now
		return
	}
	s.byPart[tp] = &refusal{opened: now, at: now}
	s.open.Add(1)
	s.log.Warn("a partition's leader refused acks=all for too few in-sync replicas: answering its acks=all records at once, without sending them, until Kafka shows it whole again", "topic", topic, "partition", partition, "err", err)
	if !s.watching {
		s.watching = true
		s.wg.Add(1)
		go s.watch()
	}
}

// watch checks the open breakers every hold until none is open or the
// producer closes.
func (s *shortISR) watch() {
	defer s.wg.Done()
	t := time.NewTicker(s.hold)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if !s.check(s.ctx) {
			return
		}
	}
}

// check asks Kafka about every open breaker once and closes those whose
// partition is whole again. It reports whether any is still open; when
// none is, the watcher ends (the next opening starts another).
func (s *shortISR) check(ctx context.Context) bool {
	s.mu.Lock()
	open := make([]topicPartition, 0, len(s.byPart))
	for tp := range s.byPart {
		open = append(open, tp)
	}
	s.mu.Unlock()
	for _, tp := range open {
		whole, err := s.whole(ctx, tp.topic, tp.partition)
		if err != nil {
			s.log.Debug("asking Kafka whether a short partition is whole again failed; asking again", "topic", tp.topic, "partition", tp.partition, "err", err)
			continue
		}
		if !whole {
			continue
		}
		s.mu.Lock()
		if r := s.byPart[tp]; r != nil {
			delete(s.byPart, tp)
			s.open.Add(-1)
			s.log.Info("a partition short of in-sync replicas is whole again: sending its acks=all records again", "topic", tp.topic, "partition", tp.partition, "short_for", s.now().Sub(r.opened).Round(time.Millisecond))
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byPart) == 0 {
		s.watching = false
		return false
	}
	return true
}
