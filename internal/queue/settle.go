package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// luaSettle marks jobs of a claimed batch settled in its map
// (Keys.Settled, one byte per job): settle takes a mask of bytes from
// place start on, 0 for a place the call does not settle, else a tag of
// the caller's (1 + a group's index, say), and reads and writes the range
// once, with no command per job. It answers the jobs newly settled (those
// still held) per tag and their total, and, when some were settled
// already, the range as it was (a byte per place, 0 where held); or nil
// when the batch is gone (ended, or taken back by the reaper), and then
// writes nothing: a retried
// or late call finds its jobs settled or their batch gone, and counts
// nothing twice. batchEnd ends a batch whose every job is settled: its two
// keys and its place in leases.
const luaSettle = `
local function settle(leaseKey, settledKey, start, mask)
  if redis.call('EXISTS', leaseKey) == 0 then return nil, 0, '' end
  local n = #mask
  local old = redis.call('GETRANGE', settledKey, start, start + n - 1)
  local counts, bytes, total, sent = {}, {}, 0, 0
  for i = 1, n do
    local m, o = string.byte(mask, i), string.byte(old, i) or 0
    if m > 0 then sent = sent + 1 end
    if o ~= 0 then
      bytes[i] = '\1'
    elseif m > 0 then
      counts[m] = (counts[m] or 0) + 1
      total = total + 1
      bytes[i] = '\1'
    else
      bytes[i] = '\0'
    end
  end
  if total > 0 then redis.call('SETRANGE', settledKey, start, table.concat(bytes)) end
  -- All held (the rule), or the range as it was, which tells which were.
  if total == sent then return counts, total, nil end
  return counts, total, old
end
local function batchEnd(leasesKey, leaseKey, settledKey, batch)
  if redis.call('BITCOUNT', settledKey) >= redis.call('LLEN', leaseKey) then
    redis.call('DEL', leaseKey, settledKey)
    redis.call('ZREM', leasesKey, batch)
  end
end
`

// ackArgs are one call of the ack script, laid out as:
//
//	KEYS[1]   leases     zset: claimed batches by lease deadline
//	KEYS[2]   stats      hash: done, inflight, and the funnel's completed
//	                     field of each job's topic
//	KEYS[3]   completed  list: bulk groups whose jobs have all ended
//	then per batch (nb), 2 keys: lease:<batch>, settled:<batch>
//	then per group (ng), 2 keys: group:<g>, results:<g>
//	then per record (nr), its job:<id>
//	ARGV[1]   now        Unix ms
//	ARGV[2]   keep       seconds to keep an ended group, and a record of a
//	                     job that did not ask for retain (at least: see
//	                     luaKeepRecord)
//	ARGV[3]   nb         batches
//	ARGV[4]   ng         groups
//	ARGV[5]   nm         masks
//	ARGV[6]   nx         extras
//	ARGV[7]   topic      the queue's topic (the funnel's)
//	then per batch, its name; then per group, its name
//	then per mask of plain jobs (nm), 3 fields: batch index, the first
//	  place it covers, the mask (a byte per place: 0 none, 1 a job without
//	  a group, 1+g a job of group g; so ng < 255)
//	then per extra (nx), 8 fields: batch index, group index (0: none),
//	  record index (0: none), id, result (may be empty), seconds to retain
//	  (0: none), attempt, place in the batch
//
// The script unpacks them into named locals and records at its top.
type ackArgs struct {
	k               Keys
	nowMS           int64
	keep            int64 // seconds
	topic           string
	batches, groups indexer
	masks           []ackMask
	extras          []int  // indexes into done
	done            []Done // the call's
}

// ackMask is the plain jobs of one batch in an ack call.
type ackMask struct {
	batch      int
	first, end int   // the places it covers, [first, end)
	jobs       []int // indexes into done
}

func (a *ackArgs) keys() []string {
	keys := make([]string, 0, 3+2*len(a.batches.names)+2*len(a.groups.names)+len(a.extras))
	keys = append(keys, a.k.Leases(), a.k.Stats(), a.k.Completed())
	for _, b := range a.batches.names {
		keys = append(keys, a.k.Lease(b), a.k.Settled(b))
	}
	for _, g := range a.groups.names {
		keys = append(keys, a.k.Group(g), a.k.Results(g))
	}
	for _, i := range a.extras {
		if d := &a.done[i]; d.needsRecord() {
			keys = append(keys, a.k.Job(d.Job.ID))
		}
	}
	return keys
}

func (a *ackArgs) argv() []any {
	args := make([]any, 0, 7+len(a.batches.names)+len(a.groups.names)+3*len(a.masks)+8*len(a.extras))
	args = append(args, a.nowMS, a.keep, len(a.batches.names), len(a.groups.names), len(a.masks), len(a.extras), a.topic)
	for _, b := range a.batches.names {
		args = append(args, b)
	}
	for _, g := range a.groups.names {
		args = append(args, g)
	}
	for _, m := range a.masks {
		tags := make([]byte, m.end-m.first)
		for _, i := range m.jobs {
			tags[a.done[i].Job.Index-m.first] = byte(1 + a.groups.index[a.done[i].Job.Group]) // index 0: no group
		}
		args = append(args, m.batch, m.first, string(tags))
	}
	records := 0
	for _, i := range a.extras {
		d := &a.done[i]
		rec := 0
		if d.needsRecord() {
			records++
			rec = records
		}
		args = append(args, a.batches.index[d.Job.Batch], a.groups.index[d.Job.Group], rec, d.Job.ID, d.Result,
			wholeSeconds(d.Retain), d.Job.Attempt, d.Job.Index)
	}
	return args
}

