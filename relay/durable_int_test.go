package relay_test

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

// TestAHostCrashLosingRedisLastWritesLosesNoJob plays the loss AOF with
// appendfsync everysec allows: the host fails, and Redis comes back without
// its last, unsynced writes. The relay had not committed their offsets yet
// (--durable-after), sees the new run_id and relays them again; every job is
// in Redis exactly once. With --durable-after 0 this test fails: the offsets
// were committed and the jobs are gone.
func TestAHostCrashLosingRedisLastWritesLosesNoJob(t *testing.T) {
	b := newBed(t, testenv.WithAOF())
	const durable = 5 * time.Second
	r := b.start(t, "r1", func(c *relay.Config) { c.DurableAfter = durable; c.BatchSize = 32 })
	group := "sluice-relay." + topic
	b.produce(t, 0, 200)
	b.waitRelayed(t, 200, 30*time.Second)
	testenv.WaitFor(t, 30*time.Second, "the first 200 offsets committed", func() bool { return b.committed(t, group) == 200 })

	// What the disk holds now: a crash from here on keeps this much.
	aof := newestIncrementalAOF(t, b.redis.Dir())
	st, err := os.Stat(aof)
	if err != nil {
		t.Fatal(err)
	}
	kept := st.Size()

	b.produce(t, 200, 300)
	b.waitRelayed(t, 500, 30*time.Second)
	if c := b.committed(t, group); c != 200 {
		t.Fatalf("committed %d offsets while the last writes were younger than %s, want 200", c, durable)
	}
	// The host fails: Redis dies, and its AOF loses what was not synced.
	b.redis.Kill()
	if err := os.Truncate(aof, kept); err != nil {
		t.Fatal(err)
	}
	b.redis.Restart()
	b.waitRelayed(t, 500, 60*time.Second)
	if n := metricLabeled(t, r.relay, "sluice_relay_rewinds_total", "topic", topic); n < 1 {
		t.Fatalf("sluice_relay_rewinds_total = %v, want the restart counted", n)
	}
	testenv.WaitFor(t, 30*time.Second, "every offset committed after the rewind", func() bool { return b.committed(t, group) == 500 })
}

// newestIncrementalAOF is the AOF file Redis 7 appends to now.
func newestIncrementalAOF(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "appendonlydir", "*.incr.aof"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no incremental AOF file in %s/appendonlydir (%v): is Redis 7 running with appendonly yes?", dir, err)
	}
	sort.Strings(files)
	return files[len(files)-1]
}
