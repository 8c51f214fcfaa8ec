package queue

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// The worker's end of a partition's command list and worker-count
// checkpoint (PushCommand and the coordinator's scaler are the other end):
// named operations, so the worker's Redis surface lists what it does
// rather than a client and the keys it builds.

// CheckpointWorkers stores n as partition part's worker count, so a
// restarted worker resumes with it.
func (p *Pool) CheckpointWorkers(ctx context.Context, part, n int) error {
	return p.byPart[part].Set(ctx, p.keyspace.PartKeys(part).WorkerCount(), n, 0).Err()
}

// CheckpointedWorkers is partition part's stored worker count, 0 when none
// is stored.
func (p *Pool) CheckpointedWorkers(ctx context.Context, part int) (int, error) {
	n, err := p.byPart[part].Get(ctx, p.keyspace.PartKeys(part).WorkerCount()).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// PopCommand takes the oldest command off partition part's command list;
// ok is false when the list is empty.
func (p *Pool) PopCommand(ctx context.Context, part int) (raw string, ok bool, err error) {
	raw, err = p.byPart[part].LPop(ctx, p.keyspace.PartKeys(part).Cmd()).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return raw, err == nil, err
}
