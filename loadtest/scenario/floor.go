package scenario

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
)

// The job floors: the least Redis work per job that a storage model asks
// for, with none of the pipeline's own bookkeeping, measured on the
// pipeline's Redis in the same run as a scenario (the yardsticks). Batches
// of floorBatch jobs go through a model's scripts, as the pipeline's do.
// What is left out: fairness among groups, attempts, group and stage
// counters (but one), fencing, the wake-up list. So the pipeline cannot go
// faster than a floor through one Redis, whatever its code.
//
// The list floor is the contract's floor since the batch storage model
// (issue 17, docs/redis-layout.md): envelopes on a ready list, a claimed
// batch leased as one entry, its ack one call; no key per job. The keyed
// floor is the old contract's (a key per job holding its envelope for the
// dedupe by id, an entry on a ready list, a lease per job, a done record
// with a time to live per job), kept beside it for comparison.

const floorBatch = 100

// The keyed floor (the old contract's): floorEnqueue, floorClaim, floorAck.

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

// measureJobFloor runs the keyed floor's scripts (the old contract's) for
// d from conns connections against the Redis at addr, under a key prefix
// of its own, and deletes its keys afterwards. The envelope is sized like
// the scenarios' jobs as the gate stores them.
func measureJobFloor(ctx context.Context, addr string, d time.Duration, conns int) (JobFloor, error) {
	return measureFloor(ctx, addr, d, conns, []*redis.Script{floorEnqueue, floorClaim, floorAck}, keyedRound)
}

// measureListFloor is the same harness for the list floor (listRound):
// the batch storage model's, the contract's floor now.
func measureListFloor(ctx context.Context, addr string, d time.Duration, conns int) (JobFloor, error) {
	return measureFloor(ctx, addr, d, conns, []*redis.Script{listClaim, listAck}, listRound)
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
			env := func(seq int) []byte { return gateEnvelope(c, seq) }
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

// gateEnvelope is job seq's envelope as the gate writes a scenario's plain
// job to Kafka, and the relay into Redis: an id of a ULID's length (the
// gate's), a group of 1,024, the topic, enqueued_at and a 100-byte
// payload. conn keeps the ids of concurrent writers apart.
func gateEnvelope(conn, seq int) []byte {
	id := fmt.Sprintf("01LOADTEST%03d%013d", conn%1000, seq)
	return (&job.Job{ID: id, Type: "noop", Group: "lt-g" + strconv.Itoa(seq%1024), Topic: "jobs", Payload: gatePayload,
		EnqueuedAt: time.Date(2026, 1, 2, 3, 4, 5, 678000000, time.UTC)}).AppendJSON(nil)
}

var gatePayload = PaddedPayload(100)

// keyedRound is the old contract's model: floorEnqueue, floorClaim, floorAck.
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

// The list floor (the contract's): listClaim, listAck. Envelopes are kept
// on the ready list itself and a claim's batch is leased as one entry: no
// key per job, no record of a job once done, as the batch storage model
// has a plain job (its dedupe is by Kafka position, a few fields per
// batch, left out here).

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

// redisCPU is Redis's CPU time so far, user and system, in seconds.
func redisCPU(ctx context.Context, rdb redis.UniversalClient) (float64, error) {
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

// commandStat is one line of INFO commandstats.
type commandStat struct {
	calls int64
	usec  float64
}

// redisCommands reads INFO commandstats: calls and microseconds by command.
func redisCommands(ctx context.Context, rdb redis.UniversalClient) (map[string]commandStat, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return parseCommandStats(info), nil
}

// parseCommandStats reads the lines cmdstat_<name>:calls=N,usec=U,... of
// INFO commandstats.
func parseCommandStats(info string) map[string]commandStat {
	out := map[string]commandStat{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st commandStat
		for field := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[name] = st
	}
	return out
}

// commandUse is each command's calls and time per job between two
// readings, the costliest first; nil when either reading is missing.
func commandUse(a, b map[string]commandStat, jobs int) []RedisCommand {
	if a == nil || b == nil || jobs <= 0 {
		return nil
	}
	var out []RedisCommand
	for name, sb := range b {
		sa := a[name]
		if sb.calls <= sa.calls {
			continue
		}
		out = append(out, RedisCommand{
			Name:         name,
			CallsPerJob:  round3(float64(sb.calls-sa.calls) / float64(jobs)),
			MicrosPerJob: round3((sb.usec - sa.usec) / float64(jobs)),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MicrosPerJob != out[j].MicrosPerJob {
			return out[i].MicrosPerJob > out[j].MicrosPerJob
		}
		return out[i].Name < out[j].Name
	})
	return out
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
