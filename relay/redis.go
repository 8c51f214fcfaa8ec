package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/queue"
)

// redisSide is every Redis operation the relay uses: its whole surface on
// the queue layer, in one place. The relay holds its *queue.Pool as this
// (internal/arch's TestRedisSurfaceRoles keeps the list exact: a method the
// relay stops calling leaves it, one it starts calling joins it).
type redisSide interface {
	// connect and check
	Ping(ctx context.Context) error
	LoadScripts(ctx context.Context) error
	CheckEviction(ctx context.Context, log *slog.Logger) error
	Epoch(ctx context.Context) (string, error)
	RegisterTopics(ctx context.Context, topics []string, now time.Time) error
	Close() error
	// keys and clients: per-server memory guards and byte counts
	Keyspace() queue.Keyspace
	Servers() ([]redis.UniversalClient, []string)
	Client(part int) redis.UniversalClient
	// fencing: one relay per topic writes
	RaiseFence(ctx context.Context, topic string, token uint64) error
	CheckFence(ctx context.Context, topic string, token uint64) error
	// enqueue and what follows the log: truncation, replication, pause, group cancels
	EnqueueReporting(ctx context.Context, token uint64, items []queue.Item, now time.Time, changed func(queue.LogChange)) ([]queue.Result, error)
	LowerTruncated(ctx context.Context, token uint64, topic string, kp int32, logEnd, resume int64) ([]queue.Truncation, error)
	WaitReplicas(ctx context.Context, queues []queue.Queue, n int, timeout time.Duration) error
	SetTopicPaused(ctx context.Context, topic string, paused bool, now time.Time) error
	CancelGroupFenced(ctx context.Context, token uint64, topic, group string, now time.Time) (int, error)
	// the funnel
	CountMilestoneFenced(ctx context.Context, token uint64, topic, milestone string, n int64) error
}

var _ redisSide = (*queue.Pool)(nil)

// openRedis is queue.NewPool held as the part's redisSide.
func openRedis(cfg queue.PoolConfig) (redisSide, error) { return queue.OpenAs[redisSide](cfg) }
