package kafka

import "strings"

// The Kafka names sluice's parts agree on: the topics beside a job topic
// and the relays' consumer groups. One definition: the relay writes them,
// the gate refuses them as job topics, the admin API reads them, sluice dev
// creates them.

const (
	// DLQSuffix ends a job topic's dead-letter topic (DLQTopic).
	DLQSuffix = ".dlq"
	// RetrySuffix ends a job topic's retry topic (RetryTopic).
	RetrySuffix = ".retry"
	// RelayConsumerGroup is the relays' default consumer group (relay
	// Config.ConsumerGroup); the offsets of topic T are kept by the group
	// RelayGroup(group, T).
	RelayConsumerGroup = "sluice-relay"
)

// DLQTopic is topic's dead-letter topic, <topic>.dlq: where the relay puts
// the records it cannot relay, and what the admin API lists and replays.
func DLQTopic(topic string) string { return topic + DLQSuffix }

// RetryTopic is topic's retry topic, <topic>.retry.
func RetryTopic(topic string) string { return topic + RetrySuffix }

// RelayGroup is the Kafka consumer group whose committed offsets the relay
// of topic keeps, <group>.<topic>; its lag is the relay's lag.
func RelayGroup(group, topic string) string { return group + "." + topic }

// InternalTopic reports topics clients never write directly: the relay's
// retry and dead-letter topics and Kafka's own (__*).
func InternalTopic(topic string) bool {
	return strings.HasSuffix(topic, DLQSuffix) || strings.HasSuffix(topic, RetrySuffix) || strings.HasPrefix(topic, "__")
}
