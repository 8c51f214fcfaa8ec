package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Claimed is a job a worker holds in a claimed batch.
type Claimed struct {
	ID string
	// Group is the job's group, "" for a job on a shared lane.
	Group string
	Lane  string
	// Batch is the claimed batch (the lease) the job is in, and Index its
	// place in the batch, which names it to the scripts that settle it.
	Batch   string
	Index   int
	Attempt int // 1 for the first execution
	// Envelope is the job's envelope, byte for byte as read from Kafka.
	Envelope []byte
}

// claimArgs are one call of the claim script, laid out as:
//
//	KEYS[1]        lanes          zset: active lanes by virtual time
//	KEYS[2]        vt             string: the partition's virtual clock
//	KEYS[3]        leases         zset: claimed batches by lease deadline
//	KEYS[4]        lease:<batch>  list: the new batch's entries in the order served
//	KEYS[5]        stats          hash: ready goes down and inflight up by the
//	                              jobs claimed, the funnel's dequeued fields up
//	KEYS[6]        shared         hash: shared lanes' virtual finish times
//	KEYS[7..6+3m]  per candidate lane (m of them), 3 keys: list, meta, results
//	               (appendLaneKeys)
//	ARGV[1]        max            K, the most jobs to claim
//	ARGV[2]        lease_ms       the lease: the batch's deadline is Redis's
//	                              clock (TIME) plus this, never a worker's clock
//	ARGV[3]        m              candidate lanes
//	ARGV[4]        quantum        the most jobs one lane gives a claim while
//	                              other candidates could give theirs
//	ARGV[5]        batch          the batch's name
//	ARGV[6]        topic          the queue's topic (the funnel's)
//	ARGV[7..6+3m]  per candidate lane, 3 fields: name, group, weight
//	               (appendLaneArgs)
//	ARGV[7+3m..]   foreign        names in the fair order that are no lane's
//	                              (the caller cannot read them): passed over
//
// The script unpacks them into named locals at its top.
type claimArgs struct {
	k       Keys
	batch   string
	max     int
	lease   time.Duration
	topic   string
	lanes   []LaneInfo
	foreign []string
}

func (a *claimArgs) keys() []string {
	ks := make([]string, 0, 6+3*len(a.lanes))
	ks = append(ks, a.k.Lanes(), a.k.VirtualTime(), a.k.Leases(), a.k.Lease(a.batch), a.k.Stats(), a.k.Shared())
	return a.k.appendLaneKeys(ks, a.lanes...)
}

func (a *claimArgs) argv() []any {
	args := make([]any, 0, 6+3*len(a.lanes)+len(a.foreign))
	args = append(args, a.max, a.lease.Milliseconds(), len(a.lanes), ClaimQuantum, a.batch, a.topic)
	args = appendLaneArgs(args, a.lanes...)
	for _, name := range a.foreign {
		args = append(args, name)
	}
	return args
}

// claimScript leases up to K jobs of one partition in weighted fair order
// among candidate lanes the caller read from the lanes zset (the two-phase
// pattern of docs/redis-layout.md: every key is named in KEYS, and the
// script re-checks each candidate), as one batch under one lease.
//
// KEYS and ARGV: claimArgs.
// Returns {1, claimed, next}: claimed is a flat array, candidate index and
// entry for each claimed job in the order served (its place in the
// lease); next is the fair order's first K lanes after the claim (and one
// more for each lane passed over), the caller's candidates for its next
// claim. Or {0, lanes}: a lane the claim would read is not among the
// candidates (it became active since they were read); lanes is the fair
// order's first K, to call again with. A lane whose list ran dry leaves
// the fair order with its virtual finish recorded.
//
// The script reads the fair order itself (lowest virtual time first) and
// only as many lanes as it needs: the first ones that fill K jobs with at
// most the quantum from each. So a claim is one round trip while the fair
// order's head stays among the candidates the last claim returned, and two
// when a lane became active in between. Per-lane work is most of a claim's
// cost beside the entries, so a partition pays it once per quantum of jobs.
// The fair order holds between claims (a lane's virtual time moves by the
// jobs it gave, so it waits its turn after a quantum) and within one claim
// among the lanes read: fairness at the grain of the quantum.
//
// Per job Redis copies the entry twice (LPOP, then one RPUSH of the whole
// batch): no command of its own, and Lua does not read it. Per
// lane served it runs LLEN, LPOP and, for a group lane, one HMGET and one
// HSET of its counters.
var claimScript = newScript("claim", claimSource(roundsOn)...)