// ackScript records the success of jobs of claimed batches in one call: a
// script call costs Redis far more than the commands inside it, so a batch
// of acks shares one, and counters move once per batch. A job without a
// record or a result (the common case) leaves nothing behind: its batch's
// plain jobs of the call come as one mask (luaSettle) whose tags are their
// groups, which count them at once. Other jobs ("extras") are handled one
// by one: a group's item adds its result to the group's results; a job
// with a record (retain, or an earlier failed attempt) has it marked done.
// A bulk group whose last job this is goes on the completed list, once.
//
// KEYS and ARGV: ackArgs.
// Returns, per mask, the count of its jobs (all were held, now settled),
// or, when some were not held, the range before the call (a byte per
// place, 0 where held; empty when the batch is gone); then nx flags: 1
// where recorded, 0 where the job was no longer
// held (the reaper took the batch back, or an earlier call settled it).
// Nothing is counted twice (see luaSettle).
var ackScript = newScript("ack", luaGroupEnded, luaFunnel, luaKeepRecord, luaSettle, `
-- KEYS and ARGV, as ackArgs lays them out.
local leases_key, stats_key, completed_key = KEYS[1], KEYS[2], KEYS[3]
local now = ARGV[1]
local keep = ARGV[2]
local nb = tonumber(ARGV[3])
local ng = tonumber(ARGV[4])
local nm = tonumber(ARGV[5])
local nx = tonumber(ARGV[6])
local topic = ARGV[7]
local batches, groups, masks, extras, records = {}, {}, {}, {}, {}
do
  local k, a = 3, 7
  for b = 1, nb do batches[b] = {name = ARGV[a+b], lease = KEYS[k+2*b-1], settled = KEYS[k+2*b]} end
  k, a = k + 2*nb, a + nb
  for g = 1, ng do groups[g] = {name = ARGV[a+g], meta = KEYS[k+2*g-1], results = KEYS[k+2*g]} end
  k, a = k + 2*ng, a + ng
  for j = 1, nm do
    masks[j] = {b = tonumber(ARGV[a+1]), first = tonumber(ARGV[a+2]), tags = ARGV[a+3]}
    a = a + 3
  end
  for j = 1, nx do
    extras[j] = {b = tonumber(ARGV[a+1]), g = tonumber(ARGV[a+2]), rec = tonumber(ARGV[a+3]), id = ARGV[a+4],
      result = ARGV[a+5], retain = tonumber(ARGV[a+6]), attempt = ARGV[a+7], place = tonumber(ARGV[a+8])}
    a = a + 8
  end
  for r = 1, #KEYS - k do records[r] = KEYS[k+r] end
end
local out, touched, perGroup, funnel = {}, {}, {}, {}
local acked = 0
local function group(g)
  local c = perGroup[g]
  if not c then c = {count = 0, results = {}}; perGroup[g] = c end
  return c
end
local fields = {}
local function completed(g, n)
  local field = fields[g]
  if not field then
    field = funnelField(g > 0 and groups[g].name or '', topic, 'completed')
    fields[g] = field
  end
  funnelAdd(funnel, field, n)
end
for j = 1, nm do
  local mk = masks[j]
  local b = mk.b
  local counts, total, was = settle(batches[b].lease, batches[b].settled, mk.first, mk.tags)
  out[j] = was or total
  if total > 0 then
    touched[b] = true
    acked = acked + total
    for tag, n in pairs(counts) do
      local g = tag - 1
      if g > 0 then
        local gc = group(g)
        gc.count = gc.count + n
      end
      completed(g, n)
    end
  end
end
for j = 1, nx do
  local x = extras[j]
  local b, g, r, id = x.b, x.g, x.rec, x.id
  local _, held = settle(batches[b].lease, batches[b].settled, x.place, '\1')
  out[nm+j] = held
  if held > 0 then
    acked = acked + 1
    touched[b] = true
    local result, retain, attempt = x.result, x.retain, x.attempt
    if g > 0 then
      local c = group(g)
      c.count = c.count + 1
      if result ~= '' then
        c.results[#c.results+1] = id
        c.results[#c.results+1] = 'done ' .. attempt .. ' ' .. result
      end
    end
    completed(g, 1)
    if r > 0 then
      local rk = records[r]
      redis.call('HSET', rk, 'state', 'done', 'done_ms', now, 'attempts', attempt)
      if retain > 0 then
        if result ~= '' then redis.call('HSET', rk, 'result', result) end
        keepRecord(rk, retain)
      else
        keepRecord(rk, keep)
      end
    end
  end
end
if acked == 0 then return out end
-- A batch whose every job is settled leaves the leases.
for b in pairs(touched) do batchEnd(leases_key, batches[b].lease, batches[b].settled, batches[b].name) end
-- Per group, one read and one write of its counters, and its items'
-- results (see luaGroupEnded).
for g, c in pairs(perGroup) do
  local gk, rk = groups[g].meta, groups[g].results
  local f = redis.call('HMGET', gk, 'total', 'relayed', 'done', 'dead', 'cancelled', 'running')
  local done = tonumber(f[3] or '0') + c.count
  redis.call('HSET', gk, 'running', tonumber(f[6] or '0') - c.count, 'done', done)
  local total = tonumber(f[1] or '0')
  if #c.results > 0 then redis.call('HSET', rk, unpack(c.results)) end
  groupEndedAfter(gk, rk, groups[g].name, completed_key, now, keep, total, tonumber(f[2] or '0'),
    done + tonumber(f[4] or '0') + tonumber(f[5] or '0'))
end
redis.call('HINCRBY', stats_key, 'done', acked)
redis.call('HINCRBY', stats_key, 'inflight', -acked)
funnelFlush(stats_key, funnel)
return out
`)

// luaKeepRecord keeps a job's record at least secs from now: it only ever
// lengthens an expiry. A client-chosen id's record is also its resends'
// dedupe (the enqueue script gives it the dedupe TTL), which a shorter
// keep or retain must not cut short.
const luaKeepRecord = `
local function keepRecord(key, secs)
  local ttl = redis.call('TTL', key)
  if ttl < 0 or ttl < tonumber(secs) then redis.call('EXPIRE', key, secs) end
end
`

