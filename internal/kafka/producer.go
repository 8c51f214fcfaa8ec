package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// Message is one record to produce.
type Message struct {
	Topic string
	// Key routes the record (murmur2, as the Java client) unless Partition
	// is set.
	Key   []byte
	Value []byte
	// Partition, when >= 0, names the partition explicitly (Kafkagate
	// semantics: canaries must reach each partition). -1 routes by Key.
	Partition int32
	// Headers travel with the record (the relay's dead-letter reason).
	Headers []sarama.RecordHeader
}

// Result is the outcome of producing one Message.
type Result struct {
	Partition int32
	Offset    int64
	Err       error
}

// Producer writes to Kafka at either acks level. One sarama client has one
// acks level, so it holds two: the all-replicas idempotent producer, the
// default (Kafka's own producer default since 3.0), created with the
// Producer, and a leader-acks producer, created on first use by a request
// that opts in.
type Producer struct {
	cfg    *sarama.Config
	addrs  []string
	log    *slog.Logger
	all    sarama.AsyncProducer
	client sarama.Client // the acks=all producer's client, shared with Catalog
	// isr refuses acks=all records for a partition short of in-sync
	// replicas at once; nil with ShortISRHold 0.
	isr     *shortISR
	murmur2 sarama.Partitioner // for keyed records only: stateless then
	// The short-ISR watcher's context, ended by Close, and the admin
	// client it reads topic configs with, made on first use.
	watchCtx  context.Context
	stopWatch context.CancelFunc
	adminMu   sync.Mutex
	admin     sarama.ClusterAdmin

	// The leader-acks producer, created on first use. A creation that
	// failed (Kafka down) is tried again on a later use, at most once every
	// lazyRetryEvery: its error is not kept for the Producer's life.
	leaderMu       sync.Mutex
	leader         sarama.AsyncProducer
	leaderErr      error
	leaderFailedAt time.Time
	leaderClosed   bool
	now            func() time.Time

	closeMu sync.RWMutex
	closed  bool

	wg sync.WaitGroup
}

// ProducerOptions tune a Producer beyond Config.
type ProducerOptions struct {
	// MaxMessageBytes is the largest record accepted (the envelope, not
	// just the payload).
	MaxMessageBytes int
	// Linger is how long a record may wait for more to share its produce
	// request; LingerMessages that many go at once (0: 64). Default 0:
	// sarama's, every record sent as soon as a request can take it.
	// At moderate rates records otherwise travel one or two per request,
	// and a request costs the broker and the client far more than a
	// record in it: 1 ms halved kfake's CPU per job at 6,500 single-job
	// POSTs a second (BENCHMARKS.md).
	Linger         time.Duration
	LingerMessages int
	// ShortISRHold turns on the short-ISR breakers (shortisr.go): after a
	// partition's leader refused an acks=all write because its in-sync
	// replicas were fewer than min.insync.replicas, new acks=all records
	// for it are refused at once (ErrShortISR, which Unavailable reports)
	// instead of queueing behind sarama's retries of the refused ones, and
	// Kafka is asked this often whether the partition is whole again.
	// Default 0: off, every record is sent.
	ShortISRHold time.Duration
	// AckTimeout is how long a partition's leader waits for its in-sync
	// replicas to take an acks=all record before it answers
	// REQUEST_TIMED_OUT, which sarama retries (sarama's Producer.Timeout).
	// The idempotent producer has one request in flight per broker, so a
	// request that waits at the leader holds back every record for that
	// broker meanwhile: when a follower stops, the records the leader
	// appended while it was still in the in-sync set waited the whole
	// 10 s (sarama's default) in the chaos suite, though the set shrank at
	// once, and everything behind them was answered 504. Keep it well under
	// the caller's own deadline. Default 0: sarama's, 10s.
	AckTimeout time.Duration
}

// NewProducer connects to Kafka. It fails when no broker answers.
func NewProducer(c *Config, opts ProducerOptions, log *slog.Logger) (*Producer, error) {
	base, err := c.Sarama()
	if err != nil {
		return nil, err
	}
	base.Producer.Return.Successes = true
	base.Producer.Return.Errors = true
	base.Producer.Partitioner = newPartitioner
	if opts.MaxMessageBytes > 0 {
		base.Producer.MaxMessageBytes = opts.MaxMessageBytes
	}
	if opts.Linger > 0 {
		base.Producer.Flush.Frequency = opts.Linger
		base.Producer.Flush.Messages = cmp.Or(opts.LingerMessages, 64)
	}
	allCfg := *base
	allCfg.Producer.RequiredAcks = sarama.WaitForAll
	if opts.AckTimeout > 0 {
		allCfg.Producer.Timeout = opts.AckTimeout
	}
	allCfg.Producer.Idempotent = true
	allCfg.Net.MaxOpenRequests = 1 // sarama requires it for idempotence
	if allCfg.Producer.Retry.Max < 1 {
		allCfg.Producer.Retry.Max = 1
	}
	// No context to hand down yet: Explain's diagnosis is bounded by its
	// own timeouts.
	client, err := c.Connect(context.Background(), &allCfg)
	if err != nil {
		return nil, err
	}
	all, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	p := &Producer{cfg: base, addrs: c.Brokers, log: log, all: all, client: client, now: time.Now, murmur2: sarama.NewMurmur2Partitioner("")}
	p.watchCtx, p.stopWatch = context.WithCancel(context.Background())
	if opts.ShortISRHold > 0 {
		p.isr = newShortISR(p.watchCtx, &p.wg, opts.ShortISRHold, time.Now, p.partitionOf, p.inSyncEnough, log)
	}
	p.dispatch(all, p.isr)
	return p, nil
}

