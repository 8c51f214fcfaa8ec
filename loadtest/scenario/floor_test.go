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
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	for name, measure := range map[string]func(context.Context, string, time.Duration, int) (JobFloor, error){
		"keyed": measureJobFloor, "lists": measureListFloor,
	} {
		f, err := measure(ctx, srv.Addr(), 300*time.Millisecond, 2)
		if err != nil {
			t.Fatal(name, err)
		}
		if f.JobsPerSecond <= 0 || f.RedisMicrosPerJob <= 0 {
			t.Fatalf("%s floor = %+v, want a rate and Redis's CPU per job", name, f)
		}
		if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
			t.Fatalf("keys left after the %s floor: %d (%v), want 0", name, n, err)
		}
	}
}

// BenchmarkJobFloor reports the floor against a Redis like sluice dev's
// (AOF, fsync every second), for the contract's model (a key per job) and
// for envelopes kept on lists with a lease per batch:
//
//	go test ./loadtest/scenario -run '^$' -bench JobFloor -benchtime 1x
func BenchmarkJobFloor(b *testing.B) {
	for _, m := range []struct {
		name    string
		measure func(context.Context, string, time.Duration, int) (JobFloor, error)
	}{{"keyed", measureJobFloor}, {"lists", measureListFloor}} {
		b.Run(m.name, func(b *testing.B) {
			srv := testenv.Redis(b, testenv.WithAOF())
			for range b.N {
				f, err := m.measure(context.Background(), srv.Addr(), 5*time.Second, 4)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(f.JobsPerSecond, "jobs/s")
				b.ReportMetric(f.RedisMicrosPerJob, "redis-µs/job")
			}
		})
	}
}
