package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/queue"
)

// redisSide is every Redis operation the worker uses: its whole surface on
// the queue layer, in one place. The worker holds its *queue.Pool as this
// (internal/arch's TestRedisSurfaceRoles keeps the list exact: a method the
// worker stops calling leaves it, one it starts calling joins it).
type redisSide interface {
	// connect and check
	Ping(ctx context.Context) error
	LoadScripts(ctx context.Context) error
	CheckEviction(ctx context.Context, log *slog.Logger) error
	Topics(ctx context.Context, also ...string) ([]string, error)
	Fresh() (*queue.Pool, error)
	Close() error
	// keys and clients, for the blocking wait on the ready lists and the lane probes
	Keyspace() queue.Keyspace
	Cluster() bool
	Client(part int) redis.UniversalClient
	// claim and keep
	ClaimDrained(ctx context.Context, q queue.Queue, max int, lease time.Duration) (jobs []queue.Claimed, drained bool, err error)
	Woken(q queue.Queue, token string)
	ExtendLeases(ctx context.Context, q queue.Queue, batches []string, lease time.Duration) (kept []bool, cancels map[string][]int, err error)
	Release(ctx context.Context, q queue.Queue, jobs []queue.Claimed) (int, error)
	ReadMaintenance(ctx context.Context, asks []queue.PartMaintenance, now time.Time) []queue.MaintenanceRound
	Maintain(ctx context.Context, due queue.DueWork, dead queue.DeadLimits, limit queue.AttemptLimit, now time.Time) (returned, died, promoted int, err error)
	Promote(ctx context.Context, q queue.Queue, max int, now time.Time) (int, error)
	// settle
	AckMany(ctx context.Context, q queue.Queue, done []queue.Done, now time.Time, keep time.Duration) (ok []bool, err error)
	Fail(ctx context.Context, q queue.Queue, f queue.Failure, now time.Time, dead queue.DeadLimits) (int, error)
	Defer(ctx context.Context, q queue.Queue, job queue.Claimed, at, now time.Time) (bool, error)
	SettleCancelled(ctx context.Context, q queue.Queue, job queue.Claimed, now time.Time, keep time.Duration) (bool, error)
	WakeDeferred(ctx context.Context, jobs []queue.Deferred, now time.Time) error
	RecordCanaryDone(ctx context.Context, part int, field string, sent, done time.Time) (bool, error)
	// idempotency keys
	IdempotencyBegin(ctx context.Context, key, id string, attempt int, hold time.Duration) (queue.IdempotencyBegun, error)
	IdempotencyWait(ctx context.Context, key, mark string, d queue.Deferred, hold time.Duration) (bool, error)
	IdempotencyEnd(ctx context.Context, key, id string, attempt int, succeeded bool, ttl time.Duration) ([]queue.Deferred, error)
	// rate limits and concurrency slots (the limiter's own pool)
	Admit(ctx context.Context, resource, member string, max int, window time.Duration, now time.Time) (time.Duration, error)
	Reserve(ctx context.Context, r queue.Reservation, now time.Time) (queue.Slot, error)
	Started(ctx context.Context, resource, member string, at time.Time) error
	// scaling: heartbeats, the coordinator's commands, the worker-count checkpoint
	Heartbeat(ctx context.Context, part int, consumer string, workers int, busy time.Duration) (checkpoint int, err error)
	Leave(ctx context.Context, part int, consumer string) error
	StopWaiting(ctx context.Context, part int, consumer string) error
	PopCommand(ctx context.Context, part int) (raw string, ok bool, err error)
	CheckpointWorkers(ctx context.Context, part, n int) error
	CheckpointedWorkers(ctx context.Context, part int) (int, error)
}

var _ redisSide = (*queue.Pool)(nil)

// openRedis is queue.NewPool held as the part's redisSide.
func openRedis(cfg queue.PoolConfig) (redisSide, error) { return queue.OpenAs[redisSide](cfg) }

// freshRedis opens a side of its own on the worker's Redis, for the retries
// of a write through an outage (queue.UntilTaken) and of the leases'
// extensions; the caller closes it.
func (w *Worker) freshRedis() (redisSide, error) {
	p, err := w.pool.Fresh()
	if err != nil {
		return nil, err // not a nil *queue.Pool in a redisSide
	}
	return p, nil
}
