package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// ErrUnknownTopic means the topic does not exist in Kafka.
var ErrUnknownTopic = errors.New("unknown topic")

// ErrUnavailable means Kafka's metadata could not be read lately.
var ErrUnavailable = errors.New("Kafka unavailable")

// Catalog caches the cluster's topics and their partition counts, so request
// paths answer "does this topic exist, how many partitions" without a round
// trip, and know at once when Kafka is unreachable instead of each request
// waiting for its own timeout.
type Catalog struct {
	client sarama.Client
	log    *slog.Logger
	every  time.Duration // refresh period while healthy
	now    func() time.Time

	mu      sync.RWMutex
	topics  map[string]int32
	healthy bool
	lastErr error
	lastTry time.Time

	refreshMu sync.Mutex // one refresh at a time; others wait for its result
	wake      chan struct{}
}

// NewCatalog returns a catalogue over client, refreshed every period while
// Kafka answers and every second while it does not. Call Run to refresh in
// the background; the first refresh happens here.
func NewCatalog(ctx context.Context, client sarama.Client, every time.Duration, log *slog.Logger) *Catalog {
	c := &Catalog{client: client, log: log, every: every, now: time.Now, wake: make(chan struct{}, 1)}
	c.refresh(ctx)
	return c
}

// Partitions returns topic's partition count. A topic missing from the
// cache triggers a refresh (at most one a second), so a topic created a
// moment ago is found without waiting a whole period.
func (c *Catalog) Partitions(ctx context.Context, topic string) (int32, error) {
	c.mu.RLock()
	n, ok := c.topics[topic]
	healthy, lastErr := c.healthy, c.lastErr
	c.mu.RUnlock()
	if !healthy {
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, lastErr)
	}
	if ok {
		return n, nil
	}
	c.refreshIfOlder(ctx, time.Second)
	c.mu.RLock()
	n, ok = c.topics[topic]
	healthy = c.healthy
	c.mu.RUnlock()
	switch {
	case ok:
		return n, nil
	case !healthy:
		return 0, ErrUnavailable
	}
	return 0, ErrUnknownTopic
}

// Ready reports whether the last metadata refresh succeeded.
func (c *Catalog) Ready(context.Context) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.healthy {
		return fmt.Errorf("Kafka metadata unreachable: %v", c.lastErr)
	}
	return nil
}

// MarkUnavailable records that a produce found Kafka unreachable, so that
// later requests fail fast until a refresh succeeds again.
func (c *Catalog) MarkUnavailable(err error) {
	c.mu.Lock()
	was := c.healthy
	c.healthy, c.lastErr = false, err
	c.mu.Unlock()
	if was {
		c.log.Warn("Kafka unavailable", "err", err)
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run refreshes the catalogue until ctx ends.
func (c *Catalog) Run(ctx context.Context) {
	for {
		c.mu.RLock()
		wait := c.every
		if !c.healthy {
			wait = time.Second
		}
		c.mu.RUnlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-c.wake:
			t.Stop()
		case <-t.C:
		}
		c.refreshIfOlder(ctx, time.Second)
	}
}

func (c *Catalog) refreshIfOlder(ctx context.Context, age time.Duration) {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	c.mu.RLock()
	recent := c.now().Sub(c.lastTry) < age
	c.mu.RUnlock()
	if !recent {
		c.refreshLocked(ctx)
	}
}

func (c *Catalog) refresh(ctx context.Context) {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	c.refreshLocked(ctx)
}

func (c *Catalog) refreshLocked(ctx context.Context) {
	start := c.now()
	topics, err := c.read(ctx)
	c.mu.Lock()
	was := c.healthy
	c.lastTry = start
	if err != nil {
		c.healthy, c.lastErr = false, err
	} else {
		c.healthy, c.lastErr, c.topics = true, nil, topics
	}
	c.mu.Unlock()
	switch {
	case err != nil && was:
		c.log.Warn("Kafka metadata unreachable", "err", err)
	case err == nil && !was:
		c.log.Info("Kafka metadata reachable", "topics", len(topics))
	}
}

func (c *Catalog) read(ctx context.Context) (map[string]int32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.client.RefreshMetadata(); err != nil {
		return nil, err
	}
	names, err := c.client.Topics()
	if err != nil {
		return nil, err
	}
	topics := make(map[string]int32, len(names))
	for _, name := range names {
		parts, err := c.client.Partitions(name)
		if err != nil {
			return nil, fmt.Errorf("partitions of %s: %w", name, err)
		}
		topics[name] = int32(len(parts))
	}
	return topics, nil
}
