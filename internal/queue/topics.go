package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Topics is partition 0's hash of the topics relayed into this stage:
// topic -> when a relay last said it relays it (Unix ms). Readers that
// serve every topic (sluice stats, the admin API, the coordinator, the
// gate's group lookup) take their list from it rather than from a flag
// that could disagree with the relays'.
func (k PartKeys) Topics() string { return k.prefix + "topics" }

// RegisterTopics records that topics are relayed into this stage (see
// PartKeys.Topics). Relays call it when they start.
func (p *Pool) RegisterTopics(ctx context.Context, topics []string, now time.Time) error {
	if len(topics) == 0 {
		return nil
	}
	vals := make([]any, 0, 2*len(topics))
	for _, t := range topics {
		if err := ValidTopic(t); err != nil {
			return err
		}
		vals = append(vals, t, strconv.FormatInt(now.UnixMilli(), 10))
	}
	if err := p.byPart[0].HSet(ctx, p.keyspace.PartKeys(0).Topics(), vals...).Err(); err != nil {
		return fmt.Errorf("registering topics %v: %w", topics, err)
	}
	return nil
}

// Topics lists the topics relayed into this stage, sorted, with those of
// also added: what every reader of all queues should read.
func (p *Pool) Topics(ctx context.Context, also ...string) ([]string, error) {
	names, err := p.byPart[0].HKeys(ctx, p.keyspace.PartKeys(0).Topics()).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the stage's topics: %w", err)
	}
	for _, t := range also {
		if !slices.Contains(names, t) {
			names = append(names, t)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Paused is partition 0's hash of the topics whose relay rate is paused:
// topic -> since when (Unix ms), as the relays watching the rate in
// Consul last saw it. The lookup reads it (one HGET, only for a job Redis
// does not hold) to say that a job is held in Kafka by the pause rather
// than not found: the gate reads Redis, not Consul.
func (k PartKeys) Paused() string { return k.prefix + "paused" }

// SetTopicPaused records whether topic's relay rate is paused (see
// PartKeys.Paused): a pause keeps the time it was first seen, a resume
// removes the topic.
func (p *Pool) SetTopicPaused(ctx context.Context, topic string, paused bool, now time.Time) error {
	k := p.keyspace.PartKeys(0).Paused()
	var err error
	if paused {
		err = p.byPart[0].HSetNX(ctx, k, topic, strconv.FormatInt(now.UnixMilli(), 10)).Err()
	} else {
		err = p.byPart[0].HDel(ctx, k, topic).Err()
	}
	if err != nil {
		return fmt.Errorf("recording the pause of topic %s: %w", topic, err)
	}
	return nil
}

// TopicPaused says since when topic's relay rate is paused; zero when it
// is not.
func (p *Pool) TopicPaused(ctx context.Context, topic string) (time.Time, error) {
	v, err := p.byPart[0].HGet(ctx, p.keyspace.PartKeys(0).Paused(), topic).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return time.Time{}, fmt.Errorf("reading the pause of topic %s: %w", topic, err)
	}
	return msTime(v), nil
}

// UnregisterTopic takes topic out of the stage's registry (PartKeys.Topics)
// once it is deleted (sluice topics delete), so that readers of every
// queue stop listing it; whether it was there.
func (p *Pool) UnregisterTopic(ctx context.Context, topic string) (bool, error) {
	n, err := p.byPart[0].HDel(ctx, p.keyspace.PartKeys(0).Topics(), topic).Result()
	if err != nil {
		return false, fmt.Errorf("unregistering topic %s: %w", topic, err)
	}
	return n > 0, nil
}
