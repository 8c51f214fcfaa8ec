package queue

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// redisTo is where go-redis's own log lines go: nowhere until RouteLogs.
var redisTo atomic.Pointer[slog.Logger]

// go-redis has one logger for the process, a variable its goroutines read:
// it is set here, before any runs, and RouteLogs changes only where the
// lines go.
func init() {
	redisTo.Store(slog.New(slog.DiscardHandler))
	redis.SetLogger(redisLog{})
}

// RouteLogs sends go-redis's own log lines (failed dials, pool events) into
// log at debug level, marked from=go-redis, instead of the standard
// logger's stderr: the parts log a Redis outage themselves, once, at warn.
func RouteLogs(log *slog.Logger) { redisTo.Store(log.With("from", "go-redis")) }

type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	redisTo.Load().DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}
