package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ackScript records the success of n claimed jobs in one call: a script
// call costs Redis far more than the commands inside it, so a batch of acks
// shares one, and the group and stats counters move once per batch. A bulk
// group whose last job this is goes on the completed list, once.
//
// KEYS[1] inflight  KEYS[2] attempts  KEYS[3] leases
// KEYS[4] stats: done, and the funnel's completed field of each job's topic
// KEYS[5] completed
// KEYS[5+2i-1]      job:<id of job i>, i = 1..n
// KEYS[5+2i]        group:<group of job i>
// ARGV[1] now, Unix ms   ARGV[2] seconds to keep a job (its result, and the
// relay's dedupe) and an ended group   ARGV[3] n
// ARGV[3+4i-3]      id of job i   ARGV[3+4i-2] its result (may be empty)
// ARGV[3+4i-1]      its group's name   ARGV[3+4i] its topic ("": the
// group's, read here)
// Returns an array of n: 1 where recorded, 0 where the job was no longer
// leased (its lease expired and the reaper took it back), so nothing is
// counted twice.
var ackScript = newScript(luaGroupEnded + luaFunnel + `
local now, keep, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out, ids, idx, perGroup, names, funnel = {}, {}, {}, {}, {}, {}
-- Which are still leased: one ZMSCORE for the batch, then one ZREM. A job
-- given twice counts once.
local all, seen = {}, {}
for i = 1, n do all[i] = ARGV[3+4*i-3] end
local leased = redis.call('ZMSCORE', KEYS[1], unpack(all))
for i = 1, n do
  out[i] = 0
  if leased[i] and not seen[all[i]] then
    seen[all[i]] = true
    out[i] = 1
    ids[#ids+1] = ARGV[3+4*i-3]
    idx[#idx+1] = i
    local g = KEYS[5+2*i]
    if not perGroup[g] then
      perGroup[g], names[g] = 0, ARGV[3+4*i-1]
      -- A group's jobs share its topic: one field per group.
      local topic = ARGV[3+4*i]
      if topic == '' then topic = redis.call('HGET', g, 'topic') or '?' end
      funnel[g] = funnelField(names[g], topic, 'completed')
    end
    perGroup[g] = perGroup[g] + 1
  end
end
if #ids == 0 then return out end
redis.call('ZREM', KEYS[1], unpack(ids))
local attempts = redis.call('HMGET', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[3], unpack(ids))
-- A done job keeps its state, result and attempts, and an empty env: the
-- field still answers the relay's dedupe (HSETNX), and the envelope's bytes,
-- most of a done job's memory, go back to Redis.
for j, i in ipairs(idx) do
  local result = ARGV[3+4*i-2]
  if result ~= '' then
    redis.call('HSET', KEYS[5+2*i-1], 'state', 'done', 'done_ms', now, 'attempts', attempts[j] or '0', 'env', '', 'result', result)
  else
    redis.call('HSET', KEYS[5+2*i-1], 'state', 'done', 'done_ms', now, 'attempts', attempts[j] or '0', 'env', '')
  end
  redis.call('EXPIRE', KEYS[5+2*i-1], keep)
end
-- Per group, one read and one write of its counters.
local stages = {}
for g, count in pairs(perGroup) do
  local f = redis.call('HMGET', g, 'total', 'relayed', 'done', 'dead', 'cancelled', 'running')
  local done = tonumber(f[3] or '0') + count
  redis.call('HSET', g, 'running', tonumber(f[6] or '0') - count, 'done', done)
  groupEndedAfter(g, names[g], KEYS[5], now, keep, tonumber(f[1] or '0'), tonumber(f[2] or '0'),
    done + tonumber(f[4] or '0') + tonumber(f[5] or '0'))
  funnelAdd(stages, funnel[g], count)
end
redis.call('HINCRBY', KEYS[4], 'done', #ids)
funnelFlush(KEYS[4], stages)
return out
`)

// Done is one success for AckMany.
type Done struct {
	Job    Claimed
	Result []byte
	// Topic is the job's, from its envelope: the stage funnel counts the
	// completion there. Empty: the script reads the group's.
	Topic string
}

// Ack records the success of a claimed job and keeps it (with its result)
// for keep. It reports false when the lease had already expired.
func (p *Pool) Ack(ctx context.Context, part int, job Claimed, result []byte, now time.Time, keep time.Duration) (bool, error) {
	ok, err := p.AckMany(ctx, part, []Done{{Job: job, Result: result}}, now, keep)
	if err != nil {
		return false, err
	}
	return ok[0], nil
}

