package scenario

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The job floor: the least Redis work per job that the design's contract
// asks for (docs/redis-layout.md), with none of the pipeline's own
// bookkeeping. Each job gets a key of its own holding its envelope (the
// relay's dedupe by id), an entry on a ready list, a lease while it runs,
// and a done record with a time to live (its state and result). Batches of
// floorBatch jobs go through three scripts, as the pipeline's do: enqueue,
// claim, ack. What is left out: fairness among groups, attempts, group and
// stage counters, fencing, the wake-up list. So the pipeline cannot go
// faster than this through one Redis, whatever its code.

const floorBatch = 100

// floorEnqueue writes a batch of new jobs.
// KEYS[1] the ready list   KEYS[1+i] job:<id i>, i = 1..n
// ARGV[i] the envelope of job i   ARGV[n+i] its id
// Returns the number of jobs written (a duplicate id is skipped).
var floorEnqueue = redis.NewScript(`
local n, ids = #KEYS - 1, {}
for i = 1, n do
  if redis.call('HSETNX', KEYS[1+i], 'env', ARGV[i]) == 1 then ids[#ids+1] = ARGV[n+i] end
end
if #ids > 0 then redis.call('RPUSH', KEYS[1], unpack(ids)) end
return #ids
`)

// floorClaim leases up to ARGV[1] jobs.
// KEYS[1] the ready list   KEYS[2] the leases, zset by deadline
// ARGV[1] how many   ARGV[2] the lease deadline, Unix ms
// Returns the ids leased.
var floorClaim = redis.NewScript(`
local ids = redis.call('LPOP', KEYS[1], ARGV[1])
if not ids then return {} end
local z = {}
for i, id in ipairs(ids) do z[2*i-1] = ARGV[2]; z[2*i] = id end
redis.call('ZADD', KEYS[2], unpack(z))
return ids
`)

// floorAck records a batch of successes.
// KEYS[1] the leases   KEYS[1+i] job:<id i>
// ARGV[1] now, Unix ms   ARGV[2] seconds to keep a done job   ARGV[2+i] id i
// Returns the number of leases ended.
var floorAck = redis.NewScript(`
local n = #KEYS - 1
local ids = {}
for i = 1, n do ids[i] = ARGV[2+i] end
local removed = redis.call('ZREM', KEYS[1], unpack(ids))
for i = 1, n do
  redis.call('HSET', KEYS[1+i], 'state', 'done', 'done_ms', ARGV[1])
  redis.call('EXPIRE', KEYS[1+i], ARGV[2])
end
return removed
`)

// JobFloor is what the floor measured.
type JobFloor struct {
	JobsPerSecond float64 `json:"jobs_per_second"`
	// RedisMicrosPerJob is Redis's own CPU (user and system) per job: the
	// number that holds on a shared machine. One Redis core does at most
	// 1e6 / it jobs/s this way.
	RedisMicrosPerJob float64 `json:"redis_cpu_us_per_job"`
}

// measureJobFloor runs the floor's scripts for d from conns connections
// against the Redis at addr, under a key prefix of its own, and deletes
// its keys afterwards. The envelope is sized like the scenarios' jobs.
func measureJobFloor(ctx context.Context, addr string, d time.Duration, conns int) (JobFloor, error) {
	return measureFloor(ctx, addr, d, conns, []*redis.Script{floorEnqueue, floorClaim, floorAck}, keyedRound)
}

// floorRound puts one batch of new jobs through a model's scripts and says
// how many it acked; conn and batch make its ids unique.
type floorRound func(ctx context.Context, rdb *redis.Client, env func(seq int) []byte, conn, batch int) (int, error)

const floorPrefix = "sluice:{loadtest-floor}:"

func measureFloor(ctx context.Context, addr string, d time.Duration, conns int, scripts []*redis.Script, round floorRound) (JobFloor, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: conns + 2, MaxRetries: -1})
	defer rdb.Close()
	for _, s := range scripts {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return JobFloor{}, err
		}
	}
	defer cleanFloor(rdb, floorPrefix)
	w := &Workload{Run: "floor", Type: "noop", Payload: PaddedPayload(100), Groups: 1}
	cpu0, err := redisCPU(ctx, rdb)
	if err != nil {
		return JobFloor{}, err
	}
	var done atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for c := 0; c < conns; c++ {
		wg.Go(func() {
			env := func(seq int) []byte { return w.AppendJob(nil, seq) }
			for b := 0; time.Now().Before(deadline) && ctx.Err() == nil; b++ {
				n, err := round(ctx, rdb, env, c, b)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				done.Add(int64(n))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return JobFloor{}, firstErr
	}
	cpu1, err := redisCPU(ctx, rdb)
	if err != nil {
		return JobFloor{}, err
	}
	n := float64(done.Load())
	if n == 0 {
		return JobFloor{}, fmt.Errorf("no job went through in %s", d)
	}
	return JobFloor{
		JobsPerSecond:     round3(n / elapsed.Seconds()),
		RedisMicrosPerJob: round3((cpu1 - cpu0) * 1e6 / n),
	}, nil
}

// keyedRound is the contract's model: floorEnqueue, floorClaim, floorAck.
func keyedRound(ctx context.Context, rdb *redis.Client, env func(int) []byte, conn, batch int) (int, error) {
	ready, leases := floorPrefix+"ready", floorPrefix+"leases"
	keys := make([]string, floorBatch+1)
	args := make([]any, 2*floorBatch+2)
	keys[0] = ready
	for i := range floorBatch {
		id := fmt.Sprintf("c%d-b%d-%d", conn, batch, i)
		keys[1+i] = floorPrefix + "job:" + id
		args[i] = env(batch*floorBatch + i)
		args[floorBatch+i] = id
	}
	if err := floorEnqueue.EvalSha(ctx, rdb, keys, args[:2*floorBatch]...).Err(); err != nil {
		return 0, fmt.Errorf("enqueue: %w", err)
	}
	now := time.Now()
	got, err := floorClaim.EvalSha(ctx, rdb, []string{ready, leases}, floorBatch, now.Add(time.Minute).UnixMilli()).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	// Connections share the ready list, so a claim may take another's jobs:
	// ack what was claimed.
	keys[0] = leases
	args[0], args[1] = now.UnixMilli(), 3600
	for i, id := range got {
		keys[1+i] = floorPrefix + "job:" + id
		args[2+i] = id
	}
	if err := floorAck.EvalSha(ctx, rdb, keys[:1+len(got)], args[:2+len(got)]...).Err(); err != nil {
		return 0, fmt.Errorf("ack: %w", err)
	}
	return len(got), nil
}

// redisCPU is Redis's CPU time so far, user and system, in seconds.
func redisCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, _ := infoField(info, k)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
		}
		total += f
	}
	return total, nil
}

// cleanFloor deletes the floor's keys: its jobs would otherwise stay for
// their time to live in the pipeline's Redis.
func cleanFloor(rdb *redis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	batch := make([]string, 0, 1000)
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == cap(batch) {
			rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Unlink(ctx, batch...)
	}
}