// Done is one success for AckMany.
type Done struct {
	Job    Claimed
	Result []byte
	// Retain keeps the job's record and result this long, at least (the
	// envelope's retain, or its topic's default); 0 keeps nothing for a
	// plain job.
	Retain time.Duration
}

// needsRecord says whether an ack writes the job's record: it asked for
// retain, or an earlier attempt left a record (its last error).
func (d *Done) needsRecord() bool { return d.Retain > 0 || d.Job.Attempt > 1 }

// Ack records the success of a claimed job. It reports false when the
// job's batch had already been taken back.
func (p *Pool) Ack(ctx context.Context, q Queue, d Done, now time.Time, keep time.Duration) (bool, error) {
	ok, err := p.AckMany(ctx, q, []Done{d}, now, keep)
	if err != nil {
		return false, err
	}
	return ok[0], nil
}

// AckMany records several successes in one script call; ok[i] is false
// where the job's batch had already been taken back. keep is how long an
// ended group, and the record of a job that failed before, are kept.
func (p *Pool) AckMany(ctx context.Context, q Queue, done []Done, now time.Time, keep time.Duration) (ok []bool, err error) {
	if len(done) > MaxBatch {
		first, err := p.AckMany(ctx, q, done[:MaxBatch], now, keep)
		if err != nil {
			return nil, err
		}
		rest, err := p.AckMany(ctx, q, done[MaxBatch:], now, keep)
		return append(first, rest...), err
	}
	a := ackArgs{k: p.keyspace.Keys(q), nowMS: now.UnixMilli(), keep: max(int64(keep/time.Second), 1), topic: q.Topic, done: done}
	batches, groups := &a.batches, &a.groups
	// Plain jobs go in one mask per batch, tagged by their group; the
	// others are extras.
	byBatch := map[string]int{} // batch -> its mask, an index into masks
	// By value: a mask is one allocation (masks' backing), as a pointer
	// to one was before a.masks's backing had to leave the stack.
	var masks []ackMask
	seen := make(map[[2]string]bool, len(done))
	for i := range done {
		d := &done[i]
		if id := [2]string{d.Job.Batch, d.Job.ID}; seen[id] {
			continue // given twice: the first counts, this one reads false
		} else {
			seen[id] = true
		}
		b := batches.add(d.Job.Batch)
		if d.Job.Group != "" {
			groups.add(d.Job.Group)
		}
		// A result is kept only in a group's results (or a record): a
		// plain job's result leaves nothing, and its ack is a mask's byte.
		if (len(d.Result) > 0 && d.Job.Group != "") || d.needsRecord() {
			a.extras = append(a.extras, i)
			continue
		}
		mi, ok := byBatch[d.Job.Batch]
		if !ok {
			mi = len(masks)
			byBatch[d.Job.Batch] = mi
			masks = append(masks, ackMask{batch: b, first: d.Job.Index, end: d.Job.Index + 1})
		}
		m := &masks[mi]
		m.first, m.end = min(m.first, d.Job.Index), max(m.end, d.Job.Index+1)
		m.jobs = append(m.jobs, i)
	}
	if len(groups.names) > maxMaskGroups {
		// A mask's byte tags a job's group: split the call.
		half := len(done) / 2
		first, err := p.AckMany(ctx, q, done[:half], now, keep)
		if err != nil {
			return nil, err
		}
		rest, err := p.AckMany(ctx, q, done[half:], now, keep)
		return append(first, rest...), err
	}
	a.masks = masks
	extras := a.extras
	res, err := ackScript.run(ctx, p.byPart[q.Part], a.keys(), a.argv()...)
	if err != nil {
		return nil, fmt.Errorf("ack on %s: %w", q, err)
	}
	flat, _ := res.([]any)
	if len(flat) != len(masks)+len(extras) {
		return nil, fmt.Errorf("ack on %s: %d answers for %d batches and %d jobs", q, len(flat), len(masks), len(extras))
	}
	ok = make([]bool, len(done))
	for j, m := range masks {
		switch v := flat[j].(type) {
		case int64: // every job held
			for _, i := range m.jobs {
				ok[i] = int(v) == len(m.jobs)
			}
		case string: // the range before the call: 0 where held
			for _, i := range m.jobs {
				at := done[i].Job.Index - m.first
				ok[i] = at >= len(v) || v[at] == 0
			}
			if v == "" { // the batch is gone
				for _, i := range m.jobs {
					ok[i] = false
				}
			}
		}
	}
	for j, i := range extras {
		ok[i] = flat[len(masks)+j] == int64(1)
	}
	return ok, nil
}

// maxMaskGroups is the most groups one ack call names: a mask's byte is
// 1 + a group's index.
const maxMaskGroups = 254

// indexer numbers distinct names from 1, in the order first seen (the
// scripts' KEYS and ARGV indexes).
type indexer struct {
	names []string
	index map[string]int
}

func (x *indexer) add(name string) int {
	if x.index == nil {
		x.index = map[string]int{}
	}
	i, ok := x.index[name]
	if !ok {
		x.names = append(x.names, name)
		i = len(x.names)
		x.index[name] = i
	}
	return i
}