// AckMany records several successes in one script call; ok[i] is false
// where the lease had already expired.
func (p *Pool) AckMany(ctx context.Context, part int, done []Done, now time.Time, keep time.Duration) (ok []bool, err error) {
	if len(done) > MaxBatch {
		first, err := p.AckMany(ctx, part, done[:MaxBatch], now, keep)
		if err != nil {
			return nil, err
		}
		rest, err := p.AckMany(ctx, part, done[MaxBatch:], now, keep)
		return append(first, rest...), err
	}
	k := p.layout.Keys(part)
	keys := make([]string, 0, 5+2*len(done))
	keys = append(keys, k.Inflight(), k.Attempts(), k.Leases(), k.Stats(), k.Completed())
	args := make([]any, 0, 3+4*len(done))
	args = append(args, now.UnixMilli(), max(int64(keep/time.Second), 1), len(done))
	for _, d := range done {
		keys = append(keys, k.Job(d.Job.ID), k.Group(d.Job.Group))
		args = append(args, d.Job.ID, d.Result, d.Job.Group, d.Topic)
	}
	res, err := runScript(ctx, p.byPart[part], ackScript, keys, args...)
	if err != nil {
		return nil, fmt.Errorf("ack on partition %d: %w", part, err)
	}
	flat, _ := res.([]any)
	if len(flat) != len(done) {
		return nil, fmt.Errorf("ack on partition %d: %d answers for %d jobs", part, len(flat), len(done))
	}
	ok = make([]bool, len(done))
	for i, v := range flat {
		ok[i] = v == int64(1)
	}
	return ok, nil
}

// failScript records a failed attempt: the job waits in delayed until its
// next try, or, after its last attempt, goes to the dead set with its last
// error, attempts and times (and a bulk group it ends is completed).
//
// KEYS[1] inflight  KEYS[2] attempts  KEYS[3] leases  KEYS[4] job:<id>
// KEYS[5] group:<group>  KEYS[6] delayed  KEYS[7] dead
// KEYS[8] stats: retried or dead, and the same stage of the funnel of the
// group's topic
// KEYS[9] completed
// ARGV[1] id  ARGV[2] error  ARGV[3] next try, Unix ms (0: dead)
// ARGV[4] now, Unix ms  ARGV[5] most dead jobs kept  ARGV[6] seconds to keep a dead job
// ARGV[7] 1 for a deferral: not a failure, the attempt is taken back
// ARGV[8] the group's name
// Returns 1 retrying, 2 dead, 0 when the job was no longer leased.
var failScript = newScript(luaGroupEnded + luaFunnel + `
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[5], 'running', -1)
if ARGV[7] == '1' then
  redis.call('HINCRBY', KEYS[2], ARGV[1], -1)
  redis.call('ZADD', KEYS[6], ARGV[3], ARGV[1])
  redis.call('HINCRBY', KEYS[5], 'delayed', 1)
  return 1
end
redis.call('HSET', KEYS[4], 'last_error', ARGV[2], 'failed_ms', ARGV[4])
redis.call('HINCRBY', KEYS[5], 'failed', 1)
if tonumber(ARGV[3]) > 0 then
  redis.call('ZADD', KEYS[6], ARGV[3], ARGV[1])
  redis.call('HSET', KEYS[4], 'state', 'delayed')
  redis.call('HINCRBY', KEYS[5], 'delayed', 1)
  redis.call('HINCRBY', KEYS[8], 'retried', 1)
  redis.call('HINCRBY', KEYS[8], funnelField(ARGV[8], redis.call('HGET', KEYS[5], 'topic') or '?', 'retried'), 1)
  return 1
end
local attempts = redis.call('HGET', KEYS[2], ARGV[1]) or '0'
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[4], 'state', 'dead', 'dead_ms', ARGV[4], 'attempts', attempts)
redis.call('EXPIRE', KEYS[4], ARGV[6])
redis.call('ZADD', KEYS[7], ARGV[4], ARGV[1])
-- Capped: the oldest dead ids go first (their hashes expire by themselves).
local over = redis.call('ZCARD', KEYS[7]) - tonumber(ARGV[5])
if over > 0 then redis.call('ZPOPMIN', KEYS[7], over) end
redis.call('HINCRBY', KEYS[5], 'dead', 1)
redis.call('HINCRBY', KEYS[8], 'dead', 1)
redis.call('HINCRBY', KEYS[8], funnelField(ARGV[8], redis.call('HGET', KEYS[5], 'topic') or '?', 'dead'), 1)
groupEnded(KEYS[5], ARGV[8], KEYS[9], ARGV[4], ARGV[6])
return 2
`)

