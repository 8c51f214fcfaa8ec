package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"

	"github.com/sluicehq/sluice/internal/testenv"
)

func newProducer(t *testing.T, k *testenv.KafkaCluster) *Producer {
	t.Helper()
	cfg := Config{Brokers: k.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none"}
	p, err := NewProducer(&cfg, ProducerOptions{MaxMessageBytes: 4096}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestProduceExplicitAndKeyedPartitions(t *testing.T) {
	k := testenv.Kafka(t, testenv.Topic("jobs", 3))
	p := newProducer(t, k)
	msgs := []Message{
		{Topic: "jobs", Key: []byte("g"), Value: []byte("a"), Partition: 2},
		{Topic: "jobs", Key: []byte("g"), Value: []byte("b"), Partition: 0},
		{Topic: "jobs", Key: []byte("g"), Value: []byte("c"), Partition: -1},
		{Topic: "jobs", Key: []byte("g"), Value: []byte("d"), Partition: -1},
	}
	res, err := p.Produce(context.Background(), AcksLeader, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Partition != 2 || res[1].Partition != 0 || res[2].Partition != res[3].Partition {
		t.Fatalf("results %+v", res)
	}
	for i, r := range res {
		if r.Err != nil || r.Offset < 0 {
			t.Fatalf("message %d: %+v", i, r)
		}
	}
	res, err = p.Produce(context.Background(), AcksLeader, []Message{{Topic: "jobs", Value: []byte("x"), Partition: 3}})
	if err != nil || !UnknownTopic(res[0].Err) {
		t.Fatalf("partition 3 of 3: %+v %v", res, err)
	}
	res, err = p.Produce(context.Background(), AcksAll, []Message{{Topic: "jobs", Value: make([]byte, 5000), Partition: -1}})
	if err != nil || !TooLarge(res[0].Err) {
		t.Fatalf("a message over MaxMessageBytes: %+v %v", res, err)
	}
}

func TestProduceHonoursItsContext(t *testing.T) {
	k := testenv.Kafka(t, testenv.Topic("jobs", 1))
	p := newProducer(t, k)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Produce(ctx, AcksLeader, []Message{{Topic: "jobs", Value: []byte("x"), Partition: -1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Produce with a cancelled context: %v", err)
	}
}

func TestCatalog(t *testing.T) {
	k := testenv.Kafka(t, testenv.Topic("jobs", 4), testenv.DataDir(t.TempDir()))
	p := newProducer(t, k)
	c := NewCatalog(context.Background(), p.Client(), time.Hour, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	if n, err := c.Partitions(ctx, "jobs"); n != 4 || err != nil {
		t.Fatalf("jobs: %d %v", n, err)
	}
	if _, err := c.Partitions(ctx, "nope"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("nope: %v", err)
	}
	// A new topic is found by the refresh a miss triggers (at most one a
	// second), not only by the hourly one.
	k.CreateTopic("later", 2)
	testenv.WaitFor(t, 5*time.Second, "the new topic in the catalogue", func() bool {
		n, err := c.Partitions(ctx, "later")
		return err == nil && n == 2
	})
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	c.MarkUnavailable(io.EOF)
	if err := c.Ready(ctx); err == nil {
		t.Fatal("Ready after MarkUnavailable")
	}
	if _, err := c.Partitions(ctx, "jobs"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Partitions while unavailable: %v", err)
	}
	c.refresh(ctx) // what Run does a second later
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("Ready after a successful refresh: %v", err)
	}
	k.Stop()
	c.refresh(ctx)
	if err := c.Ready(ctx); err == nil {
		t.Fatal("Ready with Kafka stopped")
	}
}

func TestErrorClasses(t *testing.T) {
	for _, err := range []error{sarama.ErrOutOfBrokers, sarama.ErrNotLeaderForPartition, io.EOF, fmt.Errorf("x: %w", sarama.ErrNotEnoughReplicas), breaker.ErrBreakerOpen} {
		if !Unavailable(err) {
			t.Errorf("Unavailable(%v) = false", err)
		}
	}
	for _, err := range []error{sarama.ErrInvalidMessage, sarama.ErrMessageSizeTooLarge, errors.New("other")} {
		if Unavailable(err) {
			t.Errorf("Unavailable(%v) = true", err)
		}
	}
	if !TooLarge(sarama.ErrMessageSizeTooLarge) || TooLarge(sarama.ErrOutOfBrokers) {
		t.Error("TooLarge")
	}
	for s, want := range map[string]Acks{"": AcksAll, "leader": AcksLeader, "1": AcksLeader, "all": AcksAll, "ALL": AcksAll, "-1": AcksAll} {
		if got, err := ParseAcks(s); err != nil || got != want {
			t.Errorf("ParseAcks(%q) = %v %v", s, got, err)
		}
	}
	if _, err := ParseAcks("2"); err == nil {
		t.Error("ParseAcks(2) accepted")
	}
}

// Close races with the first acks=leader Produce, which creates the second
// producer: under -race nothing is read unsynchronised, that producer is
// closed with the rest, and an acks=leader Produce after Close answers an
// error instead of opening a producer nobody closes.
func TestCloseWhileTheAcksLeaderProducerStarts(t *testing.T) {
	k := testenv.Kafka(t, testenv.Topic("jobs", 1))
	cfg := Config{Brokers: k.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none"}
	p, err := NewProducer(&cfg, ProducerOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	produced := make(chan error, 1)
	go func() {
		close(started)
		_, err := p.Produce(context.Background(), AcksLeader, nil)
		produced <- err
	}()
	<-started
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := <-produced; err != nil && !errors.Is(err, errClosed) {
		t.Fatalf("the racing acks=leader Produce: %v", err)
	}
	if _, err := p.Produce(context.Background(), AcksLeader, []Message{{Topic: "jobs", Value: []byte("x"), Partition: -1}}); !errors.Is(err, errClosed) {
		t.Fatalf("an acks=leader Produce after Close: %v, want %v", err, errClosed)
	}
}

// With a linger, records of concurrent Produce calls share requests (the
// flush settings reach sarama) and every call still gets its own answer.
func TestLingerSharesRequestsAndAnswersEachCall(t *testing.T) {
	k := testenv.Kafka(t, testenv.Topic("jobs", 1))
	cfg := Config{Brokers: k.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none"}
	p, err := NewProducer(&cfg, ProducerOptions{Linger: 20 * time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if f := p.cfg.Producer.Flush; f.Frequency != 20*time.Millisecond || f.Messages != 64 {
		t.Fatalf("flush settings %+v", f)
	}
	const calls = 32
	errs := make(chan error, calls)
	offsets := make(chan int64, calls)
	for i := range calls {
		go func() {
			res, err := p.Produce(context.Background(), AcksLeader, []Message{{Topic: "jobs", Value: []byte(fmt.Sprint(i)), Partition: -1}})
			if err == nil {
				err = res[0].Err
				offsets <- res[0].Offset
			}
			errs <- err
		}()
	}
	seen := map[int64]bool{}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for range calls {
		seen[<-offsets] = true
	}
	if len(seen) != calls {
		t.Fatalf("%d distinct offsets for %d records", len(seen), calls)
	}
}

// Kafka down at the first acks=leader Produce, then back: the acks=leader
// producer is created on a later Produce instead of keeping its first
// error for the Producer's life (when the lazy one was acks=all, every
// such request of a gate that started during an outage answered 504
// until it restarted).
func TestAcksLeaderRecoversFromAFailedStart(t *testing.T) {
	k := testenv.Kafka(t, testenv.Topic("jobs", 1), testenv.DataDir(t.TempDir()))
	cfg := Config{Brokers: k.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none"}
	p, err := NewProducer(&cfg, ProducerOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	k.Stop()
	msg := []Message{{Topic: "jobs", Value: []byte("x"), Partition: -1}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Produce(ctx, AcksLeader, msg); err == nil {
		t.Fatal("an acks=leader Produce with Kafka down succeeded")
	}
	k.Start()
	testenv.WaitFor(t, 30*time.Second, "an acks=leader Produce once Kafka is back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := p.Produce(ctx, AcksLeader, msg)
		return err == nil && res[0].Err == nil
	})
}