// failScript records a failed attempt of a claimed job: it leaves its
// batch and waits in delayed until its next try, its attempt counted, or,
// after its last attempt, goes to the dead set with its last error and
// envelope in its record (and a bulk group it ends is completed). A
// failed attempt always leaves a record, so its last error can be looked
// up. A deferral (the job could not start yet) puts it in delayed without
// counting an attempt or writing a record.
//
// KEYS[1] leases   KEYS[2] lease:<batch>   KEYS[3] job:<id>
// KEYS[4] group:<g> (the stats hash for a job without a group, unused)
// KEYS[5] delayed   KEYS[6] dead   KEYS[7] stats: retried or dead,
// inflight, and the same stage of the funnel   KEYS[8] completed
// KEYS[9] results:<g> (unused without a group)   KEYS[10] settled:<batch>
// ARGV[1] id  ARGV[2] error  ARGV[3] next try, Unix ms (0: dead): the
// retry or deferral is put ARGV[3]-ARGV[4] after Redis's clock (TIME), so
// that a worker whose clock is off neither delays it by its error nor
// runs it early   ARGV[4] now, Unix ms, the caller's clock
// ARGV[5] most dead jobs kept  ARGV[6] seconds to
// keep the record (at least: see luaKeepRecord)   ARGV[7] 1 for a deferral   ARGV[8] the group's name
// ("" none)   ARGV[9] the queue's topic   ARGV[10] the
// batch's name   ARGV[11] the job's place in the batch
// Returns 1 retrying (or deferred), 2 dead, 0 when the job was no longer
// held in its batch.
var failScript = newScript("fail", luaNow, luaGroupEnded, luaFunnel, luaLanes, luaKeepRecord, luaSettle, luaBury, `
local _, held = settle(KEYS[2], KEYS[10], tonumber(ARGV[11]), '\1')
if held == 0 then return 0 end
local e = redis.call('LINDEX', KEYS[2], ARGV[11])
batchEnd(KEYS[1], KEYS[2], KEYS[10], ARGV[10])
if not e then return 0 end
redis.call('HINCRBY', KEYS[7], 'inflight', -1)
local group = ARGV[8] ~= ''
if group then redis.call('HINCRBY', KEYS[4], 'running', -1) end
local topic = ARGV[9]
local nextTry = tonumber(ARGV[3])
if nextTry > 0 then nextTry = redisNow() + math.max(0, nextTry - tonumber(ARGV[4])) end
if ARGV[7] == '1' then
  redis.call('ZADD', KEYS[5], nextTry, e)
  if group then redis.call('HINCRBY', KEYS[4], 'delayed', 1) end
  return 1
end
local attempts = (entryHead(e) or 0) + 1
-- An entry that cannot be read (see Reap) dies as it is.
if string.match(e, '^%d+ ') then e = withAttempts(e, attempts) end
redis.call('HSET', KEYS[3], 'last_error', ARGV[2], 'failed_ms', ARGV[4], 'attempts', attempts)
if group then redis.call('HINCRBY', KEYS[4], 'failed', 1) end
if nextTry > 0 then
  redis.call('ZADD', KEYS[5], nextTry, e)
  redis.call('HSET', KEYS[3], 'state', 'retrying')
  keepRecord(KEYS[3], ARGV[6])
  if group then redis.call('HINCRBY', KEYS[4], 'delayed', 1) end
  redis.call('HINCRBY', KEYS[7], 'retried', 1)
  redis.call('HINCRBY', KEYS[7], funnelField(ARGV[8], topic, 'retried'), 1)
  return 1
end
bury(KEYS[3], KEYS[6], ARGV[5], ARGV[6], KEYS[7], ARGV[1], e, attempts, ARGV[2], ARGV[4], ARGV[8], KEYS[4], KEYS[9], topic)
if group then groupEnded(KEYS[4], KEYS[9], ARGV[8], KEYS[8], ARGV[4], ARGV[6]) end
return 2
`)

// luaBury puts a job whose last attempt ended in the dead set: its record
// (state dead, its entry, kept at least keepSecs), its id in the dead set
// (capped: the oldest ids go first, their records expire by themselves),
// the dead counters of the stats, the funnel and its group (group "" for
// none), and its group's result. The caller has written the record's
// last_error and attempts, and checks whether the group ended.
const luaBury = `
local function bury(rk, deadKey, deadMax, keepSecs, statsKey, id, e, attempts, err, now, group, groupKey, resultsKey, topic)
  redis.call('HSET', rk, 'state', 'dead', 'dead_ms', now, 'env', e)
  keepRecord(rk, keepSecs)
  redis.call('ZADD', deadKey, now, id)
  local over = redis.call('ZCARD', deadKey) - tonumber(deadMax)
  if over > 0 then redis.call('ZPOPMIN', deadKey, over) end
  redis.call('HINCRBY', statsKey, 'dead', 1)
  redis.call('HINCRBY', statsKey, funnelField(group, topic, 'dead'), 1)
  if group ~= '' then
    redis.call('HINCRBY', groupKey, 'dead', 1)
    redis.call('HSET', resultsKey, id, 'dead ' .. attempts .. ' ' .. err)
  end
end
`

// Outcome of Fail.
const (
	FailLost     = 0 // the job was no longer in its batch; nothing recorded
	FailRetrying = 1
	FailDead     = 2
)

// DeadLimits bound the dead set: at most Max ids, each kept for Keep.
type DeadLimits struct {
	Max  int
	Keep time.Duration
}

// Failure is a failed attempt for Fail.
type Failure struct {
	Job   Claimed
	Cause string
	// NextTry is when to try again; zero: the job is dead.
	NextTry time.Time
}

// Fail records a failed attempt of a claimed job: retried at NextTry, or
// dead when NextTry is zero.
func (p *Pool) Fail(ctx context.Context, q Queue, f Failure, now time.Time, dead DeadLimits) (int, error) {
	next := int64(0)
	if !f.NextTry.IsZero() {
		next = f.NextTry.UnixMilli()
	}
	return p.fail(ctx, q, f, next, now, dead, false)
}

// Defer puts a claimed job in delayed until at without counting the attempt:
// it could not run yet (another job holds its idempotency key, or its rate
// limit's slot is later), which is not a failure. at is on the caller's
// clock, which reads now: the job is due at-now after Redis's clock. It
// reports false when the job was no longer in its batch.
func (p *Pool) Defer(ctx context.Context, q Queue, job Claimed, at, now time.Time) (bool, error) {
	res, err := p.fail(ctx, q, Failure{Job: job}, at.UnixMilli(), now, DeadLimits{}, true)
	return res == FailRetrying, err
}