// claimRounds is how the claim script serves lanes of one weight whose
// virtual times lie within one job's step: in whole rounds (rounds in
// claimLua), or job by job through the heap. Tests compare the two.
type claimRounds string

const (
	roundsOn    claimRounds = "on"    // whole rounds where they give the heap's order
	roundsOff   claimRounds = "off"   // the per-job heap alone
	roundsProbe claimRounds = "probe" // as on, and an error when a round is taken
)

// claimSource is the claim script's fragments with rounds set as given.
func claimSource(rounds claimRounds) []string {
	return []string{luaNow, luaFunnel, luaLanes, "local rounds_mode = '" + string(rounds) + "'", claimLua}
}

// claimLua is claimScript's own part.
const claimLua = `
-- KEYS and ARGV, as claimArgs lays them out.
local lanes_key, vt_key, leases_key, lease_key, stats_key, shared_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K = tonumber(ARGV[1])
local lease_ms = tonumber(ARGV[2])
local m = tonumber(ARGV[3])
local quantum = tonumber(ARGV[4])
local batch = ARGV[5]
local topic = ARGV[6]
local _, byName = readLanes(m, 6, 6, topic)
-- Lanes the caller cannot serve (names it does not know how to read) are
-- passed over, not asked for again.
local foreign, nforeign = {}, 0
for i = 7 + 3*m, #ARGV do foreign[ARGV[i]] = true; nforeign = nforeign + 1 end

-- The fair order's first K lanes, read here. The caller's candidates (the
-- answer of its last claim, or a read of its own) must name every lane
-- this claim reads; if one is missing, the caller gets the order back and
-- calls again with their keys.
local top = redis.call('ZRANGE', lanes_key, 0, K + nforeign - 1, 'WITHSCORES')
local function names()
  local out = {}
  for i = 1, #top, 2 do out[#out+1] = top[i] end
  return out
end
local cand, supply = {}, 0
for t = 1, #top, 2 do
  if supply >= K then break end
  local l, score = byName[top[t]], top[t+1]
  if not l and not foreign[top[t]] then return {0, names()} end
  if l then
    local left = redis.call('LLEN', l.list)
    local w, running = l.weight, 0
    local remaining = left
    if l.group ~= '' then
      local f = redis.call('HMGET', l.meta, 'weight', 'total', 'relayed', 'done', 'dead', 'cancelled', 'running')
      w = math.max(tonumber(f[1] or '1'), 1)
      local size = tonumber(f[2] or '0')
      if size <= 0 then size = tonumber(f[3] or '0') end
      remaining = size - tonumber(f[4] or '0') - tonumber(f[5] or '0') - tonumber(f[6] or '0')
      running = tonumber(f[7] or '0')
    end
    -- Shortest job first, by what is left: a lane's weight is its
    -- priority's, times 4 with at most 100 jobs left, times 2 with at most
    -- 10,000. A small group and a big one's last stretch go fast; the
    -- virtual clock still moves every active lane, so none starves.
    if remaining <= 100 then w = w * 4 elseif remaining <= 10000 then w = w * 2 end
    cand[#cand+1] = {l = l, score = tonumber(score), w = w, left = left, take = 0, running = running}
    supply = supply + math.min(left, quantum)
  end
end
-- Weighted fair queueing on the counts: the candidate with the lowest
-- virtual time goes next (the first read on a tie), each job advancing its
-- lane by 1/weight. The candidates wait in a binary heap: a claim of K
-- jobs among m lanes costs K log m steps, not K times m. Each job served
-- moves the top down in place (no pop and push, comparisons inline): this
-- loop runs once per job, and function calls are most of Lua's cost.
local heap, hn = {}, 0
local function siftDown(j)
  local c = heap[j]
  local cs, ci = c.score, c.i
  while true do
    local l = 2 * j
    if l > hn then break end
    local s = heap[l]
    local r = heap[l+1]
    if r and l < hn and (r.score < s.score or (r.score == s.score and r.i < s.i)) then s, l = r, l + 1 end
    if s.score < cs or (s.score == cs and s.i < ci) then
      heap[j] = s
      j = l
    else
      break
    end
  end
  heap[j] = c
end
local vt = tonumber(redis.call('GET', vt_key) or '0')
local order, n = {}, 0
-- A lane gives at most the quantum; past it only when every candidate
-- read is at its quantum or dry and the claim is still not full.
local cap = quantum
-- Whether every lane in the heap has one weight (nil: not looked at since
-- the heap's lanes changed), and the count of jobs given before which
-- rounds are not tried again: the per-job steps must not pay a scan of the
-- heap each.
local uniform, nextTry = nil, 0
local function fill()
  hn = 0
  uniform = nil
  for _, c in ipairs(cand) do
    if c.take < c.left and c.take < cap then hn = hn + 1; heap[hn] = c end
  end
  for j = math.floor(hn / 2), 1, -1 do siftDown(j) end
end
for i, c in ipairs(cand) do c.i, c.inv = i, 1 / c.w end
fill()
-- Whole rounds without the heap: when the lanes in the heap share one
-- weight and their virtual times lie within one job's step of each other,
-- the order above serves them round-robin in the order of their times
-- (then their places), a round at a time, until one runs out. This gives
-- those rounds with no heap step per job, and the same order: each round
-- adds to each time as the heap would (the same sums to the last bit), and
-- the order and the window are checked again after it.
local function byTime(a, b) return a.score < b.score or (a.score == b.score and a.i < b.i) end
local function rounds()
  if n < nextTry then return false end
  local inv = heap[1].inv
  if uniform == nil then
    uniform = true
    for j = 2, hn do
      if heap[j].inv ~= inv then uniform = false; break end
    end
  end
  if not uniform then return false end
  local r = math.floor((K - n) / hn)
  local lanes = {}
  for j = 1, hn do
    local c = heap[j]
    r = math.min(r, math.min(c.left, cap) - c.take)
    lanes[j] = c
  end
  table.sort(lanes, byTime)
  if r < 1 or lanes[hn].score >= lanes[1].score + inv then
    nextTry = n + hn -- a round's worth of per-job steps first
    return false
  end
  local given = 0
  repeat
    for j = 1, hn do
      local c = lanes[j]
      n = n + 1
      order[n] = c
      if c.score > vt then vt = c.score end
      c.score = c.score + inv
    end
    given = given + 1
    for j = 2, hn do
      if not byTime(lanes[j-1], lanes[j]) then table.sort(lanes, byTime); break end
    end
  until given == r or lanes[hn].score >= lanes[1].score + inv
  hn, uniform = 0, nil
  for _, c in ipairs(lanes) do
    c.take = c.take + given
    if c.take < c.left and c.take < cap then hn = hn + 1; heap[hn] = c end
  end
  for j = hn + 1, #heap do heap[j] = nil end
  for j = math.floor(hn / 2), 1, -1 do siftDown(j) end
  if rounds_mode == 'probe' then error('rounds taken') end
  return true
end
while n < K do
  if hn == 0 then
    if cap >= K then break end
    cap = K
    fill()
    if hn == 0 then break end
  end
  if not (hn > 1 and rounds_mode ~= 'off' and rounds()) then
    local best = heap[1]
    -- Alone, a lane gives what it can in one step. Its time moves by one
    -- job's step at a time all the same: the sums must not depend on how
    -- the jobs were given (see rounds).
    local t = 1
    if hn == 1 then t = math.min(best.left, cap) - best.take end
    t = math.min(t, K - n)
    local score, inv = best.score, best.inv
    for _ = 1, t do
      n = n + 1
      order[n] = best
      if score > vt then vt = score end
      score = score + inv
    end
    best.score = score
    best.take = best.take + t
    if best.take >= best.left or best.take >= cap then
      heap[1] = heap[hn]
      heap[hn] = nil
      hn = hn - 1
      uniform = nil
    end
    if hn > 1 then siftDown(1) end
  end
end
if #order == 0 then return {1, {}, names()} end
local funnel = {}
for _, c in ipairs(cand) do
  if c.take > 0 then
    c.entries, c.next = redis.call('LPOP', c.l.list, c.take), 1
    funnelAdd(funnel, funnelField(c.l.group, topic, 'dequeued'), c.take)
  end
end
local out, entries = {}, {}
for j, c in ipairs(order) do
  local e = c.entries[c.next]
  c.next = c.next + 1
  entries[j] = e
  out[2*j-1] = c.l.i
  out[2*j] = e
end
redis.call('RPUSH', lease_key, unpack(entries))
redis.call('ZADD', leases_key, redisNow() + lease_ms, batch)
-- Each lane served gets one write of its state. Lanes that ran dry leave
-- the fair order in one ZREM; the others move in one ZADD.
local dry, moved, sharedVF = {}, {}, {}
for _, c in ipairs(cand) do
  local l = c.l
  if c.take == c.left then
    dry[#dry+1] = l.name
    if l.group == '' then
      sharedVF[#sharedVF+1] = l.name
      sharedVF[#sharedVF+1] = c.score
    elseif c.take > 0 then
      redis.call('HSET', l.meta, 'running', c.running + c.take, 'vfinish', c.score)
    else
      redis.call('HSET', l.meta, 'vfinish', c.score)
    end
  elseif c.take > 0 then
    if l.group ~= '' then redis.call('HSET', l.meta, 'running', c.running + c.take) end
    moved[#moved+1] = c.score
    moved[#moved+1] = l.name
  end
end
if #dry > 0 then redis.call('ZREM', lanes_key, unpack(dry)) end
if #moved > 0 then redis.call('ZADD', lanes_key, 'XX', unpack(moved)) end
if #sharedVF > 0 then redis.call('HSET', shared_key, unpack(sharedVF)) end
redis.call('SET', vt_key, vt)
redis.call('HINCRBY', stats_key, 'ready', -#order)
redis.call('HINCRBY', stats_key, 'inflight', #order)
funnelFlush(stats_key, funnel)
top = redis.call('ZRANGE', lanes_key, 0, K + nforeign - 1)
return {1, out, top}
`

