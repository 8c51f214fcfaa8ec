package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// TestAWrongRedisPasswordStopsTheWorker: waiting mends a Redis that is
// down, not a wrong password: Run returns at once with an error naming
// the flag to fix, instead of retrying for ever.
func TestAWrongRedisPasswordStopsTheWorker(t *testing.T) {
	srv := testenv.Redis(t, testenv.WithUser("sluice", "right-password", "~sluice:* &* +@all"))
	cfg := worker.DefaultConfig()
	cfg.Stage, cfg.Partitions, cfg.RedisAddr = "test", 1, srv.Addr()
	cfg.RedisUser, cfg.RedisPassword = "sluice", cli.Secret{Value: "wrong-password"}
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = w.Run(ctx)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "--redis-password") || strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("Run: %v (context: %v)", err, ctx.Err())
	}
}
