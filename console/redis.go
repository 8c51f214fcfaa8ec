package console

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/queue"
)

// redisSide is every Redis operation the console uses: its whole surface on
// the queue layer, in one place. The console holds its *queue.Pool as this
// (internal/arch's TestRedisSurfaceRoles keeps the list exact: a method the
// console stops calling leaves it, one it starts calling joins it).
type redisSide interface {
	// connect and check
	Ping(ctx context.Context) error
	AwaitSafe(ctx context.Context, log *slog.Logger) error
	Close() error
	// keys and clients (group views read hashes directly)
	Keyspace() queue.Keyspace
	Client(part int) redis.UniversalClient
	MasterOf(ctx context.Context, part int, key string) (redis.UniversalClient, error)
	// topics
	Topics(ctx context.Context, also ...string) ([]string, error)
	UnregisterTopic(ctx context.Context, topic string) (bool, error)
	// jobs: list, find, cancel
	ListJobPage(ctx context.Context, jq queue.JobQuery) (queue.JobPage, error)
	FindJob(ctx context.Context, l queue.JobLookup) (queue.JobWhereabouts, error)
	CancelJob(ctx context.Context, l queue.JobLookup, del bool, now time.Time) (string, queue.JobWhereabouts, error)
	// dead letters: page, find, replay, purge
	DeadPage(ctx context.Context, q queue.Queue, beforeMS int64, beforeID string, n int) ([]queue.DeadRef, error)
	DeadJobs(ctx context.Context, q queue.Queue, refs []queue.DeadRef) error
	FindDead(ctx context.Context, topic, id string) (ref queue.DeadRef, q queue.Queue, ok bool, err error)
	ReplayDead(ctx context.Context, q queue.Queue, id string, now time.Time) (int, error)
	PurgeDead(ctx context.Context, q queue.Queue, id string) (bool, error)
	// groups (also through groups.Read and groups.Cancel)
	GroupStatus(ctx context.Context, topic, group string) (queue.GroupStatus, error)
	CancelGroup(ctx context.Context, topic, group string, now time.Time) (int, error)
	// the funnel, canaries, load (also through funnel.Gather and canary.Read)
	Funnel(ctx context.Context, q queue.Queue) (queue.PartitionFunnel, error)
	CountMilestone(ctx context.Context, topic, milestone string, canary bool, n int64) error
	Load(ctx context.Context, part int, topics []string, forget time.Duration) (queue.PartitionLoad, error)
	CanaryHashes(ctx context.Context) (map[int]map[string]string, error)
	// periodic schedules
	PeriodicStates(ctx context.Context) (map[string]string, error)
	DeletePeriodicState(ctx context.Context, name string) error
}

var _ redisSide = (*queue.Pool)(nil)

// openRedis is queue.NewPool held as the part's redisSide.
func openRedis(cfg queue.PoolConfig) (redisSide, error) { return queue.OpenAs[redisSide](cfg) }
