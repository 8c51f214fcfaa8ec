package scenario

import (
	"context"
	"fmt"
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

// measureListFloor is the same harness for a model without a key per job
// (listRound): what a batch storage model would let one Redis core do.
func measureListFloor(ctx context.Context, addr string, d time.Duration, conns int) (JobFloor, error) {
	return measureFloor(ctx, addr, d, conns, []*redis.Script{listClaim, listAck}, listRound)
}

// The list model keeps envelopes on the ready list itself and leases a
// claim's batch as one entry: no key per job, so no dedupe by id and no
// record of a job once done (the design's contract asks for both).

// listClaim leases up to ARGV[1] envelopes as one batch.
// KEYS[1] the ready list   KEYS[2] leases, hash: batch -> its envelopes
// KEYS[3] inflight, zset: batch by deadline
// ARGV[1] how many   ARGV[2] the lease deadline, Unix ms   ARGV[3] the batch's name
// Returns the envelopes leased.
var listClaim = redis.NewScript(`
local envs = redis.call('LPOP', KEYS[1], ARGV[1])
if not envs then return {} end
redis.call('HSET', KEYS[2], ARGV[3], table.concat(envs, '\n'))
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[3])
return envs
`)

// listAck ends a batch's lease and counts its jobs done.
// KEYS[1] leases   KEYS[2] inflight   KEYS[3] stats
// ARGV[1] the batch's name   ARGV[2] its job count
// Returns 1 if the lease was still held.
var listAck = redis.NewScript(`
local held = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[3], 'done', ARGV[2])
return held
`)

func listRound(ctx context.Context, rdb *redis.Client, env func(int) []byte, conn, batch int) (int, error) {
	ready, leases, inflight, stats := floorPrefix+"ready", floorPrefix+"leases", floorPrefix+"inflight", floorPrefix+"stats"
	envs := make([]any, floorBatch)
	for i := range envs {
		envs[i] = env(batch*floorBatch + i)
	}
	if err := rdb.RPush(ctx, ready, envs...).Err(); err != nil {
		return 0, fmt.Errorf("enqueue: %w", err)
	}
	name := fmt.Sprintf("c%d-b%d", conn, batch)
	got, err := listClaim.EvalSha(ctx, rdb, []string{ready, leases, inflight}, floorBatch, time.Now().Add(time.Minute).UnixMilli(), name).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	if err := listAck.EvalSha(ctx, rdb, []string{leases, inflight, stats}, name, len(got)).Err(); err != nil {
		return 0, fmt.Errorf("ack: %w", err)
	}
	return len(got), nil
}
