package kafka

import (
	"fmt"

	"github.com/IBM/sarama"
)

// GroupOffsets reads a consumer group's committed offsets of a topic's
// partitions (-1: none committed), or nil when the group does not exist.
func GroupOffsets(client sarama.Client, group, topic string, parts []int32) (map[int32]int64, error) {
	broker, err := client.Coordinator(group)
	if err != nil {
		return nil, fmt.Errorf("coordinator of %s: %w", group, err)
	}
	fetch := &sarama.OffsetFetchRequest{Version: 2, ConsumerGroup: group}
	for _, p := range parts {
		fetch.AddPartition(topic, p)
	}
	resp, err := broker.FetchOffset(fetch)
	if err != nil {
		return nil, fmt.Errorf("offsets of %s: %w", group, err)
	}
	if resp.Err == sarama.ErrGroupIDNotFound {
		return nil, nil
	}
	if resp.Err != sarama.ErrNoError {
		return nil, fmt.Errorf("offsets of %s: %w", group, resp.Err)
	}
	out := make(map[int32]int64, len(parts))
	for _, p := range parts {
		out[p] = -1
		if b := resp.GetBlock(topic, p); b != nil && b.Err == sarama.ErrNoError {
			out[p] = b.Offset
		}
	}
	return out, nil
}

// Lag is a consumer group's backlog in a topic: per partition, the records
// from its committed offset (or the oldest kept, when it has none) to the
// end. Records means records: jobs, bulk groups' closes and canaries alike.
func Lag(client sarama.Client, group, topic string) (total int64, byPartition map[int32]int64, err error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return 0, nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	committed, err := GroupOffsets(client, group, topic, parts)
	if err != nil {
		return 0, nil, err
	}
	byPartition = make(map[int32]int64, len(parts))
	for _, p := range parts {
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, nil, fmt.Errorf("end of %s/%d: %w", topic, p, err)
		}
		from, ok := committed[p]
		if !ok || from < 0 {
			if from, err = client.GetOffset(topic, p, sarama.OffsetOldest); err != nil {
				return 0, nil, fmt.Errorf("start of %s/%d: %w", topic, p, err)
			}
		}
		byPartition[p] = max(newest-from, 0)
		total += byPartition[p]
	}
	return total, byPartition, nil
}
