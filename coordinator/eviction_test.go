package coordinator_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/coordinator"
)

// A coordinator writes to Redis (commands, group results, canaries): it
// refuses to start against a Redis whose maxmemory-policy evicts keys, and
// Run names the setting.
func TestTheCoordinatorRefusesAnEvictingRedis(t *testing.T) {
	b := newBed(t, 2)
	if err := b.redis.Client().ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.New(b.config(nil), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	if ctx.Err() != nil || err == nil || !strings.Contains(err.Error(), "maxmemory-policy is allkeys-lfu") || !strings.Contains(err.Error(), "set maxmemory-policy noeviction") {
		t.Fatalf("Run against allkeys-lfu: %v (ctx %v)", err, ctx.Err())
	}
	if c.Holds() {
		t.Fatal("it took the coordinator lock")
	}
}
