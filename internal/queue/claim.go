package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claimed is a job a worker holds a lease on.
type Claimed struct {
	ID      string
	Group   string
	Attempt int // 1 for the first execution
}

// claimScript leases up to K jobs of one partition in weighted fair order
// among candidate groups the caller read from the groups zset (the two-phase
// pattern of docs/redis-layout.md: every key is named in KEYS, and the
// script re-checks each candidate).
//
// KEYS[1] groups    zset: active groups by virtual time
// KEYS[2] vt        string: the partition's virtual clock
// KEYS[3] inflight  zset: leased ids by lease deadline
// KEYS[4] attempts  hash: id -> attempts so far
// KEYS[5] leases    hash: id -> group
// KEYS[6] stats     hash: its ready field goes down by the jobs claimed, the
// funnel's dequeued fields up
// KEYS[6+2g-1]      ready:<candidate g>, g = 1..m
// KEYS[6+2g]        group:<candidate g>
// ARGV[1] K, most jobs to claim   ARGV[2] lease deadline, Unix ms   ARGV[3] m
// ARGV[3+g]         name of candidate g
// ARGV[4+m]         the quantum: the most jobs one group gives a claim while
// other candidates could give theirs
// Returns a flat array: id, group, attempt for each claimed job, in the
// order served. Candidates no longer active are skipped; a candidate whose
// list ran dry leaves the fair order with its virtual finish recorded.
//
// The candidates come in fair order (lowest virtual time first), and the
// script reads only as many as it needs: the first ones that fill K jobs
// with at most the quantum from each. Per-group work is most of a claim's
// cost, so a partition of bulk groups pays it once per quantum of jobs
// instead of once per job. The fair order holds between claims (a group's
// virtual time moves by the jobs it gave, so it waits its turn after a
// quantum) and within one claim among the groups read: fairness at the
// grain of the quantum. One-job groups (the gate's default) still cost a
// group each.
//
// The script decides the order on list lengths first, then pops each
// group's share with one LPOP and writes the leases with one ZADD and one
// HSET: per job, Redis runs one command (the attempt count) instead of five.
// Per group served it runs four: HMGET, LLEN, LPOP, and one HSET of its
// running count (and virtual finish); the active check is one ZMSCORE per
// 16 candidates, and the fair order moves with one ZREM and one ZADD.
// The stage funnel's dequeued field of each group's topic counts the claims.
var claimScript = newScript(luaFunnel + `
local K, deadline, m, quantum = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4+tonumber(ARGV[3])])
local cand, supply, scores = {}, 0, {}
for g = 1, m do
  -- Enough candidates once they fill the claim without any giving more
  -- than the quantum; the rest are not read at all.
  if supply >= K then break end
  -- Which candidates are still active: one ZMSCORE per 16 of them, read
  -- as they are needed.
  if (g - 1) % 16 == 0 then
    local names = {}
    for h = g, math.min(g + 15, m) do names[#names+1] = ARGV[3+h] end
    local got = redis.call('ZMSCORE', KEYS[1], unpack(names))
    for h = 1, #names do scores[g+h-1] = got[h] end
  end
  local name, score = ARGV[3+g], scores[g]
  if score then
    local f = redis.call('HMGET', KEYS[6+2*g], 'weight', 'total', 'relayed', 'done', 'dead', 'cancelled', 'topic', 'running')
    local w = math.max(tonumber(f[1] or '1'), 1)
    -- Shortest job first, by what is left: a group's weight is its
    -- priority's, times 4 with at most 100 jobs left, times 2 with at most
    -- 10,000. A small group and a big one's last stretch go fast; the
    -- virtual clock still moves every active group, so none starves.
    local size = tonumber(f[2] or '0')
    if size <= 0 then size = tonumber(f[3] or '0') end
    local remaining = size - tonumber(f[4] or '0') - tonumber(f[5] or '0') - tonumber(f[6] or '0')
    if remaining <= 100 then w = w * 4 elseif remaining <= 10000 then w = w * 2 end
    local left = redis.call('LLEN', KEYS[6+2*g-1])
    cand[#cand+1] = {g = g, name = name, score = tonumber(score), w = w, left = left, take = 0, topic = f[7] or '?', running = tonumber(f[8] or '0')}
    supply = supply + math.min(left, quantum)
  end
end
-- Weighted fair queueing on the counts: the candidate with the lowest
-- virtual time goes next (the first read on a tie), each job advancing its
-- group by 1/weight. The candidates wait in a binary heap: a claim of K
-- jobs among m groups costs K log m steps, not K times m.
local heap = {}
local function before(a, b) return a.score < b.score or (a.score == b.score and a.i < b.i) end
local function push(c)
  local j = #heap + 1
  heap[j] = c
  while j > 1 do
    local up = math.floor(j / 2)
    if not before(heap[j], heap[up]) then break end
    heap[j], heap[up] = heap[up], heap[j]
    j = up
  end
end
local function pop()
  local top, n = heap[1], #heap
  heap[1] = heap[n]
  heap[n] = nil
  n = n - 1
  local j = 1
  while true do
    local l, r, s = 2 * j, 2 * j + 1, j
    if l <= n and before(heap[l], heap[s]) then s = l end
    if r <= n and before(heap[r], heap[s]) then s = r end
    if s == j then break end
    heap[j], heap[s] = heap[s], heap[j]
    j = s
  end
  return top
end
local vt = tonumber(redis.call('GET', KEYS[2]) or '0')
local order = {}
-- A group gives at most the quantum; past it only when every candidate
-- read is at its quantum or dry and the claim is still not full (there
-- were no more candidates).
local cap = quantum
for i, c in ipairs(cand) do
  c.i = i
  if c.take < c.left then push(c) end
end
while #order < K do
  if #heap == 0 then
    if cap >= K then break end
    cap = K
    for _, c in ipairs(cand) do
      if c.take < c.left then push(c) end
    end
    if #heap == 0 then break end
  end
  local best = pop()
  if best.score > vt then vt = best.score end
  best.score = best.score + 1 / best.w
  best.take = best.take + 1
  order[#order+1] = best
  if best.take < best.left and best.take < cap then push(best) end
end
local funnel = {}
for _, c in ipairs(cand) do
  if c.take > 0 then
    c.ids, c.next = redis.call('LPOP', KEYS[6+2*c.g-1], c.take), 1
    funnelAdd(funnel, funnelField(c.name, c.topic, 'dequeued'), c.take)
  end
end
local out, inflight, leases, ids = {}, {}, {}, {}
for i, c in ipairs(order) do
  ids[i] = c.ids[c.next]
  c.next = c.next + 1
end
-- Attempts: one read and one write for the batch, not a command per job.
local prev, counts = {}, {}
if #ids > 0 then prev = redis.call('HMGET', KEYS[4], unpack(ids)) end
for i, c in ipairs(order) do
  local id, attempt = ids[i], tonumber(prev[i] or '0') + 1
  counts[#counts+1] = id
  counts[#counts+1] = attempt
  inflight[#inflight+1] = deadline
  inflight[#inflight+1] = id
  leases[#leases+1] = id
  leases[#leases+1] = c.name
  out[#out+1] = id
  out[#out+1] = c.name
  out[#out+1] = attempt
end
if #counts > 0 then redis.call('HSET', KEYS[4], unpack(counts)) end
-- Each group served gets one write of its counters. Groups that ran dry
-- leave the fair order in one ZREM (one job per group is the common case:
-- the gate's default group is the job's id); the others move in one ZADD.
local dry, moved = {}, {}
for _, c in ipairs(cand) do
  if c.take == c.left then
    dry[#dry+1] = c.name
    if c.take > 0 then
      redis.call('HSET', KEYS[6+2*c.g], 'running', c.running + c.take, 'vfinish', c.score)
    else
      redis.call('HSET', KEYS[6+2*c.g], 'vfinish', c.score)
    end
  elseif c.take > 0 then
    redis.call('HSET', KEYS[6+2*c.g], 'running', c.running + c.take)
    moved[#moved+1] = c.score
    moved[#moved+1] = c.name
  end
end
if #dry > 0 then redis.call('ZREM', KEYS[1], unpack(dry)) end
if #moved > 0 then redis.call('ZADD', KEYS[1], 'XX', unpack(moved)) end
if #order > 0 then
  redis.call('ZADD', KEYS[3], unpack(inflight))
  redis.call('HSET', KEYS[5], unpack(leases))
  redis.call('SET', KEYS[2], vt)
  redis.call('HINCRBY', KEYS[6], 'ready', -#order)
  funnelFlush(KEYS[6], funnel)
end
return out
`)