// Claim leases up to max jobs of partition part in weighted fair order,
// as one batch, for lease by Redis's clock. The claim script reads the fair order
// itself and needs the keys of the lanes it will serve: the candidates
// are those the last claim of this pool on the partition returned (one
// round trip), else a read of the fair order (two), and the script asks
// again when a lane it would serve is not among them.
func (p *Pool) Claim(ctx context.Context, q Queue, max int, lease time.Duration) ([]Claimed, error) {
	out, _, err := p.ClaimDrained(ctx, q, max, lease)
	return out, err
}

// ClaimDrained is Claim that also says whether the fair order was empty
// once the claim was made (drained): no job is ready on the queue
// partition until a write readies one, and every such write leaves a token
// on its wake list (Keys.Wake). A consumer told so need not claim again to
// find the partition empty, a round trip per wake-up at low load; it waits
// on the wake list instead.
func (p *Pool) ClaimDrained(ctx context.Context, q Queue, max int, lease time.Duration) (jobs []Claimed, drained bool, err error) {
	max = min(max, MaxBatch)
	names := p.candidates.take(q)
	if names == nil {
		// As many candidates as jobs asked for: a job each at the least
		// (small groups). The script reads only those it needs.
		// A few more, for names that are no lane's (passed over).
		if names, err = p.byPart[q.Part].ZRange(ctx, p.keyspace.Keys(q).Lanes(), 0, int64(max-1+8)).Result(); err != nil || len(names) == 0 {
			return nil, err == nil, err
		}
	}
	for range 3 {
		out, next, stale, err := p.claimAmong(ctx, q, max, lease, names)
		if err != nil {
			return nil, false, err
		}
		if !stale {
			p.candidates.keep(q, next)
			return out, len(next) == 0, nil
		}
		if names = next; len(names) == 0 {
			return nil, true, nil
		}
	}
	return nil, false, nil // the fair order kept changing under us: the next claim reads it again
}

