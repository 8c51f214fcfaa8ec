package gate

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// redisSide is every Redis operation the gate uses: its whole surface on
// the queue layer, in one place (internal/arch's TestRedisSurfaceRoles
// keeps the list exact). The gate reaches Redis only for job lookups and
// group status and cancels.
type redisSide interface {
	// lookups
	Topics(ctx context.Context, also ...string) ([]string, error)
	FindJob(ctx context.Context, l queue.JobLookup) (queue.JobWhereabouts, error)
	// group status and cancels (groups.Read, groups.Cancel)
	Keyspace() queue.Keyspace
	GroupStatus(ctx context.Context, topic, group string) (queue.GroupStatus, error)
	CancelGroup(ctx context.Context, topic, group string, now time.Time) (int, error)
	// lifecycle
	Close() error
}

var _ redisSide = (*queue.Pool)(nil)

// openRedis is queue.NewPool held as the part's redisSide.
func openRedis(cfg queue.PoolConfig) (redisSide, error) { return queue.OpenAs[redisSide](cfg) }
