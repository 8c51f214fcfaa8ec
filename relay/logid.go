package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/queue"
)

// errTopicRecreated stops a topic's run when Kafka names the topic by
// another id than the run started with: it was deleted and created again,
// and the partition consumers, which fetch by name, would go on reading the
// new log at the old log's offsets, skipping its beginning. The next run
// starts the partitions whose committed offsets belong to the old log at
// the new log's oldest offset.
var errTopicRecreated = errors.New("the topic was deleted and created again")

// topicIDEvery is how often a run asks Kafka for its topic's id.
const topicIDEvery = 5 * time.Second

// Each record's log is the topic's id (Kafka 2.8+, Metadata v10+): the
// enqueue script keeps it with the watermark and does not dedupe a record
// of another log against the old log's offsets (docs/relay.md).

// fetchTopicID asks Kafka for the topic's id. It answers "" with no error
// when the protocol version spoken (--kafka-version) predates topic ids.
func fetchTopicID(client sarama.Client, topic string) (string, error) {
	req := sarama.NewMetadataRequest(client.Config().Version, []string{topic})
	if req.Version < 10 {
		return "", nil
	}
	b := client.LeastLoadedBroker()
	if b == nil {
		return "", errors.New("no Kafka broker to ask")
	}
	resp, err := b.GetMetadata(req)
	if err != nil {
		return "", err
	}
	for _, tm := range resp.Topics {
		if tm.Name != topic {
			continue
		}
		if tm.Err != sarama.ErrNoError {
			return "", tm.Err
		}
		if tm.Uuid == (sarama.Uuid{}) {
			return "", nil // a broker that keeps no topic ids
		}
		return tm.Uuid.String(), nil
	}
	return "", fmt.Errorf("the metadata answer does not name %s", topic)
}

// learnTopicID sets the run's topic id, which its items carry, and makes
// the log-change counter of each partition exist. Without an id the
// watermark compares offsets only, as before topic ids: the relay says so,
// once per topic until it learns one again.
func (t *topicRun) learnTopicID(client sarama.Client, parts []int32) {
	for _, p := range parts {
		t.r.m.logChanges.WithLabelValues(t.topic, strconv.Itoa(int(p)))
		t.r.m.truncations.WithLabelValues(t.topic, strconv.Itoa(int(p)))
	}
	id, err := fetchTopicID(client, t.topic)
	if id != "" {
		t.topicID = id
		t.r.idMissing.Delete(t.topic)
		t.log.Info("the watermark follows the topic's log", "topic_id", id)
		return
	}
	if _, logged := t.r.idMissing.LoadOrStore(t.topic, true); logged {
		return
	}
	why := "Kafka gave no topic id (a broker before 2.8 or --kafka-version before 2.8.0)"
	if err != nil {
		why = "asking Kafka for the topic id failed: " + err.Error()
	}
	t.log.Warn("relaying without the topic's id: the watermark dedupes by offset alone, so a topic deleted and created again has its records up to the old watermark dropped as duplicates; set --kafka-version to the brokers' (2.8.0 or later)",
		"reason", why)
}

// watchTopicID asks Kafka for the topic's id every topicIDEvery until ctx
// ends, and returns errTopicRecreated once it is another than the run's.
// A topic that is gone, or an id Kafka cannot give now, is no change.
func (t *topicRun) watchTopicID(ctx context.Context, client sarama.Client) error {
	if t.topicID == "" {
		return nil
	}
	tick := time.NewTicker(topicIDEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		id, err := fetchTopicID(client, t.topic)
		if err != nil || id == "" || id == t.topicID {
			continue
		}
		t.log.Warn("the topic was deleted and created again: relaying it again from the new log's start",
			"old_topic_id", t.topicID, "new_topic_id", id)
		return errTopicRecreated
	}
}

// startOf is where partition's relaying starts: the committed offset, or
// the oldest when the offset was committed for another log of the topic
// (its metadata names the topic id the offset belongs to). An offset
// without an id (committed before ids, or without one) is taken as is.
func (t *topicRun) startOf(partition int32, committed int64, meta string) int64 {
	if meta == "" || t.topicID == "" || meta == t.topicID || committed < 0 {
		return committed
	}
	t.log.Warn("the committed offset belongs to a deleted log of the topic: starting at the new log's oldest offset",
		"partition", partition, "offset", committed, "committed_topic_id", meta, "topic_id", t.topicID)
	return sarama.OffsetOldest
}

// logChanged reports a watermark the enqueue script found under another
// topic id: it applied the batch rather than dedupe it against the old
// log's offset, so the records up to that offset may run a second time.
func (t *topicRun) logChanged(c queue.LogChange) {
	t.r.m.logChanges.WithLabelValues(t.topic, strconv.Itoa(int(c.KafkaPartition))).Inc()
	t.log.Warn("the watermark belonged to another log of the topic (deleted and created again): not deduplicating against it, records may run again",
		"partition", c.KafkaPartition, "redis_partition", c.Queue.Part,
		"old_topic_id", c.OldTopicID, "new_topic_id", c.NewTopicID, "old_offset", c.OldOffset)
}

// truncationMsg is the ERROR logged for each watermark lowerTruncated
// lowers, and what the alert SluiceRelayWatermarkTruncated quotes. It is
// true of both watermarks it lowers: one at or past the log's end (the
// proof) and one below the end but at or past the resume offset, lowered
// on another's proof (watermark_past_end tells which).
const truncationMsg = "Kafka truncated the log below the relay's watermarks (an unclean leader election?): lowering this watermark to below the resume offset so that the records written there now run, while records the truncation removed are lost to Kafka"

// lowerTruncated compares each partition's watermarks with its log's end
// before the run relays it and, when one lies at or past it, lowers every
// one at or past the committed offset the run resumes at to below it
// (queue.LowerTruncated): a truncated log (an unclean leader election)
// writes new records at offsets the old watermarks hold, and they would
// be dropped as duplicates. It tells a truncation only while the log has
// not grown back past every old watermark, and saves only the new records
// at or after the committed offset; both limits need the record batches'
// leader epochs, which sarama does not give (docs/relay.md).
func (t *topicRun) lowerTruncated(ctx context.Context, client sarama.Client, parts []int32, committed map[int32]int64) error {
	for _, p := range parts {
		end, err := client.GetOffset(t.topic, p, sarama.OffsetNewest)
		if err != nil {
			return fmt.Errorf("end offset of %s/%d: %w", t.topic, p, err)
		}
		resume := end
		if c, ok := committed[p]; ok && c >= 0 {
			resume = c
		}
		lowered, err := t.r.pool.LowerTruncated(ctx, t.lease.Token(), t.topic, p, end, resume)
		for _, tr := range lowered {
			t.r.m.truncations.WithLabelValues(t.topic, strconv.Itoa(int(p))).Inc()
			t.log.Error(truncationMsg, "partition", p, "redis_partition", tr.Queue.Part,
				"watermark", tr.OldOffset, "log_end", tr.End, "resume", tr.Resume, "watermark_past_end", tr.OldOffset >= tr.End)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