// claimAmong runs the claim script with the keys of the lanes named. stale
// says a lane the claim would serve was not among them; next is then the
// fair order's head to call again with, else the candidates for the next
// claim.
func (p *Pool) claimAmong(ctx context.Context, q Queue, max int, lease time.Duration, names []string) (out []Claimed, next []string, stale bool, err error) {
	a := claimArgs{k: p.keyspace.Keys(q), max: max, lease: lease, topic: q.Topic, lanes: make([]LaneInfo, 0, len(names))}
	for _, name := range names {
		l, err := ParseLane(name)
		if err != nil {
			a.foreign = append(a.foreign, name) // not ours to serve; left for an operator to see
			continue
		}
		a.lanes = append(a.lanes, l)
	}
	a.batch = p.nextBatch()
	lanes, batch := a.lanes, a.batch
	res, err := claimScript.run(ctx, p.byPart[q.Part], a.keys(), a.argv()...)
	if err != nil {
		return nil, nil, false, fmt.Errorf("claim on %s: %w", q, err)
	}
	reply, _ := res.([]any)
	if len(reply) < 2 {
		return nil, nil, false, fmt.Errorf("claim on %s: unexpected reply %v", q, res)
	}
	if status, _ := reply[0].(int64); status == 0 {
		return nil, stringsOf(reply[1]), true, nil
	}
	if len(reply) > 2 {
		next = stringsOf(reply[2])
	}
	flat, _ := reply[1].([]any)
	out = make([]Claimed, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		li, _ := flat[i].(int64)
		e, _ := flat[i+1].(string)
		pe, err := ParseEntry(e)
		if err != nil || li < 1 || int(li) > len(lanes) {
			// Left in the lease: the reaper returns it, and a job that
			// cannot be read dies there (see Reap).
			continue
		}
		out = append(out, Claimed{ID: pe.ID, Group: lanes[li-1].Group, Lane: pe.Lane, Batch: batch, Index: i / 2,
			Attempt: pe.Attempts + 1, Envelope: []byte(pe.Envelope)})
	}
	return out, next, false, nil
}

