package queue

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"
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
	if err := p.byPart[0].HSet(ctx, p.layout.PartKeys(0).Topics(), vals...).Err(); err != nil {
		return fmt.Errorf("registering topics %v: %w", topics, err)
	}
	return nil
}

// Topics lists the topics relayed into this stage, sorted, with those of
// also added: what every reader of all queues should read.
func (p *Pool) Topics(ctx context.Context, also ...string) ([]string, error) {
	names, err := p.byPart[0].HKeys(ctx, p.layout.PartKeys(0).Topics()).Result()
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

// UnregisterTopic takes topic out of the stage's registry (PartKeys.Topics)
// once it is deleted (sluice topics delete), so that readers of every
// queue stop listing it; whether it was there.
func (p *Pool) UnregisterTopic(ctx context.Context, topic string) (bool, error) {
	n, err := p.byPart[0].HDel(ctx, p.layout.PartKeys(0).Topics(), topic).Result()
	if err != nil {
		return false, fmt.Errorf("unregistering topic %s: %w", topic, err)
	}
	return n > 0, nil
}