func (p *Pool) fail(ctx context.Context, q Queue, f Failure, next int64, now time.Time, dead DeadLimits, deferral bool) (int, error) {
	k := p.keyspace.Keys(q)
	flag := 0
	if deferral {
		flag = 1
	}
	job := f.Job
	group, results := k.Stats(), k.Stats()
	if job.Group != "" {
		group, results = k.Group(job.Group), k.Results(job.Group)
	}
	res, err := failScript.run(ctx, p.byPart[q.Part],
		[]string{k.Leases(), k.Lease(job.Batch), k.Job(job.ID), group, k.Delayed(), k.Dead(), k.Stats(), k.Completed(), results,
			k.Settled(job.Batch)},
		job.ID, f.Cause, next, now.UnixMilli(), dead.Max, max(int64(dead.Keep/time.Second), 1), flag, job.Group, q.Topic, job.Batch,
		job.Index)
	if err != nil {
		return FailLost, fmt.Errorf("fail %s: %w", job.ID, err)
	}
	n, _ := res.(int64)
	return int(n), nil
}

// luaPutBack puts entries back on their lanes, at the front (they were
// first in line already): the reaper's and a release's from a batch, the
// promoter's from delayed. A job of a cancelled group is not put back: it
// is counted cancelled (and its group's results say so), and its group
// may complete. counter is the group's counter the job leaves (running or
// delayed). acc gathers what the call did: moved (put back), cancelled,
// ended (groups to check once).
const luaPutBack = `
local function putBack(l, e, id, counter, lanesKey, vtKey, sharedKey, acc)
  if l.group ~= '' then
    redis.call('HINCRBY', l.meta, counter, -1)
    if acc.state[l.name] == nil and redis.call('HEXISTS', l.meta, 'cancelled_ms') == 1 then
      acc.state[l.name] = 'cancelled'
    end
    if acc.state[l.name] == 'cancelled' then
      redis.call('HINCRBY', l.meta, 'cancelled', 1)
      redis.call('HSET', l.results, id, 'cancelled 0 ')
      acc.ended[l.name] = l
      funnelAdd(acc.funnel, funnelField(l.group, l.topic, 'cancelled'), 1)
      return
    end
  end
  redis.call('LPUSH', l.list, e)
  if acc.state[l.name] == nil then
    activate(l, lanesKey, vtKey, sharedKey, acc.cache)
    acc.state[l.name] = 'active'
  end
  acc.moved = acc.moved + 1
end
local function putBackDone(acc, statsKey, wakeKey, completedKey, now, keep)
  for _, l in pairs(acc.ended) do groupEnded(l.meta, l.results, l.group, completedKey, now, keep) end
  funnelFlush(statsKey, acc.funnel)
  if acc.moved > 0 then
    redis.call('HINCRBY', statsKey, 'ready', acc.moved)
    redis.call('RPUSH', wakeKey, 1)
    redis.call('LTRIM', wakeKey, -1, -1)
  end
end
`

// returnArgs are one call of the return script, laid out as:
//
//	KEYS[1]         leases         zset: claimed batches by lease deadline
//	KEYS[2]         lanes          zset: active lanes by virtual time
//	KEYS[3]         vt             string: the partition's virtual clock
//	KEYS[4]         stats          hash: ready, inflight, dead, the funnel's
//	                               cancelled and dead fields
//	KEYS[5]         wake           list: wake-up token for idle consumers
//	KEYS[6]         completed      list: bulk groups whose jobs have all ended
//	KEYS[7]         shared         hash: shared lanes' virtual finish times
//	KEYS[8]         lease:<batch>  list: the batch's entries
//	KEYS[9]         settled:<batch>  string: a byte per settled place
//	KEYS[10]        dead           zset: the dead set
//	KEYS[11..10+3m] per lane (m of them), 3 keys: list, meta, results
//	                (appendLaneKeys)
//	KEYS[11+3m..]   reap: per last-attempt candidate, its job:<id>
//	ARGV[1]         m              lanes
//	ARGV[2]         mode           "reap" or "release"
//	ARGV[3]         keep           seconds to keep an ended group
//	ARGV[4]         batch          the batch's name
//	ARGV[5]         topic          the queue's topic
//	ARGV[6]         dead_max       most dead jobs kept
//	ARGV[7]         dead_keep      seconds to keep a dead job's record
//	ARGV[8..7+3m]   per lane, 3 fields: name, group, weight (appendLaneArgs)
//	ARGV[8+3m..]    release: per job to release, its place in the batch;
//	                reap: per last-attempt candidate, 2 fields: its place
//	                in the batch and its most attempts (the caller names the
//	                jobs whose reap would reach it; each is checked again)
//
// The script unpacks them into named locals and records at its top.
type returnArgs struct {
	k      Keys
	batch  string
	mode   string // "reap" or "release"
	topic  string
	dead   DeadLimits
	lanes  []LaneInfo
	places []int         // release
	last   []lastAttempt // reap
}

func (a *returnArgs) keys() []string {
	ks := make([]string, 0, 10+3*len(a.lanes)+len(a.last))
	ks = append(ks, a.k.Leases(), a.k.Lanes(), a.k.VirtualTime(), a.k.Stats(), a.k.Wake(), a.k.Completed(), a.k.Shared(),
		a.k.Lease(a.batch), a.k.Settled(a.batch), a.k.Dead())
	ks = a.k.appendLaneKeys(ks, a.lanes...)
	for _, l := range a.last {
		ks = append(ks, a.k.Job(l.id))
	}
	return ks
}

func (a *returnArgs) argv() []any {
	args := make([]any, 0, 7+3*len(a.lanes)+len(a.places)+2*len(a.last))
	args = append(args, len(a.lanes), a.mode, int64(endedKeep/time.Second), a.batch, a.topic, a.dead.Max, max(int64(a.dead.Keep/time.Second), 1))
	args = appendLaneArgs(args, a.lanes...)
	for _, place := range a.places {
		args = append(args, place)
	}
	for _, l := range a.last {
		args = append(args, l.place, l.most)
	}
	return args
}