// Client is the producer's sarama client, for metadata.
func (p *Producer) Client() sarama.Client { return p.client }

// lazyRetryEvery spaces the attempts to create the leader-acks producer
// while Kafka cannot be reached: each costs a metadata round to every broker.
const lazyRetryEvery = time.Second

// leaderProducer returns the leader-acks producer, creating it on first
// use. A failed creation answers its error until lazyRetryEvery has passed,
// then tries again.
func (p *Producer) leaderProducer() (sarama.AsyncProducer, error) {
	p.leaderMu.Lock()
	defer p.leaderMu.Unlock()
	switch {
	case p.leaderClosed:
		return nil, errClosed
	case p.leader != nil:
		return p.leader, nil
	case p.leaderErr != nil && p.now().Sub(p.leaderFailedAt) < lazyRetryEvery:
		return nil, p.leaderErr
	}
	cfg := *p.cfg
	cfg.Producer.RequiredAcks = sarama.WaitForLocal
	ap, err := sarama.NewAsyncProducer(p.addrs, &cfg)
	if err != nil {
		p.leaderErr, p.leaderFailedAt = fmt.Errorf("connect the acks=leader producer: %w", err), p.now()
		return nil, p.leaderErr
	}
	p.leader, p.leaderErr = ap, nil
	p.dispatch(ap, nil) // acks=leader is never refused for short in-sync replicas
	return ap, nil
}

// pending tracks one Produce call; each message's Metadata points at its
// slot, and the dispatch goroutines fill results as acks arrive.
type pending struct {
	results   []Result
	remaining atomic.Int32
	done      chan struct{}
}

type slot struct {
	p        *pending
	i        int
	explicit int32 // partition named by the caller, or -1
}

func (s *slot) finish(partition int32, offset int64, err error) {
	s.p.results[s.i] = Result{Partition: partition, Offset: offset, Err: err}
	if s.p.remaining.Add(-1) == 0 {
		close(s.p.done)
	}
}

// dispatch hands ap's answers to the records' slots, telling isr (when
// not nil) of each refusal first.
func (p *Producer) dispatch(ap sarama.AsyncProducer, isr *shortISR) {
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		for m := range ap.Successes() {
			m.Metadata.(*slot).finish(m.Partition, m.Offset, nil)
		}
	}()
	go func() {
		defer p.wg.Done()
		for e := range ap.Errors() {
			if isr != nil {
				isr.refused(e.Msg.Topic, e.Msg.Partition, e.Err)
			}
			e.Msg.Metadata.(*slot).finish(e.Msg.Partition, -1, e.Err)
		}
	}()
}

// inSyncEnough reports whether a partition's in-sync replicas, in fresh
// metadata, meet the topic's min.insync.replicas as the broker applies it:
// at most the partition's replica count.
func (p *Producer) inSyncEnough(ctx context.Context, topic string, partition int32) (bool, error) {
	if err := p.client.RefreshMetadata(topic); err != nil {
		return false, err
	}
	isr, err := p.client.InSyncReplicas(topic, partition)
	if err != nil {
		return false, err
	}
	replicas, err := p.client.Replicas(topic, partition)
	if err != nil {
		return false, err
	}
	want, err := p.minInSync(topic)
	if err != nil {
		return false, err
	}
	return len(isr) >= max(1, min(want, len(replicas))), ctx.Err()
}

// minInSync reads a topic's min.insync.replicas (its own, or the broker's
// default: DescribeConfigs answers the value in force).
func (p *Producer) minInSync(topic string) (int, error) {
	p.adminMu.Lock()
	defer p.adminMu.Unlock()
	if p.admin == nil {
		cfg := *p.cfg
		admin, err := sarama.NewClusterAdmin(p.addrs, &cfg)
		if err != nil {
			return 0, err
		}
		p.admin = admin
	}
	entries, err := p.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"min.insync.replicas"}})
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if e.Name == "min.insync.replicas" {
			return strconv.Atoi(e.Value)
		}
	}
	return 1, nil // Kafka's default
}

