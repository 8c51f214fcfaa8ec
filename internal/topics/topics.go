// Package topics is the stage's topic list (docs/topics.md): the job
// topics an operator created with `sluice topics create` (the admin API),
// kept in Consul KV under sluice/<stage>/topics/<name>, which relays (and
// sluice dev's worker) watch so that a new topic is served without a
// restart; and the Kafka side of creating and deleting one: the topic with
// its <topic>.retry and <topic>.dlq.
package topics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
)

// Defaults of `sluice topics create`: what sluice dev and deploy/compose
// create for the job topic today. The replication default is
// min(DefaultReplication, brokers), so one broker (dev, compose) gets 1.
const (
	DefaultPartitions  = 8
	DefaultReplication = 3
	// MaxPartitions bounds a topic's Kafka partitions: every partition
	// is a consumer and a canary path of the relay's.
	MaxPartitions = 4096
)

// Spec is a topic's entry in the list: the JSON value of its key.
type Spec struct {
	Partitions  int       `json:"partitions"`
	Replication int       `json:"replication"`
	Created     time.Time `json:"created"`
}

// Prefix is the list's Consul KV prefix, "sluice/<stage>/topics/".
func Prefix(stage string) (string, error) {
	k, err := consul.Key(stage, "topics")
	if err != nil {
		return "", err
	}
	return k + "/", nil
}

// Key is topic's key in the list, "sluice/<stage>/topics/<topic>".
func Key(stage, topic string) (string, error) {
	if err := Valid(topic); err != nil {
		return "", err
	}
	return consul.Key(stage, "topics", topic)
}

// Valid refuses a name that cannot be a job topic: one queue.ValidTopic
// refuses, or a name the relay keeps for itself (<t>.retry, <t>.dlq,
// Kafka's __*).
func Valid(topic string) error {
	if err := queue.ValidTopic(topic); err != nil {
		return err
	}
	if kafka.InternalTopic(topic) {
		return fmt.Errorf("topic %q: names ending in %s or %s, or starting with __, are the relay's and Kafka's own", topic, kafka.RetrySuffix, kafka.DLQSuffix)
	}
	return nil
}

// Parse reads a key's value.
func Parse(value []byte) (Spec, error) {
	var s Spec
	if err := json.Unmarshal(value, &s); err != nil {
		return s, fmt.Errorf("topic spec: %w", err)
	}
	if s.Partitions < 1 {
		return s, fmt.Errorf("topic spec: partitions %d, want at least 1", s.Partitions)
	}
	return s, nil
}

// CheckSize refuses partitions and replication that cannot be created on
// a cluster of brokers brokers, naming the flag that mends it.
//
// Any partition count fits the Redis layout: the relay puts a job in the
// Redis partition of fnv1a32(group or id) % N whatever Kafka partition it
// came from, so Kafka and Redis partition counts are independent (the
// canary plans max(both) paths, docs/canary.md).
func CheckSize(partitions, replication, brokers int) error {
	if partitions < 1 || partitions > MaxPartitions {
		return fmt.Errorf("partitions %d: want 1..%d (--partitions)", partitions, MaxPartitions)
	}
	if replication < 1 {
		return fmt.Errorf("replication %d: want at least 1 (--replication)", replication)
	}
	if brokers > 0 && replication > brokers {
		return fmt.Errorf("replication %d: the cluster has %d broker(s), so at most %d copies can be kept (--replication %d)", replication, brokers, brokers, brokers)
	}
	return nil
}

// Kafka names a job topic's Kafka topics: itself, its retry and its DLQ.
func Kafka(topic string) []string {
	return []string{topic, kafka.RetryTopic(topic), kafka.DLQTopic(topic)}
}

// CreateKafka creates what is missing of topic, topic.retry (partitions
// each) and topic.dlq (one partition: dead letters are few, and one
// partition keeps them in order), each with replication copies. It
// returns the names it created; a name that exists is left as it is.
func CreateKafka(adm sarama.ClusterAdmin, existing map[string]sarama.TopicDetail, topic string, partitions, replication int) ([]string, error) {
	var created []string
	for _, name := range Kafka(topic) {
		if _, ok := existing[name]; ok {
			continue
		}
		n := int32(partitions)
		if name == kafka.DLQTopic(topic) {
			n = 1
		}
		err := adm.CreateTopic(name, &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: int16(replication)}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return created, fmt.Errorf("creating Kafka topic %s: %w", name, err)
		}
		created = append(created, name)
	}
	return created, nil
}

// Watch follows the stage's list until ctx ends, calling fn with every
// topic and its spec at start and on every change (consul.WatchPrefix:
// on Consul errors the last list stays in force). A key whose name or
// value is invalid is logged and left out.
func Watch(ctx context.Context, client *consulapi.Client, stage string, opts consul.WatchOptions, fn func(map[string]Spec)) error {
	prefix, err := Prefix(stage)
	if err != nil {
		return err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return consul.WatchPrefix(ctx, client, prefix, opts, func(values map[string][]byte) {
		out := make(map[string]Spec, len(values))
		for name, v := range values {
			if err := Valid(name); err != nil {
				log.Error("ignoring an invalid topic in the stage's list", "key", prefix+name, "err", err)
				continue
			}
			s, err := Parse(v)
			if err != nil {
				log.Error("ignoring an invalid topic in the stage's list", "key", prefix+name, "err", err)
				continue
			}
			out[name] = s
		}
		fn(out)
	})
}

// Names are m's topics, sorted.
func Names(m map[string]Spec) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// List reads the stage's list once.
func List(ctx context.Context, kv *consulapi.KV, stage string) (map[string]Spec, error) {
	prefix, err := Prefix(stage)
	if err != nil {
		return nil, err
	}
	pairs, _, err := kv.List(prefix, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	out := map[string]Spec{}
	for _, p := range pairs {
		name := strings.TrimPrefix(p.Key, prefix)
		if Valid(name) != nil {
			continue
		}
		if s, err := Parse(p.Value); err == nil {
			out[name] = s
		}
	}
	return out, nil
}