// returnScript takes jobs of one claimed batch back to their lanes: all
// those still held in an expired batch (the reaper: each attempt counted,
// since it may have run), or the given ones (a release: a stopping worker
// hands back jobs it did not run to the end, attempts not counted).
// Whether a batch expired is judged by Redis's clock (TIME), never the
// caller's. A reaped job whose counted attempt was its last does not go
// back: its worker died running it (or lost its lease: cut off from Redis,
// stalled), so it dies as after a failed last attempt, with an error that
// says so; a job that kills its worker cannot loop. Entries whose lane the
// caller did not name stay in the batch for a later call.
//
// KEYS and ARGV: returnArgs.
// Returns {jobs back on their lanes, jobs dead}.
var returnScript = newScript("return", luaNow, luaGroupEnded, luaFunnel, luaLanes, luaPutBack, luaKeepRecord, luaSettle, luaBury, `
-- KEYS and ARGV, as returnArgs lays them out.
local leases_key, lanes_key, vt_key, stats_key, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local completed_key, shared_key, lease_key, settled_key, dead_key = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local m = tonumber(ARGV[1])
local mode = ARGV[2]
local keep = ARGV[3]
local batch = ARGV[4]
local topic = ARGV[5]
local dead_max = ARGV[6]
local dead_keep = ARGV[7]
local _, byName = readLanes(m, 10, 7, topic)
local release, candidates = {}, {}
if mode == 'reap' then
  local d = 0
  for i = 8 + 3*m, #ARGV - 1, 2 do
    d = d + 1
    candidates[d] = {place = tonumber(ARGV[i]), most = tonumber(ARGV[i+1]), rk = KEYS[10+3*m+d]}
  end
else
  for i = 8 + 3*m, #ARGV do release[#release+1] = tonumber(ARGV[i]) end
end

local now = redisNow()
-- The jobs to take back: place -> entry, in the batch's order.
local places, entries = {}, {}
local last = {} -- place -> {most attempts, its record's key}
if mode == 'reap' then
  local due = redis.call('ZSCORE', leases_key, batch)
  if not due or tonumber(due) > now then return {0, 0} end
  local all = redis.call('LRANGE', lease_key, 0, -1)
  local settled = redis.call('GET', settled_key) or ''
  for i, e in ipairs(all) do
    if (string.byte(settled, i) or 0) == 0 then places[#places+1], entries[#entries+1] = i - 1, e end
  end
  for _, c in ipairs(candidates) do last[c.place] = c end
else
  local seen = {}
  for _, p in ipairs(release) do
    local e = not seen[p] and redis.call('LINDEX', lease_key, p)
    seen[p] = true
    if e then places[#places+1], entries[#entries+1] = p, e end
  end
end
-- Only the jobs whose lane was named go back: they are settled here.
local back, backPlaces = {}, {}
for i, e in ipairs(entries) do
  local _, id, lane = entryHead(e)
  if id and byName[lane] then
    back[#back+1] = e
    backPlaces[#backPlaces+1] = places[i]
  end
end
-- Settled in one mask over the places going back; a place settled since
-- it was read (a release racing an ack) stays where it is.
local held = {}
if #backPlaces > 0 then
  local first, lastPlace = backPlaces[1], backPlaces[1]
  for _, p in ipairs(backPlaces) do first, lastPlace = math.min(first, p), math.max(lastPlace, p) end
  local mask = {}
  for p = first, lastPlace do mask[p-first+1] = '\0' end
  for _, p in ipairs(backPlaces) do mask[p-first+1] = '\1' end
  local _, total, was = settle(lease_key, settled_key, first, table.concat(mask))
  for i, p in ipairs(backPlaces) do
    held[i] = total > 0 and (was == nil or (string.byte(was, p - first + 1) or 0) == 0)
  end
end
local acc = {moved = 0, state = {}, ended = {}, funnel = {}, cache = {}}
local taken, dead = 0, 0
-- Last entry first: pushing each to the front keeps their order.
for i = #back, 1, -1 do
  if held[i] then
    local e = back[i]
    local n, id, lane = entryHead(e)
    local l = byName[lane]
    taken = taken + 1
    local final = mode == 'reap' and last[backPlaces[i]]
    if mode == 'reap' then e = withAttempts(e, n + 1) end
    if final and n + 1 >= final.most then
      local err = 'lease expired: the worker died or stopped running it (attempt ' .. (n + 1) .. ' of ' .. final.most .. ')'
      redis.call('HSET', final.rk, 'last_error', err, 'failed_ms', now, 'attempts', n + 1)
      if l.group ~= '' then
        redis.call('HINCRBY', l.meta, 'running', -1)
        redis.call('HINCRBY', l.meta, 'failed', 1)
        acc.ended[l.name] = l
      end
      bury(final.rk, dead_key, dead_max, dead_keep, stats_key, id, e, n + 1, err, now, l.group, l.meta, l.results, topic)
      dead = dead + 1
    else
      putBack(l, e, id, 'running', lanes_key, vt_key, shared_key, acc)
    end
  end
end
if taken > 0 then
  redis.call('HINCRBY', stats_key, 'inflight', -taken)
  batchEnd(leases_key, lease_key, settled_key, batch)
end
-- A batch without its list (deleted by hand) leaves the leases.
if redis.call('EXISTS', lease_key) == 0 then redis.call('ZREM', leases_key, batch) end
putBackDone(acc, stats_key, wake_key, completed_key, now, keep)
return {acc.moved, dead}
`)

