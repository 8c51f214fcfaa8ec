package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/queue"
)

// batchEnqueuer puts a scenario's jobs into Redis as the relay would, a
// batch at a time. Every job must be new: a scenario wants a fresh Redis
// (or stage), and a duplicate would make its counts lie.
type batchEnqueuer struct {
	ctx   context.Context
	pool  *queue.Pool
	now   time.Time
	what  string
	items []queue.Item
}

func newBatchEnqueuer(ctx context.Context, pool *queue.Pool, what string, size int) *batchEnqueuer {
	return &batchEnqueuer{ctx: ctx, pool: pool, now: time.Now(), what: what, items: make([]queue.Item, 0, size)}
}

func (b *batchEnqueuer) add(it queue.Item) error {
	b.items = append(b.items, it)
	if len(b.items) == cap(b.items) {
		return b.flush()
	}
	return nil
}

func (b *batchEnqueuer) flush() error {
	if len(b.items) == 0 {
		return nil
	}
	res, err := b.pool.Enqueue(b.ctx, 1, b.items, b.now)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Outcome != queue.Queued {
			return fmt.Errorf("enqueueing the %s: %v (%v); use a fresh stage or Redis", b.what, r.Outcome, r.Err)
		}
	}
	b.items = b.items[:0]
	return nil
}

// doneCount is how many of topic's jobs its partitions counted done: the
// funnel's completed stage, which leaves out the canaries sluice dev sends
// through the same topic (the stats hash's "done" counts them too, so a
// wait for it could end with jobs still queued).
func doneCount(ctx context.Context, pool *queue.Pool, layout queue.Keyspace, topic string) (int, error) {
	total := 0
	for part := range layout.Partitions {
		n, err := pool.Client(part).HGet(ctx, layout.Keys(queue.Queue{Topic: topic, Part: part}).Stats(),
			queue.FunnelField(topic, queue.MilestoneCompleted, false)).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		total += n
	}
	return total, nil
}
