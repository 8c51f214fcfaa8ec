package queue

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RouteLogs sends go-redis's own log lines (failed dials, pool events) into
// log at debug level, marked from=go-redis, instead of the standard
// logger's stderr: the parts log a Redis outage themselves, once, at warn.
// go-redis has one logger for the process.
func RouteLogs(log *slog.Logger) {
	redis.SetLogger(redisLog{log.With("from", "go-redis")})
}

type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}