// promoteArgs are one call of the promote script, laid out as:
//
//	KEYS[1]        delayed    zset: entries by due time
//	KEYS[2]        lanes      zset: active lanes by virtual time
//	KEYS[3]        vt         string: the partition's virtual clock
//	KEYS[4]        stats      hash: ready, the funnel's cancelled fields
//	KEYS[5]        wake       list: wake-up token for idle consumers
//	KEYS[6]        completed  list: bulk groups whose jobs have all ended
//	KEYS[7]        shared     hash: shared lanes' virtual finish times
//	KEYS[8..7+3m]  per lane (m of them), 3 keys: list, meta, results
//	               (appendLaneKeys)
//	ARGV[1]        now        Unix ms: only entries due at or before it move
//	ARGV[2]        m          lanes
//	ARGV[3]        keep       seconds to keep an ended group
//	ARGV[4]        topic      the queue's topic
//	ARGV[5..4+3m]  per lane, 3 fields: name, group, weight (appendLaneArgs)
//	ARGV[5+3m..]   the candidate entries
//
// The script unpacks them into named locals at its top.
type promoteArgs struct {
	k       Keys
	nowMS   int64
	topic   string
	lanes   []LaneInfo
	entries []string
}

func (a *promoteArgs) keys() []string {
	ks := make([]string, 0, 7+3*len(a.lanes))
	ks = append(ks, a.k.Delayed(), a.k.Lanes(), a.k.VirtualTime(), a.k.Stats(), a.k.Wake(), a.k.Completed(), a.k.Shared())
	return a.k.appendLaneKeys(ks, a.lanes...)
}

func (a *promoteArgs) argv() []any {
	args := make([]any, 0, 4+3*len(a.lanes)+len(a.entries))
	args = append(args, a.nowMS, len(a.lanes), int64(endedKeep/time.Second), a.topic)
	args = appendLaneArgs(args, a.lanes...)
	for _, e := range a.entries {
		args = append(args, e)
	}
	return args
}

// promoteScript moves due entries of delayed back to their lanes.
// Candidates come from a read of delayed; each is checked again here.
//
// KEYS and ARGV: promoteArgs.
// Returns how many went back to their lanes.
var promoteScript = newScript("promote", luaGroupEnded, luaFunnel, luaLanes, luaPutBack, `
-- KEYS and ARGV, as promoteArgs lays them out.
local delayed_key, lanes_key, vt_key, stats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local wake_key, completed_key, shared_key = KEYS[5], KEYS[6], KEYS[7]
local now_ms = ARGV[1]
local m = tonumber(ARGV[2])
local keep = ARGV[3]
local topic = ARGV[4]
local _, byName = readLanes(m, 7, 4, topic)
local entries = {}
for i = 5 + 3*m, #ARGV do entries[#entries+1] = ARGV[i] end

local now = tonumber(now_ms)
local acc = {moved = 0, state = {}, ended = {}, funnel = {}, cache = {}}
for i = #entries, 1, -1 do
  local e = entries[i]
  local due = redis.call('ZSCORE', delayed_key, e)
  local _, id, lane = entryHead(e)
  local l = id and byName[lane]
  if l and due and tonumber(due) <= now then
    redis.call('ZREM', delayed_key, e)
    putBack(l, e, id, 'delayed', lanes_key, vt_key, shared_key, acc)
  end
end
putBackDone(acc, stats_key, wake_key, completed_key, now_ms, keep)
return acc.moved
`)

// lanesOf parses entries' lanes: the distinct ones, and the entries that
// could be parsed.
func lanesOf(entries []string) (lanes []LaneInfo, ok []string) {
	seen := map[string]bool{}
	for _, e := range entries {
		pe, err := ParseEntry(e)
		if err != nil {
			continue
		}
		l, err := ParseLane(pe.Lane)
		if err != nil {
			continue
		}
		ok = append(ok, e)
		if !seen[l.Name] {
			seen[l.Name] = true
			lanes = append(lanes, l)
		}
	}
	return lanes, ok
}

// AttemptLimit is the most attempts of a job, read from its envelope as
// the worker that would run it reads it (the envelope's max_attempts, else
// its defaults); 0 or less: no limit. The reaper kills a job whose reap
// spends its last attempt.
type AttemptLimit func(envelope string) int

// dueLeasesScript reads the first expired batches, by Redis's clock.
//
// KEYS[1] leases   ARGV[1] most batches
// Returns their names, the earliest deadlines first.
var dueLeasesScript = newScript("dueLeases", luaNow, `
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', redisNow(), 'LIMIT', 0, tonumber(ARGV[1]))
`)

// Reap returns expired batches of queue partition q to their lanes, up to
// max batches at a time, each attempt counted. A lease expired when
// Redis's clock is past its deadline: the caller's clock plays no part. A
// job whose counted attempt reaches its limit (limit, nil: none) goes to
// the dead set instead, with a last error that says its worker died or
// lost the lease running it. It returns how many jobs went back and how
// many died. An entry that cannot be read (its head or lane malformed: a
// foreign write, never sluice's own) has no lane to go back to: it dies at
// once with the reason as its last error (within dead's limits), so that
// its batch leaves the leases instead of coming up at every reap. Its
// group, which it does not tell, keeps counting it as running. A job whose
// cancel is pending (reapCancels) is settled cancelled, not taken back.
func (p *Pool) Reap(ctx context.Context, q Queue, max int, dead DeadLimits, limit AttemptLimit) (returned, died int, err error) {
	res, err := dueLeasesScript.run(ctx, p.byPart[q.Part], []string{p.keyspace.Keys(q).Leases()}, max)
	if err != nil {
		return 0, 0, err
	}
	return p.reapBatches(ctx, q, stringsOf(res), dead, limit)
}