func stringsOf(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// candidateCache keeps, per partition, the fair order's head that the last
// claim returned: the next claim's candidates. The claim script checks
// them against the order itself, so a stale entry costs a round trip,
// never a wrong claim.
type candidateCache struct {
	mu    sync.Mutex
	names map[Queue][]string
}

// take returns and forgets partition part's candidates: a claim that
// fails leaves none behind.
func (c *candidateCache) take(q Queue) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := c.names[q]
	delete(c.names, q)
	return names
}

// offer keeps names as partition q's candidates when none are kept: a
// kept answer of this pool's own last claim is never older than a wake-up
// token, which may have waited on its list since before that claim.
func (c *candidateCache) offer(q Queue, names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(names) == 0 || len(c.names[q]) > 0 {
		return
	}
	if c.names == nil {
		c.names = map[Queue][]string{}
	}
	c.names[q] = names
}

// wakeHead is how many lanes of the fair order a wake-up token names
// (enqueueScript): enough for a claim at low load, where a token wakes a
// consumer per job or per few; a claim that needs more lanes than the
// token names asks the script again, as with any stale candidates.
const wakeHead = 16

// Woken takes the token that woke a consumer waiting on queue partition
// q's wake list (Keys.Wake): the enqueue script's token names the fair
// order's head as it made jobs ready, and the next claim on q takes them
// as its candidates, one round trip instead of two (a read of the order,
// then the claim). The claim script checks candidates against the order,
// so a stale token costs that round trip back, never a wrong claim. Other
// tokens (the promote, return and replay scripts' "1") name nothing.
func (p *Pool) Woken(q Queue, token string) {
	if !strings.HasPrefix(token, "[") {
		return
	}
	var names []string
	if json.Unmarshal([]byte(token), &names) != nil {
		return
	}
	p.candidates.offer(q, names)
}