// Outcome of Fail.
const (
	FailLost     = 0 // the lease had expired; nothing recorded
	FailRetrying = 1
	FailDead     = 2
)

// DeadLimits bound the dead set: at most Max ids, each kept for Keep.
type DeadLimits struct {
	Max  int
	Keep time.Duration
}

// Fail records a failed attempt of a claimed job: retried at nextTry, or
// dead when nextTry is zero.
func (p *Pool) Fail(ctx context.Context, part int, job Claimed, cause string, nextTry, now time.Time, dead DeadLimits) (int, error) {
	next := int64(0)
	if !nextTry.IsZero() {
		next = nextTry.UnixMilli()
	}
	return p.fail(ctx, part, job, cause, next, now, dead, false)
}

// Defer puts a claimed job in delayed until at without counting the attempt:
// it could not run yet (another job holds its idempotency key), which is
// not a failure. It reports false when the lease was already lost.
func (p *Pool) Defer(ctx context.Context, part int, job Claimed, at time.Time) (bool, error) {
	res, err := p.fail(ctx, part, job, "", at.UnixMilli(), at, DeadLimits{}, true)
	return res == FailRetrying, err
}

func (p *Pool) fail(ctx context.Context, part int, job Claimed, cause string, next int64, now time.Time, dead DeadLimits, deferral bool) (int, error) {
	k := p.layout.Keys(part)
	flag := 0
	if deferral {
		flag = 1
	}
	res, err := runScript(ctx, p.byPart[part], failScript,
		[]string{k.Inflight(), k.Attempts(), k.Leases(), k.Job(job.ID), k.Group(job.Group), k.Delayed(), k.Dead(), k.Stats(), k.Completed()},
		job.ID, cause, next, now.UnixMilli(), dead.Max, max(int64(dead.Keep/time.Second), 1), flag, job.Group)
	if err != nil {
		return FailLost, fmt.Errorf("fail %s: %w", job.ID, err)
	}
	n, _ := res.(int64)
	return int(n), nil
}

// returnScript puts jobs back into their groups' ready lists, at the front
// (they were first in line already): expired leases (the reaper), due
// delayed jobs (the promoter) and leases a stopping worker hands back.
// Candidates come from a read of the source set; each is checked again here.
// A job of a cancelled group is not put back: it is counted cancelled and
// kept for keep seconds, and its group may complete.
//
// KEYS[1] source    zset: inflight (reaper, release) or delayed (promoter)
// KEYS[2] groups    KEYS[3] vt   KEYS[4] leases   KEYS[5] attempts   KEYS[6] wake
// KEYS[7] completed   KEYS[8] stats: its ready field goes up by the jobs put
// back, the funnel's cancelled fields by the jobs of cancelled groups
// KEYS[8+3i-2]      ready:<group of candidate i>, i = 1..n
// KEYS[8+3i-1]      group:<group of candidate i>
// KEYS[8+3i]        job:<candidate i>
// ARGV[1] now, Unix ms: only members scored at or before it move
// ARGV[2] n   ARGV[3] group counter to decrement: running or delayed
// ARGV[4] 1 to take back the attempt (a release: the job did not fail), else 0
// ARGV[5] seconds to keep a cancelled job
// ARGV[5+2i-1]      id of candidate i   ARGV[5+2i] its group
// Returns how many went back.
var returnScript = newScript(luaGroupEnded + luaFunnel + `
local now, n, counter, uncount, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4] == '1', ARGV[5]
local moved, vt, funnel = 0, nil, {}
-- Cancelled groups whose jobs were dropped here: each may have ended,
-- checked once after the loop.
local ended = {}
-- A group's state, read once per call for all its candidates: 'cancelled',
-- or 'active' once it is known to be in the fair order.
local state = {}
-- Last candidate first: pushing each to the front keeps their order.
for i = n, 1, -1 do
  local id, group = ARGV[5+2*i-1], ARGV[5+2*i]
  local rk, gk, jk = KEYS[8+3*i-2], KEYS[8+3*i-1], KEYS[8+3*i]
  local due = redis.call('ZSCORE', KEYS[1], id)
  if due and tonumber(due) <= now then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HINCRBY', gk, counter, -1)
    if state[group] == nil and redis.call('HEXISTS', gk, 'cancelled_ms') == 1 then
      state[group] = 'cancelled'
    end
    if state[group] == 'cancelled' then
      redis.call('HDEL', KEYS[5], id)
      redis.call('HSET', jk, 'state', 'cancelled')
      redis.call('EXPIRE', jk, keep)
      redis.call('HINCRBY', gk, 'cancelled', 1)
      if not ended[group] then
        ended[group] = {gk = gk, topic = redis.call('HGET', gk, 'topic') or '?'}
      end
      funnelAdd(funnel, funnelField(group, ended[group].topic, 'cancelled'), 1)
    else
      if uncount then redis.call('HINCRBY', KEYS[5], id, -1) end
      redis.call('LPUSH', rk, id)
      if state[group] == nil then
        if not redis.call('ZSCORE', KEYS[2], group) then
          if not vt then vt = tonumber(redis.call('GET', KEYS[3]) or '0') end
          local vfinish = tonumber(redis.call('HGET', gk, 'vfinish') or '0')
          redis.call('ZADD', KEYS[2], math.max(vt, vfinish), group)
        end
        state[group] = 'active'
      end
      moved = moved + 1
    end
  end
end
for group, g in pairs(ended) do groupEnded(g.gk, group, KEYS[7], ARGV[1], keep) end
funnelFlush(KEYS[8], funnel)
if moved > 0 then
  redis.call('HINCRBY', KEYS[8], 'ready', moved)
  redis.call('RPUSH', KEYS[6], 1)
  redis.call('LTRIM', KEYS[6], -1, -1)
end
return moved
`)