// partitionOf is the partition the acks=all producer's partitioner sends m
// to, or -1 when it cannot be told beforehand (no key: a random one).
func (p *Producer) partitionOf(m *sarama.ProducerMessage) int32 {
	if s, ok := m.Metadata.(*slot); ok && s.explicit >= 0 {
		return s.explicit
	}
	if m.Key == nil {
		return -1
	}
	parts, err := p.client.Partitions(m.Topic)
	if err != nil || len(parts) == 0 {
		return -1
	}
	part, err := p.murmur2.Partition(m, int32(len(parts)))
	if err != nil {
		return -1
	}
	return part
}

// Produce writes msgs and waits until Kafka acknowledged each, or ctx ends.
// Per-message failures are in the results; the error is ctx's when it ended
// first, in which case the messages may still be written later.
func (p *Producer) Produce(ctx context.Context, acks Acks, msgs []Message) ([]Result, error) {
	// A context already ended hands nothing over: select would pick at
	// random between it and a free input slot.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Held while messages are handed over: Close waits for that, and a
	// Produce after Close gets an error, not a send on a closed channel.
	p.closeMu.RLock()
	pend, err := p.handOver(ctx, acks, msgs)
	p.closeMu.RUnlock()
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return pend.results, nil
	}
	select {
	case <-pend.done:
		return pend.results, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// handOver gives msgs to the producer of acks; the caller holds closeMu.
func (p *Producer) handOver(ctx context.Context, acks Acks, msgs []Message) (*pending, error) {
	pend := &pending{results: make([]Result, len(msgs)), done: make(chan struct{})}
	if p.closed {
		return pend, errClosed
	}
	ap, isr := p.all, p.isr
	if acks == AcksLeader {
		isr = nil
		var err error
		if ap, err = p.leaderProducer(); err != nil {
			return pend, err
		}
	}
	if len(msgs) == 0 {
		return pend, nil
	}
	pend.remaining.Store(int32(len(msgs)))
	slots := make([]slot, len(msgs))
	pms := make([]sarama.ProducerMessage, len(msgs))
	for i := range msgs {
		slots[i] = slot{p: pend, i: i, explicit: msgs[i].Partition}
		pm := &pms[i]
		pm.Topic = msgs[i].Topic
		pm.Value = sarama.ByteEncoder(msgs[i].Value)
		if msgs[i].Key != nil {
			pm.Key = sarama.ByteEncoder(msgs[i].Key)
		}
		pm.Headers = msgs[i].Headers
		pm.Metadata = &slots[i]
		if isr != nil {
			if err := isr.admit(pm); err != nil {
				slots[i].finish(-1, -1, err)
				continue
			}
		}
		select {
		case ap.Input() <- pm:
		case <-ctx.Done():
			// Messages not handed over will never be acked: finish them
			// so the dispatchers' count stays right, and give up.
			for k := i; k < len(msgs); k++ {
				slots[k].finish(-1, -1, ctx.Err())
			}
			return pend, ctx.Err()
		}
	}
	return pend, nil
}

// errClosed answers an acks=leader Produce after Close.
var errClosed = errors.New("kafka producer closed")

// Close flushes what is buffered and closes both producers and the client.
// Call it after the last Produce has returned.
func (p *Producer) Close() error {
	// Under leaderMu: a leader-acks producer being created right now is
	// finished (and closed below) before Close reads p.leader, and none is
	// created after.
	p.leaderMu.Lock()
	p.leaderClosed = true
	leader := p.leader
	p.leaderMu.Unlock()
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.stopWatch()
	errs := []error{p.all.Close()}
	if leader != nil {
		errs = append(errs, leader.Close())
	}
	p.wg.Wait()
	p.adminMu.Lock()
	if p.admin != nil {
		errs = append(errs, p.admin.Close())
	}
	p.adminMu.Unlock()
	if !p.client.Closed() {
		errs = append(errs, p.client.Close())
	}
	return errors.Join(errs...)
}

// partitioner routes a message to the partition its caller named, else by
// murmur2 of its key as the Java client's default partitioner does, so that
// producers in any language agree on where a group lives.
type partitioner struct{ murmur2 sarama.Partitioner }

func newPartitioner(topic string) sarama.Partitioner {
	return partitioner{murmur2: sarama.NewMurmur2Partitioner(topic)}
}

func (p partitioner) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	if s, ok := m.Metadata.(*slot); ok && s.explicit >= 0 {
		if s.explicit >= n {
			return -1, sarama.ErrInvalidPartition
		}
		return s.explicit, nil
	}
	return p.murmur2.Partition(m, n)
}

// RequiresConsistency makes sarama pick among all partitions, not only those
// with a reachable leader: a key's partition must not move during an outage.
func (p partitioner) RequiresConsistency() bool { return true }