// Claim leases up to max jobs of partition part in weighted fair order,
// until leaseUntil. It reads the first candidates of the fair order, then
// claims among them in one script: fair across those candidates, which are
// the groups with the lowest virtual times.
func (p *Pool) Claim(ctx context.Context, part, max int, leaseUntil time.Time) ([]Claimed, error) {
	max = min(max, MaxBatch)
	keys := p.layout.Keys(part)
	c := p.byPart[part]
	// As many candidates as jobs asked for: a job each at the least. More
	// would cost reads without changing who is served this round.
	names, err := c.ZRange(ctx, keys.Groups(), 0, int64(max-1)).Result()
	if err != nil || len(names) == 0 {
		return nil, err
	}
	ks := []string{keys.Groups(), keys.VirtualTime(), keys.Inflight(), keys.Attempts(), keys.Leases(), keys.Stats()}
	args := make([]any, 0, 4+len(names))
	args = append(args, max, leaseUntil.UnixMilli(), len(names))
	for _, g := range names {
		ks = append(ks, keys.Ready(g), keys.Group(g))
		args = append(args, g)
	}
	args = append(args, ClaimQuantum)
	res, err := runScript(ctx, c, claimScript, ks, args...)
	if err != nil {
		return nil, fmt.Errorf("claim on partition %d: %w", part, err)
	}
	flat, _ := res.([]any)
	out := make([]Claimed, 0, len(flat)/3)
	for i := 0; i+2 < len(flat); i += 3 {
		id, _ := flat[i].(string)
		group, _ := flat[i+1].(string)
		n, _ := flat[i+2].(int64)
		out = append(out, Claimed{ID: id, Group: group, Attempt: int(n)})
	}
	return out, nil
}