// Reap returns expired leases of partition part to their ready lists, up to
// max at a time. Their attempts stay counted. It returns how many.
func (p *Pool) Reap(ctx context.Context, part, max int, now time.Time) (int, error) {
	k := p.layout.Keys(part)
	c := p.byPart[part]
	ids, err := c.ZRangeArgs(ctx, dueBy(k.Inflight(), now, max)).Result()
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	groups, err := c.HMGet(ctx, k.Leases(), ids...).Result()
	if err != nil {
		return 0, err
	}
	return p.returnJobs(ctx, part, k.Inflight(), "running", false, ids, func(i int) string { s, _ := groups[i].(string); return s }, now)
}

// Release hands leased jobs back to the front of their ready lists without
// counting the attempt: a stopping worker did not run them to the end.
func (p *Pool) Release(ctx context.Context, part int, jobs []Claimed) (int, error) {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	// Every lease is due for a release, whatever its deadline.
	forever := time.UnixMilli(1 << 52)
	return p.returnJobs(ctx, part, p.layout.Keys(part).Inflight(), "running", true, ids, func(i int) string { return jobs[i].Group }, forever)
}

// Promote moves delayed jobs of partition part that are due into their
// ready lists, up to max at a time; groupOf reads a job's group (from its
// envelope). It returns how many.
func (p *Pool) Promote(ctx context.Context, part, max int, now time.Time, groupOf func(id string) (string, error)) (int, error) {
	k := p.layout.Keys(part)
	ids, err := p.byPart[part].ZRangeArgs(ctx, dueBy(k.Delayed(), now, max)).Result()
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	groups := make([]string, len(ids))
	for i, id := range ids {
		if groups[i], err = groupOf(id); err != nil {
			return 0, err
		}
	}
	return p.returnJobs(ctx, part, k.Delayed(), "delayed", false, ids, func(i int) string { return groups[i] }, now)
}

// dueBy selects up to max members of key scored at or before now.
func dueBy(key string, now time.Time, max int) redis.ZRangeArgs {
	return redis.ZRangeArgs{Key: key, ByScore: true, Start: "-inf", Stop: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(max)}
}

func (p *Pool) returnJobs(ctx context.Context, part int, source, counter string, uncount bool, ids []string, groupAt func(int) string, now time.Time) (int, error) {
	k := p.layout.Keys(part)
	ks := []string{source, k.Groups(), k.VirtualTime(), k.Leases(), k.Attempts(), k.Wake(), k.Completed(), k.Stats()}
	flag := 0
	if uncount {
		flag = 1
	}
	args := []any{now.UnixMilli(), 0, counter, flag, int64(cancelledKeep / time.Second)}
	n := 0
	for i, id := range ids {
		g := groupAt(i)
		if g == "" {
			continue // settled meanwhile: its lease entry is gone
		}
		ks = append(ks, k.Ready(g), k.Group(g), k.Job(id))
		args = append(args, id, g)
		n++
	}
	args[1] = n
	if n == 0 {
		return 0, nil
	}
	res, err := runScript(ctx, p.byPart[part], returnScript, ks, args...)
	if err != nil {
		return 0, fmt.Errorf("returning jobs to ready on partition %d: %w", part, err)
	}
	moved, _ := res.(int64)
	return int(moved), nil
}
