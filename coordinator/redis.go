package coordinator

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/queue"
)

// redisSide is every Redis operation the coordinator uses (its main pool,
// its watchers' pool, its canary monitor, its periodic scheduler): its whole surface on the
// queue layer, in one place. internal/arch's TestRedisSurfaceRoles keeps the
// list exact: a method the coordinator stops calling leaves it, one it
// starts calling joins it.
type redisSide interface {
	// connect and check
	Ping(ctx context.Context) error
	AwaitSafe(ctx context.Context, log *slog.Logger) error
	Close() error
	// keys and clients (the watchers take turns per server)
	Keyspace() queue.Keyspace
	Client(part int) redis.UniversalClient
	// topics, the funnel
	Topics(ctx context.Context, also ...string) ([]string, error)
	Funnel(ctx context.Context, q queue.Queue) (queue.PartitionFunnel, error)
	// groups: watch completions, record results, finish
	WaitCompleted(ctx context.Context, q queue.Queue, wait time.Duration) (string, error)
	Completing(ctx context.Context, q queue.Queue) ([]string, error)
	JobStates(ctx context.Context, topic, group string, ids []string) ([]queue.JobState, error)
	GroupFields(ctx context.Context, topic, group string, names ...string) ([]string, error)
	SetGroupFields(ctx context.Context, topic, group string, fields map[string]any) error
	GroupStatus(ctx context.Context, topic, group string) (queue.GroupStatus, error)
	FinishCompleted(ctx context.Context, topic, group string, fields map[string]any, keep time.Duration) error
	// scaling: load in, commands out
	Load(ctx context.Context, part int, topics []string, forget time.Duration) (queue.PartitionLoad, error)
	PushCommand(ctx context.Context, c queue.Command) error
	// periodic schedules' states (periodic.PoolStore)
	PeriodicStates(ctx context.Context) (map[string]string, error)
	SavePeriodicState(ctx context.Context, name string, state []byte) error
	// canaries (the CanaryMonitor's CanaryRedis)
	RecordCanariesSent(ctx context.Context, fields map[int][]string, sent time.Time) error
	CanaryHashes(ctx context.Context) (map[int]map[string]string, error)
	ForgetCanaries(ctx context.Context, part int, fields []string) error
	CanaryAlerting(ctx context.Context) (bool, error)
	SetCanaryAlerting(ctx context.Context, on bool) error
	SetCanaryMonitor(ctx context.Context, value string) error
}

// CanaryRedis is what a CanaryMonitor does in Redis: the coordinator hands
// it its redisSide, `sluice canary` its own (a *queue.Pool has it).
type CanaryRedis interface {
	Keyspace() queue.Keyspace
	Load(ctx context.Context, part int, topics []string, forget time.Duration) (queue.PartitionLoad, error)
	RecordCanariesSent(ctx context.Context, fields map[int][]string, sent time.Time) error
	CanaryHashes(ctx context.Context) (map[int]map[string]string, error)
	ForgetCanaries(ctx context.Context, part int, fields []string) error
	CanaryAlerting(ctx context.Context) (bool, error)
	SetCanaryAlerting(ctx context.Context, on bool) error
	SetCanaryMonitor(ctx context.Context, value string) error
}

var (
	_ redisSide   = (*queue.Pool)(nil)
	_ CanaryRedis = (*queue.Pool)(nil)
)

// openRedis is queue.NewPool held as the part's redisSide.
func openRedis(cfg queue.PoolConfig) (redisSide, error) { return queue.OpenAs[redisSide](cfg) }
