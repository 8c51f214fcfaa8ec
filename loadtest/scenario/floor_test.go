package scenario

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The floor's scripts do what they stand for: every job enqueued is
// claimed and acked, and nothing is left behind in the pipeline's Redis.
func TestJobFloorRunsJobsAndCleansUp(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := context.Background()
	f, err := measureJobFloor(ctx, srv.Addr(), 300*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	if f.JobsPerSecond <= 0 || f.RedisMicrosPerJob <= 0 {
		t.Fatalf("floor = %+v, want a rate and Redis's CPU per job", f)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("keys left after the floor: %d (%v), want 0", n, err)
	}
}

// BenchmarkJobFloor reports the floor against a Redis like sluice dev's
// (AOF, fsync every second):
//
//	go test ./loadtest/scenario -run '^$' -bench JobFloor -benchtime 1x
func BenchmarkJobFloor(b *testing.B) {
	srv := testenv.Redis(b, testenv.WithAOF())
	for range b.N {
		f, err := measureJobFloor(context.Background(), srv.Addr(), 5*time.Second, 4)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(f.JobsPerSecond, "jobs/s")
		b.ReportMetric(f.RedisMicrosPerJob, "redis-µs/job")
	}
}