// ClaimQuantum is the most jobs a group gives one claim while other groups
// could give theirs: fairness at the grain of a few jobs, which the
// workers start at nearly the same moment anyway, for a claim that reads
// K/ClaimQuantum groups instead of K.
const ClaimQuantum = 8

// MaxBatch bounds the jobs one script call claims or acks: the scripts
// pass a batch to a single command with unpack, which Lua's stack limits
// (to about 8,000 values).
const MaxBatch = 1000

// runScript runs a script with EVALSHA, loading it first if Redis lost it.
func runScript(ctx context.Context, c *redis.Client, s *redis.Script, keys []string, args ...any) (any, error) {
	res, err := s.EvalSha(ctx, c, keys, args...).Result()
	if isNoScript(err) {
		res, err = s.Eval(ctx, c, keys, args...).Result()
	}
	if err == redis.Nil {
		return nil, nil
	}
	return res, err
}

// Envelopes reads the envelopes of claimed jobs in one round trip; a job
// without one (its hash expired or was removed) gets nil.
func (p *Pool) Envelopes(ctx context.Context, part int, jobs []Claimed) ([][]byte, error) {
	k := p.layout.Keys(part)
	pipe := p.byPart[part].Pipeline()
	cmds := make([]*redis.StringCmd, len(jobs))
	for i, j := range jobs {
		cmds[i] = pipe.HGet(ctx, k.Job(j.ID), "env")
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	out := make([][]byte, len(jobs))
	for i, c := range cmds {
		out[i], _ = c.Bytes()
	}
	return out, nil
}

// Envelope reads a job's envelope.
func (p *Pool) Envelope(ctx context.Context, part int, id string) ([]byte, error) {
	b, err := p.byPart[part].HGet(ctx, p.layout.Keys(part).Job(id), "env").Bytes()
	if err == redis.Nil {
		return nil, fmt.Errorf("job %s: no envelope in partition %d", id, part)
	}
	return b, err
}

// extendScript moves the leases of jobs still in flight to a new deadline
// and reports which were lost.
//
// KEYS[1] inflight
// ARGV[1] new deadline, Unix ms   ARGV[2..] ids
// Returns an array with one entry per id: 1 extended, 0 no longer leased
// (settled, or taken back by the reaper).
var extendScript = newScript(`
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ARGV, 2))
local out, members = {}, {}
for i = 1, #ARGV - 1 do
  if scores[i] then
    out[i] = 1
    members[#members+1] = ARGV[1]
    members[#members+1] = ARGV[i+1]
  else
    out[i] = 0
  end
end
if #members > 0 then redis.call('ZADD', KEYS[1], 'XX', unpack(members)) end
return out
`)

// Extend moves the leases of claimed jobs to until, in one call per
// MaxBatch jobs. kept[i] is false where job i is no longer leased (the
// reaper took it back, or it was settled): its holder must stop, its result
// would not count.
func (p *Pool) Extend(ctx context.Context, part int, ids []string, until time.Time) (kept []bool, err error) {
	kept = make([]bool, 0, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), MaxBatch)]
		ids = ids[len(chunk):]
		args := make([]any, 0, 1+len(chunk))
		args = append(args, until.UnixMilli())
		for _, id := range chunk {
			args = append(args, id)
		}
		res, err := runScript(ctx, p.byPart[part], extendScript, []string{p.layout.Keys(part).Inflight()}, args...)
		if err != nil {
			return nil, fmt.Errorf("extending leases on partition %d: %w", part, err)
		}
		flat, _ := res.([]any)
		if len(flat) != len(chunk) {
			return nil, fmt.Errorf("extending leases on partition %d: %d answers for %d jobs", part, len(flat), len(chunk))
		}
		for _, v := range flat {
			kept = append(kept, v == int64(1))
		}
	}
	return kept, nil
}
