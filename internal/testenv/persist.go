package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RefusePersisting makes the server unable to persist, so that it answers
// every write (and PING) with MISCONF, as a Redis whose disk is full does:
// RDB snapshots are turned on with stop-writes-on-bgsave-error, and a
// BGSAVE fails because a directory takes its dump file's name (which
// stops root too; CONFIG SET dir is a protected config). It returns once
// a write is refused. The function it returns lets the server persist
// again (a BGSAVE succeeds, the snapshot settings are put back) and
// returns once a write goes through. Process mode only: the dump file
// must be on this machine.
func (s *RedisServer) RefusePersisting(t testing.TB) (persistAgain func()) {
	t.Helper()
	ctx := context.Background()
	rdb := s.client
	cfg, err := rdb.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatalf("testenv: CONFIG GET: %v", err)
	}
	dump := filepath.Join(cfg["dir"], cfg["dbfilename"])
	if _, err := os.Stat(cfg["dir"]); err != nil {
		t.Skipf("testenv: Redis's dir %s is not on this machine (%s=docker?): %v", cfg["dir"], EnvMode, err)
	}
	if err := os.RemoveAll(dump); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dump, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"save": "3600 1", "stop-writes-on-bgsave-error": "yes"} {
		if err := rdb.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatalf("testenv: CONFIG SET %s: %v", k, err)
		}
	}
	// A test that ends before persistAgain: a Redis with snapshots on
	// would refuse to shut down without its final save.
	t.Cleanup(func() { _ = rdb.ConfigSet(ctx, "save", "").Err() })
	s.bgsave(t, "err")
	WaitFor(t, 5*time.Second, "Redis to refuse writes with MISCONF", func() bool {
		err := rdb.Set(ctx, "testenv:persist-probe", "1", 0).Err()
		return err != nil && strings.HasPrefix(err.Error(), "MISCONF")
	})
	return func() {
		t.Helper()
		if err := os.Remove(dump); err != nil {
			t.Fatal(err)
		}
		s.bgsave(t, "ok")
		for k, v := range map[string]string{"save": cfg["save"], "stop-writes-on-bgsave-error": cfg["stop-writes-on-bgsave-error"]} {
			if err := rdb.ConfigSet(ctx, k, v).Err(); err != nil {
				t.Fatalf("testenv: CONFIG SET %s: %v", k, err)
			}
		}
		if err := rdb.Del(ctx, "testenv:persist-probe").Err(); err != nil {
			t.Fatalf("testenv: Redis still refuses writes after a good BGSAVE: %v", err)
		}
	}
}

// bgsave runs a BGSAVE and waits until it ended with status ("ok" or
// "err"), as INFO persistence's rdb_last_bgsave_status says.
func (s *RedisServer) bgsave(t testing.TB, status string) {
	t.Helper()
	ctx := context.Background()
	WaitFor(t, 10*time.Second, "a BGSAVE to start", func() bool {
		// Refused while another save runs: try again after it.
		return s.client.BgSave(ctx).Err() == nil
	})
	WaitFor(t, 10*time.Second, "the BGSAVE to end with status "+status, func() bool {
		info, err := s.client.Info(ctx, "persistence").Result()
		return err == nil && strings.Contains(info, "rdb_bgsave_in_progress:0") && strings.Contains(info, "rdb_last_bgsave_status:"+status)
	})
}
