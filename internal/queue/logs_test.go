package queue

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestRouteLogsSendsGoRedisLinesToTheLog: go-redis's own line about a
// failed dial reaches the part's log at debug, marked from=go-redis, not
// the standard logger's stderr.
func TestRouteLogsSendsGoRedisLinesToTheLog(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a loopback port nothing answers on once closed
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var buf testenv.LogBuffer
	RouteLogs(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer RouteLogs(slog.New(slog.DiscardHandler))
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatal("a ping to a closed port answered")
	}
	got := buf.String()
	if !strings.Contains(got, "level=DEBUG") || !strings.Contains(got, "from=go-redis") || !strings.Contains(got, addr) {
		t.Fatalf("go-redis's line about the failed dial, in the log:\n%s", got)
	}
}
