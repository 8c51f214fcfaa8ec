package testenv

import (
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
	c, err := sarama.NewConsumer(brokers, cfg)
	if err != nil {
		t.Fatalf("testenv: consumer: %v", err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, partition, offset)
	if err != nil {
		t.Fatalf("testenv: consume %s/%d@%d: %v", topic, partition, offset, err)
	}
	defer pc.Close()
	out := make([]*sarama.ConsumerMessage, 0, n)
	deadline := time.After(10 * time.Second)
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
