package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/queue"
)

// redisSide is every Redis operation the sluice binary uses itself (sluice
// canary, sluice stats, sluice dev): its surface on the queue layer, in one
// place; the parts it runs hold their own (internal/arch's
// TestRedisSurfaceRoles keeps the list exact).
type redisSide interface {
	// connect and check
	Ping(ctx context.Context) error
	Close() error
	Topics(ctx context.Context, also ...string) ([]string, error)
	// keys and clients (sluice dev clears the fences of a fresh stage)
	Keyspace() queue.Keyspace
	Client(part int) redis.UniversalClient
	// sluice stats (funnel.Gather)
	Funnel(ctx context.Context, q queue.Queue) (queue.PartitionFunnel, error)
	// sluice canary (coordinator.CanaryRedis, and funnel.Gather's canary.Read)
	Load(ctx context.Context, part int, topics []string, forget time.Duration) (queue.PartitionLoad, error)
	RecordCanariesSent(ctx context.Context, fields map[int][]string, sent time.Time) error
	CanaryHashes(ctx context.Context) (map[int]map[string]string, error)
	ForgetCanaries(ctx context.Context, part int, fields []string) error
	CanaryAlerting(ctx context.Context) (bool, error)
	SetCanaryAlerting(ctx context.Context, on bool) error
	SetCanaryMonitor(ctx context.Context, value string) error
}

var _ redisSide = (*queue.Pool)(nil)

// openRedis is queue.NewPool held as the part's redisSide.
func openRedis(cfg queue.PoolConfig) (redisSide, error) { return queue.OpenAs[redisSide](cfg) }
