package testenv

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// ReadRecords reads n records of topic/partition starting at offset with
// sarama, as sluice's own consumers do, failing the test if they do not
// arrive within 10 seconds.
func ReadRecords(t testing.TB, brokers []string, topic string, partition int32, offset int64, n int) []*sarama.ConsumerMessage {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Metadata.AllowAutoTopicCreation = false
	cl, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	defer cl.Close()
	c, err := sarama.NewConsumerFromClient(cl)
	if err != nil {
		t.Fatalf("testenv: consumer: %v", err)
	}
	defer c.Close()
	deadline := time.After(10 * time.Second)
	var pc sarama.PartitionConsumer
	// A broker that has just started can list itself as the leader a moment
	// before it serves the partition (NOT_LEADER_OR_FOLLOWER): ask again.
	for pc == nil {
		pc, err = c.ConsumePartition(topic, partition, offset)
		if err == nil {
			break
		}
		var kerr sarama.KError
		if !errors.As(err, &kerr) || !(kerr == sarama.ErrNotLeaderForPartition || kerr == sarama.ErrLeaderNotAvailable) {
			t.Fatalf("testenv: consume %s/%d@%d: %v", topic, partition, offset, err)
		}
		select {
		case <-deadline:
			t.Fatalf("testenv: consume %s/%d@%d: %v after 10s", topic, partition, offset, err)
		case <-time.After(100 * time.Millisecond):
		}
		_ = cl.RefreshMetadata(topic)
	}
	defer pc.Close()
	out := make([]*sarama.ConsumerMessage, 0, n)
	for len(out) < n {
		select {
		case m := <-pc.Messages():
			out = append(out, m)
		case err := <-pc.Errors():
			t.Fatalf("testenv: consume %s/%d@%d: %v", topic, partition, offset, err)
		case <-deadline:
			t.Fatalf("testenv: %d of %d records at %s/%d@%d after 10s", len(out), n, topic, partition, offset)
		}
	}
	return out
}
