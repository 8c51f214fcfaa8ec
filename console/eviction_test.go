package console_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/console"
)

// A console writes to Redis (dead jobs replayed or purged, groups
// cancelled): it serves while Redis does not answer, but stops with an
// error that names the setting once it finds a maxmemory-policy that evicts
// keys.
func TestTheConsoleRefusesAnEvictingRedis(t *testing.T) {
	b := newBed(t, 2)
	if err := b.redis.Client().ConfigSet(context.Background(), "maxmemory-policy", "volatile-random").Err(); err != nil {
		t.Fatal(err)
	}
	c, err := console.New(b.config(t, nil), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Serve(ctx, ln)
	if ctx.Err() != nil || err == nil || !strings.Contains(err.Error(), "maxmemory-policy is volatile-random") || !strings.Contains(err.Error(), "set maxmemory-policy noeviction") {
		t.Fatalf("Serve against volatile-random: %v (ctx %v)", err, ctx.Err())
	}
}