func (c *candidateCache) keep(q Queue, names []string) {
	if len(names) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names == nil {
		c.names = map[Queue][]string{}
	}
	c.names[q] = names
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

// luaNow reads Redis's clock, Unix ms. Leases are judged by it alone, so
// workers' clocks need not agree: one running minutes ahead neither reaps
// early nor gives leases that are born expired. A script may write after
// TIME: scripts replicate their effects (Redis 5 and later), not
// themselves.
const luaNow = `
local function redisNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// extendScript moves the leases of claimed batches to a new deadline,
// Redis's clock (TIME) plus the lease, and reports which were lost, and
// the cancel requests (CancelJob) for jobs of the batches kept: read in the
// same call, so that a worker learns of a cancel within one extension
// round at no cost while none is pending (one EXISTS).
//
// KEYS[1] leases   KEYS[2] cancels
// ARGV[1] the lease, ms   ARGV[2..] batches
// Returns an array with one entry per batch: 1 extended, 0 no longer
// leased (every job settled, or taken back by the reaper); then, for each
// kept batch with cancel requests, its index (1-based) and the places of
// the jobs to cancel (" 3 7 ").
var extendScript = newScript("extend", luaNow, `
local leases_key, cancels_key = KEYS[1], KEYS[2]
local lease_ms = tonumber(ARGV[1])
local batches = {unpack(ARGV, 2)}

local scores = redis.call('ZMSCORE', leases_key, unpack(batches))
local out, members = {}, {}
local deadline = redisNow() + lease_ms
for i, batch in ipairs(batches) do
  if scores[i] then
    out[i] = 1
    members[#members+1] = deadline
    members[#members+1] = batch
  else
    out[i] = 0
  end
end
if #members > 0 then redis.call('ZADD', leases_key, 'XX', unpack(members)) end
if redis.call('EXISTS', cancels_key) == 1 then
  for i, batch in ipairs(batches) do
    local places = redis.call('HGET', cancels_key, batch)
    if places and out[i] == 1 then
      out[#out+1] = i
      out[#out+1] = places
    elseif places then
      redis.call('HDEL', cancels_key, batch)
    end
  end
end
return out
`)

// Extend moves the leases of claimed batches to lease from now by
// Redis's clock, in one call per MaxBatch batches. kept[i] is false where batch i is no longer leased
// (the reaper took it back, or all of it was settled): the holder of its
// jobs must stop, their results would not count.
func (p *Pool) Extend(ctx context.Context, q Queue, batches []string, lease time.Duration) (kept []bool, err error) {
	kept, _, err = p.ExtendLeases(ctx, q, batches, lease)
	return kept, err
}

// ExtendLeases is Extend that also answers the cancel requests for jobs
// of the batches kept (CancelJob): batch -> the places of the jobs to
// cancel; nil when none is pending.
func (p *Pool) ExtendLeases(ctx context.Context, q Queue, batches []string, lease time.Duration) (kept []bool, cancels map[string][]int, err error) {
	kept = make([]bool, 0, len(batches))
	k := p.keyspace.Keys(q)
	for len(batches) > 0 {
		chunk := batches[:min(len(batches), MaxBatch)]
		batches = batches[len(chunk):]
		args := make([]any, 0, 1+len(chunk))
		args = append(args, lease.Milliseconds())
		for _, b := range chunk {
			args = append(args, b)
		}
		res, err := extendScript.run(ctx, p.byPart[q.Part], []string{k.Leases(), k.Cancels()}, args...)
		if err != nil {
			return nil, nil, fmt.Errorf("extending leases on %s: %w", q, err)
		}
		flat, _ := res.([]any)
		if len(flat) < len(chunk) || (len(flat)-len(chunk))%2 != 0 {
			return nil, nil, fmt.Errorf("extending leases on %s: %d answers for %d batches", q, len(flat), len(chunk))
		}
		for _, v := range flat[:len(chunk)] {
			kept = append(kept, v == int64(1))
		}
		for i := len(chunk); i+1 < len(flat); i += 2 {
			at, _ := flat[i].(int64)
			places, _ := flat[i+1].(string)
			if at < 1 || int(at) > len(chunk) {
				continue
			}
			if cancels == nil {
				cancels = map[string][]int{}
			}
			cancels[chunk[at-1]] = parseCancels(places)
		}
	}
	return kept, cancels, nil
}
