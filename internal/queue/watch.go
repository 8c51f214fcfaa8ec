package queue

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// WaitCompleted is TakeCompleted that blocks up to wait (BLMOVE) for a
// group to complete, so an idle watcher costs Redis one command per wait
// instead of a poll loop. Redis takes whole seconds here: wait is rounded
// up, to at least one second. It returns "" when none came. A blocked call
// does not end with ctx, only with wait: a caller that stops waits out at
// most that long.
func (p *Pool) WaitCompleted(ctx context.Context, q Queue, wait time.Duration) (string, error) {
	k := p.keyspace.Keys(q)
	wait = max((wait + time.Second - 1).Truncate(time.Second), time.Second)
	g, err := p.byPart[q.Part].BLMove(ctx, k.Completed(), k.Completing(), "LEFT", "RIGHT", wait).Result()
	if err == redis.Nil {
		return "", nil
	}
	return g, err
}

// GroupFields reads fields of a group's hash that GroupStatus does not
// parse (topic, the watcher's own bookkeeping); absent ones are "".
func (p *Pool) GroupFields(ctx context.Context, topic, group string, names ...string) ([]string, error) {
	q := p.keyspace.QueueOf(topic, group, "")
	vals, err := p.byPart[q.Part].HMGet(ctx, p.keyspace.Keys(q).Group(group), names...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(names))
	for i, v := range vals {
		out[i], _ = v.(string)
	}
	return out, nil
}