// reapBatches is Reap of the expired batches named.
func (p *Pool) reapBatches(ctx context.Context, q Queue, batches []string, dead DeadLimits, limit AttemptLimit) (returned, died int, err error) {
	if len(batches) == 0 {
		return 0, 0, nil
	}
	k := p.keyspace.Keys(q)
	c := p.byPart[q.Part]
	pipe := c.Pipeline()
	leased := make([]*redis.StringSliceCmd, len(batches))
	requested := make([]*redis.SliceCmd, len(batches))
	for i, b := range batches {
		leased[i] = pipe.LRange(ctx, k.Lease(b), 0, -1)
		requested[i] = pipe.HMGet(ctx, k.Cancels(), b)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, err
	}
	for i, b := range batches {
		cancelled, err := p.reapCancels(ctx, q, b, leased[i].Val(), requested[i].Val())
		if err != nil {
			return returned, died, err
		}
		entries := make([]string, 0, len(leased[i].Val()))
		var last []lastAttempt
		for place, e := range leased[i].Val() {
			if cancelled[place] {
				continue
			}
			if reason := unreadable(e); reason != "" {
				// Its id may be what cannot be read: its record is named
				// after its place.
				id := "unreadable-" + b + "-" + strconv.Itoa(place)
				if pe, err := ParseEntry(e); err == nil {
					id = pe.ID
				}
				f := Failure{Job: Claimed{ID: id, Batch: b, Index: place}, Cause: "the reaper could not read this job's entry (" + reason + "): " + truncate(e, 200)}
				res, err := p.fail(ctx, q, f, 0, time.Now(), dead, false)
				if err != nil {
					return returned, died, err
				}
				if res == FailDead {
					died++
				}
				continue
			}
			entries = append(entries, e)
			if limit == nil {
				continue
			}
			pe, _ := ParseEntry(e)
			if most := limit(pe.Envelope); most > 0 && pe.Attempts+1 >= most {
				last = append(last, lastAttempt{place: place, most: most, id: pe.ID})
			}
		}
		lanes, _ := lanesOf(entries)
		n, d, err := p.returnBatch(ctx, q, b, "reap", lanes, nil, last, dead)
		if err != nil {
			return returned, died, err
		}
		returned += n
		died += d
	}
	return returned, died, nil
}

// lastAttempt is a job of an expired batch whose reap would spend its
// last attempt.
type lastAttempt struct {
	place, most int
	id          string
}

// unreadable says why an entry cannot go back to a lane; "" when it can.
func unreadable(e string) string {
	pe, err := ParseEntry(e)
	if err != nil {
		return err.Error()
	}
	if _, err := ParseLane(pe.Lane); err != nil {
		return err.Error()
	}
	return ""
}

// truncate cuts s to at most n bytes, for error messages.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Release hands claimed jobs back to the front of their lanes without
// counting the attempt: a stopping worker did not run them to the end. A
// job whose cancel is pending (releaseCancels) is settled cancelled
// instead. It returns how many went back.
func (p *Pool) Release(ctx context.Context, q Queue, jobs []Claimed) (int, error) {
	byBatch := map[string][]Claimed{}
	var order []string
	for _, j := range jobs {
		if _, ok := byBatch[j.Batch]; !ok {
			order = append(order, j.Batch)
		}
		byBatch[j.Batch] = append(byBatch[j.Batch], j)
	}
	total := 0
	for _, b := range order {
		cancelled, err := p.releaseCancels(ctx, q, b, byBatch[b])
		if err != nil {
			return total, err
		}
		seen := map[string]bool{}
		var lanes []LaneInfo
		var places []int
		for _, j := range byBatch[b] {
			if cancelled[j.Index] {
				continue
			}
			places = append(places, j.Index)
			if seen[j.Lane] {
				continue
			}
			seen[j.Lane] = true
			if l, err := ParseLane(j.Lane); err == nil {
				lanes = append(lanes, l)
			}
		}
		n, _, err := p.returnBatch(ctx, q, b, "release", lanes, places, nil, DeadLimits{})
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

func (p *Pool) returnBatch(ctx context.Context, q Queue, batch, mode string, lanes []LaneInfo, places []int, last []lastAttempt, dead DeadLimits) (returned, died int, err error) {
	a := returnArgs{k: p.keyspace.Keys(q), batch: batch, mode: mode, topic: q.Topic, dead: dead, lanes: lanes, places: places, last: last}
	res, err := returnScript.run(ctx, p.byPart[q.Part], a.keys(), a.argv()...)
	if err != nil {
		return 0, 0, fmt.Errorf("returning batch %s on %s: %w", batch, q, err)
	}
	counts, _ := res.([]any)
	if len(counts) != 2 {
		return 0, 0, fmt.Errorf("returning batch %s on %s: unexpected reply %v", batch, q, res)
	}
	n, _ := counts[0].(int64)
	d, _ := counts[1].(int64)
	return int(n), int(d), nil
}

// Promote moves delayed jobs of partition part that are due into their
// lanes, up to max at a time. It returns how many.
func (p *Pool) Promote(ctx context.Context, q Queue, max int, now time.Time) (int, error) {
	entries, err := p.byPart[q.Part].ZRangeArgs(ctx, dueBy(p.keyspace.Keys(q).Delayed(), now, max)).Result()
	if err != nil {
		return 0, err
	}
	return p.promoteEntries(ctx, q, entries, now)
}

// promoteEntries is Promote of the due delayed entries named.
func (p *Pool) promoteEntries(ctx context.Context, q Queue, entries []string, now time.Time) (int, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	k := p.keyspace.Keys(q)
	lanes, entries := lanesOf(entries)
	if len(entries) == 0 {
		return 0, nil
	}
	a := promoteArgs{k: k, nowMS: now.UnixMilli(), topic: q.Topic, lanes: lanes, entries: entries}
	res, err := promoteScript.run(ctx, p.byPart[q.Part], a.keys(), a.argv()...)
	if err != nil {
		return 0, fmt.Errorf("promoting delayed jobs on %s: %w", q, err)
	}
	moved, _ := res.(int64)
	return int(moved), nil
}

// dueBy selects up to max members of key scored at or before now.
func dueBy(key string, now time.Time, max int) redis.ZRangeArgs {
	return redis.ZRangeArgs{Key: key, ByScore: true, Start: "-inf", Stop: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(max)}
}

// wholeSeconds is d in seconds for EXPIRE, rounded up: a retain of 500ms
// keeps the record a second, not none.
func wholeSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
