package queue

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Item is one job for Enqueue.
type Item struct {
	ID    string
	Group string
	Topic string
	// Tenant picks the shared lane of a job without a group.
	Tenant string
	// IDGiven marks an id the client chose: its resends are deduped by
	// a job:<id> record for the dedupe TTL.
	IDGiven bool
	// KafkaPartition and Offset are the record's place in Kafka: the
	// partition dedupes relay replays by it (the watermark).
	KafkaPartition int32
	Offset         int64
	// HasPosition says KafkaPartition and Offset are set; an item
	// without one (written by a test or a tool) is not deduped by it.
	HasPosition bool
	// TopicID is the Kafka topic's id (Metadata v10+; sarama's Uuid
	// string), the identity of the log the offset belongs to: a watermark
	// written under another id is not compared with the offset (the topic
	// was deleted and created again). Empty when unknown: the offset
	// alone decides, as before topic ids.
	TopicID string
	// Weight is the group's fair-share weight: its priority class + 1.
	Weight int
	// RunAt delays the job; zero or past means ready now.
	RunAt time.Time
	// GroupTotal is the bulk group's size when the envelope states it.
	GroupTotal int64
	// CallbackURL is the group's callback, from a close or an envelope.
	CallbackURL string
	// Close makes the item a bulk group's close instead of a job: it
	// records GroupTotal and CallbackURL, and the group completes once
	// that many of its jobs have ended. ID and Envelope are unused.
	Close bool
	// Envelope is the job's JSON exactly as read from Kafka.
	Envelope []byte
}

// Outcome is what Enqueue did with one item.
type Outcome int

const (
	// Failed: Redis refused this item for a reason of its own (Result.Err).
	Failed Outcome = iota
	// Queued: the job is in its group's ready list.
	Queued
	// Delayed: the job waits in the delayed set until RunAt.
	Delayed
	// Duplicate: a job with this id is already in the partition.
	Duplicate
	// Fenced: the token is older than one the partition has seen.
	Fenced
	// Dropped: the job's group was cancelled; nothing was written.
	Dropped
	// Closed: a bulk group's close was recorded.
	Closed
)

func (o Outcome) String() string {
	return [...]string{"failed", "queued", "delayed", "duplicate", "fenced", "dropped", "closed"}[o]
}

// Result is one item's outcome.
type Result struct {
	Outcome Outcome
	Err     error // set when Outcome is Failed
}

// enqueueScript writes a batch of jobs into one partition, fenced and
// deduplicated by Kafka position. One call per batch, not per job: Redis
// runs scripts on one core, and per-call and per-lane work amortised over a
// batch is what lets a relay approach Redis's limit. A plain job costs one
// entry in one RPUSH per lane; nothing per job but its bytes.
//
// KEYS and ARGV: enqueueArgs.
// Returns -1 when fenced (nothing written), else n codes, then two per
// run: how many of its first jobs were duplicates, and one code for the
// rest, then three per Kafka partition whose watermark was stored under
// another topic id: the Kafka partition (a string), that id, and its
// offset (an integer). Codes: 1 queued, 2 delayed, 0 duplicate (nothing
// written: at or below the watermark, or a client-chosen id seen within
// the TTL), 3 refused (a key of the job or its lane holds the wrong type;
// nothing left written for it), 4 dropped (its group was cancelled), 5
// closed (a close item, recorded).
//
// The fence comes first: a deposed relay changes nothing, not even counters
// of its own. Then the watermark: the relay applies each Kafka partition's
// records in offset order and never a later batch before an earlier one is
// confirmed, so a record at or below the watermark was applied already,
// however old, as long as it is the same log: a watermark stored under
// another topic id than topic_id (ARGV[8]) belongs to a deleted topic, so it is taken
// as -1 (nothing of this log applied), the new id stored with the new
// offset, and the change counted (stats wm_log_changed) and returned. A
// watermark without an id (written before ids, or by a relay that could
// not learn one) adopts topic_id; an empty topic_id compares offsets only.
// The id is compared once per Kafka partition and call, never per job.
// The watermark moves in this same script, so an AOF that lost the
// entries lost the watermark with them.
var enqueueScript = newScript("enqueue", luaGroupEnded, luaFunnel, luaLanes, "local wakeHead = "+strconv.Itoa(wakeHead), `
-- KEYS and ARGV, as enqueueArgs lays them out.
local fence_key, stats_key, lanes_key, vt_key, delayed_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local wake_key, completed_key, wm_key, shared_key = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local token = ARGV[1]
local now = ARGV[2]
local topic = ARGV[3]
local n = tonumber(ARGV[4])
local m = tonumber(ARGV[5])
local ttl = ARGV[6]
local nruns = tonumber(ARGV[7])
local topicID = ARGV[8]
local lanes = readLanes(m, 9, 8, topic)
local items, runs, records = {}, {}, {}
local jobs = n
do
  local a = 8 + 3*m
  for i = 1, n do
    items[i] = {kp = ARGV[a+1], off = tonumber(ARGV[a+2]), lane = tonumber(ARGV[a+3]), due = ARGV[a+4],
      rec = tonumber(ARGV[a+5]), total = ARGV[a+6], callback = ARGV[a+7], entry = ARGV[a+8]}
    a = a + 8
  end
  -- A run's entries stay in ARGV, from..to: a plain job costs Lua no
  -- work but copying its entry.
  for r = 1, nruns do
    local cnt = tonumber(ARGV[a+5])
    runs[r] = {kp = ARGV[a+1], first = tonumber(ARGV[a+2]), last = tonumber(ARGV[a+3]), lane = tonumber(ARGV[a+4]),
      count = cnt, offsets = ARGV[a+6], from = a + 7, to = a + 6 + cnt}
    jobs = jobs + cnt
    a = a + 6 + cnt
  end
  for r = 1, #KEYS - 9 - 3*m do records[r] = KEYS[9+3*m+r] end
end

local fence = tonumber(redis.call('GET', fence_key) or '0')
if tonumber(token) < fence then
  redis.call('HINCRBY', stats_key, 'fenced', jobs)
  return -1
end
if tonumber(token) > fence then
  redis.call('SET', fence_key, token)
end
local nowN = tonumber(now)
-- A pcall's refusal about the job's own keys (the wrong type) refuses its
-- jobs. Redis unable to write now (MISCONF: it cannot persist; OOM,
-- READONLY, NOREPLICAS, MASTERDOWN) fails the whole call instead, as
-- redis.call would: Redis refuses a script's first write then, so nothing
-- was written, and the caller retries the batch (Transient), never
-- requeueing or dead-lettering a job for it.
local function failed(r)
  if type(r) ~= 'table' or not r.err then return false end
  local code = string.match(r.err, '^%u+')
  if code == 'MISCONF' or code == 'OOM' or code == 'READONLY' or code == 'NOREPLICAS' or code == 'MASTERDOWN' then error(r) end
  return true
end

-- The watermark of each Kafka partition in the batch, read once, with
-- the topic id it belongs to.
local parts, wm, order = {}, {}, {}
local relog, changed = {}, {}
for _, it in ipairs(items) do
  local kp = it.kp
  if not parts[kp] and it.off ~= -1 then parts[kp] = true; order[#order+1] = kp end
end
for r = 1, nruns do
  local kp = runs[r].kp
  if not parts[kp] then parts[kp] = true; order[#order+1] = kp end
end
if #order > 0 then
  local fields = {}
  for j, kp in ipairs(order) do fields[2*j-1], fields[2*j] = kp, kp .. ':topic_id' end
  local got = redis.call('HMGET', wm_key, unpack(fields))
  for j, kp in ipairs(order) do
    local w, id = tonumber(got[2*j-1] or '-1'), got[2*j]
    if topicID ~= '' and id ~= topicID then
      if id then
        -- Another log: the topic was deleted and created again. Its
        -- offsets say nothing about this one; a rerun, never a drop.
        changed[#changed+1], changed[#changed+2], changed[#changed+3] = kp, id, w
        w = -1
      end
      relog[kp] = true
    end
    wm[kp] = w
  end
end
local codes = {}
local high, refusedAt = {}, {}
-- A refused record keeps the watermark below it: a relay that dies before
-- it has produced the record again (requeue) must find it unapplied on
-- replay. The applied records after it may then apply twice; refusals
-- come only from keys of the wrong type.
local function refuse(i)
  codes[i] = 3
  local kp, off = items[i].kp, items[i].off
  if off >= 0 and (refusedAt[kp] == nil or off < refusedAt[kp]) then refusedAt[kp] = off end
end

-- A cancelled group takes no more jobs: they are counted, not written.
local cancelled = {}
for _, l in ipairs(lanes) do
  cancelled[l.i] = l.group ~= '' and redis.pcall('HEXISTS', l.meta, 'cancelled_ms') == 1
end

local per, funnel = {}, {}
local relayed, deduped, readied = 0, 0, 0
local function lane(l)
  local c = {jobs = {}, runs = {}, ready = {}, delayed = {}, weight = 1, total = 0, dropped = {}, nj = 0, nr = 0}
  per[l] = c
  return c
end
-- The loop runs once per job: it reads only the fields a job uses (a plain
-- job's due time, record, total and callback are '0', '0', '0' and ''),
-- and appends by counters (Lua's # is a search).
for i = 1, n do
  local it = items[i]
  local kp, off = it.kp, it.off
  if off >= 0 and off <= wm[kp] then
    -- Applied before: a replay after a failover or a retried batch.
    codes[i] = 0
    deduped = deduped + 1
    funnelAdd(funnel, funnelField(lanes[it.lane].group, topic, 'deduplicated'), 1)
  else
    if off >= 0 and (high[kp] or -1) < off then high[kp] = off end
    local li, entry = it.lane, it.entry
    if entry == '' then
      local c = per[li] or lane(li)
      c.close, c.total = true, tonumber(it.total)
      if it.callback ~= '' then c.callback = it.callback end
      codes[i] = 5
    elseif cancelled[li] then
      local c = per[li] or lane(li)
      c.dropped[#c.dropped+1] = entry
      codes[i] = 4
    else
      local fresh = 1
      if it.rec > 0 then
        -- A client-chosen id: its resends are new Kafka records, deduped
        -- by the id's record for the TTL.
        local rk = records[it.rec]
        fresh = redis.pcall('HSETNX', rk, 'relayed_ms', now)
        if not failed(fresh) and fresh == 1 then redis.call('EXPIRE', rk, ttl) end
      end
      if failed(fresh) then
        refuse(i)
      elseif fresh == 0 then
        codes[i] = 0
        deduped = deduped + 1
        funnelAdd(funnel, funnelField(lanes[li].group, topic, 'deduplicated'), 1)
      else
        local c = per[li] or lane(li)
        local nj = c.nj + 1
        c.nj, c.jobs[nj] = nj, i
        if it.total ~= '0' then
          local total = tonumber(it.total)
          if total > 0 then c.total = total end
        end
        if it.callback ~= '' then c.callback = it.callback end
        local due = it.due
        if due ~= '0' and tonumber(due) > nowN then
          c.delayed[#c.delayed+1] = tonumber(due)
          c.delayed[#c.delayed+1] = entry
          codes[i] = 2
        else
          local nr = c.nr + 1
          c.nr, c.ready[nr] = nr, entry
          codes[i] = 1
        end
        relayed = relayed + 1
      end
    end
  end
end

-- Runs: the jobs at or below the watermark are a prefix (offsets rise
-- within a run); the rest go to their lane whole.
local runSkip, runCode, runFrom = {}, {}, {}
for r = 1, nruns do
  local run = runs[r]
  local kp, first, last, li, cnt = run.kp, run.first, run.last, run.lane, run.count
  local w, skip, from = wm[kp], 0, first
  if last <= w then
    skip = cnt
  elseif first <= w then
    for o in string.gmatch(run.offsets, '%d+') do
      from = tonumber(o)
      if from > w then break end
      skip = skip + 1
    end
  end
  runSkip[r], runCode[r], runFrom[r] = skip, 0, from
  if skip > 0 then
    deduped = deduped + skip
    funnelAdd(funnel, funnelField(lanes[li].group, topic, 'deduplicated'), skip)
  end
  if skip < cnt then
    if (high[kp] or -1) < last then high[kp] = last end
    local c = per[li] or lane(li)
    if cancelled[li] then
      for k = run.from + skip, run.to do c.dropped[#c.dropped+1] = ARGV[k] end
      runCode[r] = 4
    else
      c.runs[#c.runs+1] = r
      c.nj = c.nj + cnt - skip
      local ready, nr = c.ready, c.nr
      for k = run.from + skip, run.to do nr = nr + 1; ready[nr] = ARGV[k] end
      c.nr = nr
      relayed = relayed + cnt - skip
      runCode[r] = 1
    end
  end
end

-- Lanes: one RPUSH each; a group lane's counters, a handful of commands
-- per group and batch. If Redis refuses one (a key of the wrong type),
-- that lane's jobs of this call are undone and refused, and the others go
-- on.
local cache = {}
for li, c in pairs(per) do
  local l = lanes[li]
  local ok = true
  if #c.ready > 0 and failed(redis.pcall('RPUSH', l.list, unpack(c.ready))) then ok = false end
  local count = 0
  if ok and l.group ~= '' then
    count = redis.pcall('HINCRBY', l.meta, 'relayed', c.nj)
    if failed(count) then
      redis.call('LTRIM', l.list, 0, -#c.ready - 1)
      ok = false
    end
  end
  if not ok then
    for _, i in ipairs(c.jobs) do
      local rec = items[i].rec
      if rec > 0 then redis.call('DEL', records[rec]) end
      refuse(i)
    end
    for _, r in ipairs(c.runs) do
      runCode[r] = 3
      local kp = runs[r].kp
      if refusedAt[kp] == nil or runFrom[r] < refusedAt[kp] then refusedAt[kp] = runFrom[r] end
    end
    relayed = relayed - c.nj
  else
    funnelAdd(funnel, funnelField(l.group, topic, 'relayed'), c.nj)
    funnelAdd(funnel, funnelField(l.group, topic, 'dropped'), #c.dropped)
    if l.group ~= '' then
      -- HINCRBY's answer says whether the group is new.
      local fresh = (count == c.nj)
      if fresh then
        redis.call('HSET', l.meta, 'first_ms', now, 'topic', topic)
      elseif c.nj > 0 then
        -- It may have been idle, set to expire with its results.
        redis.call('PERSIST', l.meta)
        redis.call('PERSIST', l.results)
      end
      if c.total > 0 then redis.call('HSET', l.meta, 'total', c.total) end
      if #c.dropped > 0 then
        redis.call('HINCRBY', l.meta, 'cancelled', #c.dropped)
        local res = {}
        for _, e in ipairs(c.dropped) do
          local _, id = entryHead(e)
          if id then res[#res+1] = id; res[#res+1] = 'cancelled 0 ' end
        end
        if #res > 0 then redis.call('HSET', l.results, unpack(res)) end
      end
      -- Weight 1 is the default; read the stored one only to raise it.
      if l.weight > 1 and (fresh or l.weight > tonumber(redis.call('HGET', l.meta, 'weight') or '1')) then
        redis.call('HSET', l.meta, 'weight', l.weight)
      end
      if #c.delayed > 0 then redis.call('HINCRBY', l.meta, 'delayed', #c.delayed / 2) end
      if c.close then redis.call('HSET', l.meta, 'closed_ms', now) end
      if c.callback then redis.call('HSET', l.meta, 'callback_url', c.callback) end
      if c.close or #c.dropped > 0 then
        -- Its jobs may all have ended before the total arrived.
        groupEnded(l.meta, l.results, l.group, completed_key, now, 86400)
      end
    end
    if #c.delayed > 0 then redis.call('ZADD', delayed_key, unpack(c.delayed)) end
    if #c.ready > 0 then activate(l, lanes_key, vt_key, shared_key, cache) end
    readied = readied + #c.ready
  end
end
local marks, moved = {}, {}
for kp, off in pairs(high) do
  if refusedAt[kp] then off = math.min(off, refusedAt[kp] - 1) end
  if off > wm[kp] then marks[#marks+1] = kp; marks[#marks+1] = off; moved[kp] = true end
end
for kp in pairs(relog) do
  marks[#marks+1] = kp .. ':topic_id'; marks[#marks+1] = topicID
  -- A changed log's old offset must go even if nothing was applied.
  if not moved[kp] then marks[#marks+1] = kp; marks[#marks+1] = wm[kp] end
end
if #marks > 0 then redis.call('HSET', wm_key, unpack(marks)) end
if #changed > 0 then redis.call('HINCRBY', stats_key, 'wm_log_changed', #changed / 3) end
if relayed > 0 then redis.call('HINCRBY', stats_key, 'relayed', relayed) end
if deduped > 0 then redis.call('HINCRBY', stats_key, 'deduped', deduped) end
if readied > 0 then redis.call('HINCRBY', stats_key, 'ready', readied) end
funnelFlush(stats_key, funnel)
if readied > 0 then
  -- One token is enough: a consumer that finds more work than it can take
  -- wakes the next one. The token is the fair order's head (a JSON
  -- array), which the woken consumer's claim takes as its candidates
  -- (Pool.Woken) instead of reading the order first.
  redis.call('RPUSH', wake_key, cjson.encode(redis.call('ZRANGE', lanes_key, 0, wakeHead - 1)))
  redis.call('LTRIM', wake_key, -1, -1)
end
for r = 1, nruns do
  codes[n+2*r-1], codes[n+2*r] = runSkip[r], runCode[r]
end
for j = 1, #changed do codes[n+2*nruns+j] = changed[j] end
return codes
`)

// maxScriptBatch bounds the jobs per script call: Lua's unpack takes a few
// thousand values at most, and a long script blocks Redis for everyone.
const maxScriptBatch = 256

// Enqueue writes items into their partitions with one script call each,
// pipelined per Redis server, servers in parallel. token is the writer's
// lock token (see Keys.Fence).
//
// The error is for the batch as a whole: Redis unreachable or unable to
// serve (Transient); retry the batch later, which is safe because every
// item is deduped by its Kafka position (or its client-chosen id). Otherwise each item has its result; an item Redis
// refused for a reason of its own is Failed with the reason.
func (p *Pool) Enqueue(ctx context.Context, token uint64, items []Item, now time.Time) ([]Result, error) {
	return p.EnqueueReporting(ctx, token, items, now, nil)
}

// EnqueueReporting is Enqueue that also calls changed (if not nil) for
// every Kafka partition whose watermark in a queue partition belonged to
// another topic id than its items' (watermark.go). changed may be called
// from several goroutines at once.
func (p *Pool) EnqueueReporting(ctx context.Context, token uint64, items []Item, now time.Time, changed func(LogChange)) ([]Result, error) {
	results := make([]Result, len(items))
	byClient := map[redis.UniversalClient][]int{}
	valid := "" // the last topic checked: a batch is mostly one topic's
	for i := range items {
		if t := items[i].Topic; t != valid {
			if err := ValidTopic(t); err != nil {
				results[i] = Result{Outcome: Failed, Err: err}
				continue
			}
			valid = t
		}
		c := p.byPart[p.keyspace.QueueOf(items[i].Topic, items[i].Group, items[i].ID).Part]
		byClient[c] = append(byClient[c], i)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for c, idx := range byClient {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.enqueueOn(ctx, c, token, items, idx, results, now, changed); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return results, nil
}

// call is one script call: a batch of items of one queue partition and
// one topic id.
type call struct {
	q       Queue
	topicID string
	items   []int // indexes into the caller's items
}

func (p *Pool) enqueueOn(ctx context.Context, c redis.UniversalClient, token uint64, items []Item, idx []int, results []Result, now time.Time, changed func(LogChange)) error {
	tok := strconv.FormatUint(token, 10)
	var calls []call
	// A batch is one topic id's: the key keeps a caller that mixes them
	// from comparing the watermark with the wrong one.
	type callKey struct {
		q       Queue
		topicID string
	}
	byKey := map[callKey][]int{}
	var keys []callKey
	for _, i := range idx {
		k := callKey{p.keyspace.QueueOf(items[i].Topic, items[i].Group, items[i].ID), items[i].TopicID}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	for _, k := range keys {
		list := byKey[k]
		for len(list) > 0 {
			n := min(len(list), maxScriptBatch)
			calls = append(calls, call{q: k.q, topicID: k.topicID, items: list[:n]})
			list = list[n:]
		}
	}
	for attempt := 0; len(calls) > 0; attempt++ {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(calls))
		lays := make([]enqueueLayout, len(calls))
		for k, cl := range calls {
			a := p.newEnqueueArgs(cl, items, tok, now)
			cmds[k], lays[k] = enqueueScript.queueIn(ctx, pipe, a.keys(), a.argv()...), a.lay
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		var again []call
		for k, cmd := range cmds {
			cl := calls[k]
			err := cmd.Err()
			switch {
			case isNoScript(err):
				again = append(again, cl)
				continue
			case Transient(err):
				return fmt.Errorf("enqueue on %s: %w", p.serverOf(c), err)
			case err != nil:
				for _, i := range cl.items {
					results[i] = Result{Outcome: Failed, Err: err}
				}
				continue
			}
			if code, isInt := cmd.Val().(int64); isInt && code == -1 {
				for _, i := range cl.items {
					results[i] = Result{Outcome: Fenced}
				}
				continue
			}
			lay := lays[k]
			codes, changes, err := enqueueCodes(cmd.Val(), len(lay.single)+2*len(lay.runs))
			if err != nil {
				err = fmt.Errorf("enqueue script for %d items and %d runs: %w", len(lay.single), len(lay.runs), err)
				for _, i := range cl.items {
					results[i] = Result{Outcome: Failed, Err: err}
				}
				continue
			}
			if changed != nil {
				for _, ch := range changes {
					ch.Queue, ch.NewTopicID = cl.q, cl.topicID
					changed(ch)
				}
			}
			for s, j := range lay.single {
				i := cl.items[j]
				results[i] = enqueueResult(codes[s], &items[i])
			}
			for r, run := range lay.runs {
				skip, code := codes[len(lay.single)+2*r], codes[len(lay.single)+2*r+1]
				for k, j := range run {
					i := cl.items[j]
					if int64(k) < skip {
						results[i] = Result{Outcome: Duplicate}
					} else {
						results[i] = enqueueResult(code, &items[i])
					}
				}
			}
		}
		if len(again) == 0 {
			return nil
		}
		// Redis lost its script cache (a restart): load the script and
		// run the calls that missed it again.
		calls = again
		if attempt > 0 {
			return fmt.Errorf("enqueue on %s: script still missing after loading it", p.serverOf(c))
		}
		if err := enqueueScript.load(ctx, c); err != nil {
			return fmt.Errorf("enqueue on %s: %w", p.serverOf(c), err)
		}
	}
	return nil
}

// enqueueResult is the outcome the enqueue script's code says.
func enqueueResult(code int64, it *Item) Result {
	switch code {
	case 1:
		return Result{Outcome: Queued}
	case 2:
		return Result{Outcome: Delayed}
	case 0:
		return Result{Outcome: Duplicate}
	case 4:
		return Result{Outcome: Dropped}
	case 5:
		return Result{Outcome: Closed}
	}
	return Result{Outcome: Failed, Err: fmt.Errorf("the keys of lane %q hold values of the wrong type", it.lane())}
}

// lane is the item's lane (see LaneOf).
func (it *Item) lane() string { return LaneOf(it.Group, it.Tenant, it.Topic, max(it.Weight, 1)-1) }

// enqueueArgs are one call of the enqueue script, laid out as:
//
//	KEYS[1]         fence:<topic>  string: newest lock token seen for the topic
//	KEYS[2]         stats          hash: partition counters; ready counts the
//	                               entries on the lanes in the fair order
//	KEYS[3]         lanes          zset: active lanes by virtual time
//	KEYS[4]         vt             string: the partition's virtual clock
//	KEYS[5]         delayed        zset: entries by due time
//	KEYS[6]         wake           list: wake-up token for idle consumers, the
//	                               fair order's first wakeHead lanes as a JSON array
//	KEYS[7]         completed      list: bulk groups whose jobs have all ended
//	KEYS[8]         wm:<topic>     hash: Kafka partition -> highest offset
//	                               applied, and <Kafka partition>:topic_id ->
//	                               the topic id that offset belongs to
//	KEYS[9]         shared         hash: shared lanes' virtual finish times
//	KEYS[10..9+3m]  per lane (m of them), 3 keys: list, meta, results
//	                (appendLaneKeys)
//	KEYS[10+3m..]   per record (client-chosen id), its job:<id>
//	ARGV[1]         token          the writer's lock token
//	ARGV[2]         now            Unix ms
//	ARGV[3]         topic          the queue's topic
//	ARGV[4]         n              single items
//	ARGV[5]         m              lanes
//	ARGV[6]         ttl            seconds a client-chosen id is deduped
//	ARGV[7]         nruns          runs
//	ARGV[8]         topic_id       the Kafka topic id of every positioned
//	                               item (empty: unknown)
//	ARGV[9..8+3m]   per lane, 3 fields: name, group, weight (appendLaneArgs)
//	then per single item (n), 8 fields: Kafka partition, offset (-1: none),
//	  lane index, due time Unix ms (0: now), record index (0: none), group
//	  total (0: unknown), callback URL (may be empty), entry; an empty entry
//	  closes its bulk group (the lane's) instead
//	then per run (nruns), 6 fields and its entries: Kafka partition, first
//	  offset, last offset, lane index, count c, the c offsets joined by
//	  commas (read only when the watermark falls inside the run), then the
//	  c entries
//
// A run is plain jobs (ready now, no record, total or callback) of one
// Kafka partition and one lane, in offset order (layOut): the common case,
// with no work per job in Lua but copying its entry. The script unpacks
// the slots into named locals and its items and runs into records at its
// top.
type enqueueArgs struct {
	k        Keys
	token    string
	nowMS    int64
	topic    string
	ttl      int64 // seconds
	topicID  string
	lanes    []LaneInfo
	items    []Item // the caller's
	call     []int  // the call's items, indexes into items
	itemLane []int  // the lane index of each of the call's items
	records  int    // single items with a client-chosen id
	lay      enqueueLayout
}

// newEnqueueArgs lays out one call: its lanes, plain jobs in runs, the
// others one by one (see enqueueLayout).
func (p *Pool) newEnqueueArgs(cl call, items []Item, tok string, now time.Time) enqueueArgs {
	a := enqueueArgs{k: p.keyspace.Keys(cl.q), token: tok, nowMS: now.UnixMilli(), topic: cl.q.Topic,
		ttl: max(int64(p.idDedupeTTL/time.Second), 1), topicID: cl.topicID, items: items, call: cl.items,
		itemLane: make([]int, len(cl.items))}
	laneIndex := map[string]int{}
	for j, i := range cl.items {
		name := items[i].lane()
		li, ok := laneIndex[name]
		if !ok {
			a.lanes = append(a.lanes, LaneInfo{Name: name, Group: items[i].Group, Weight: max(items[i].Weight, 1)})
			li = len(a.lanes)
			laneIndex[name] = li
		}
		if w := items[i].Weight; w > a.lanes[li-1].Weight {
			a.lanes[li-1].Weight = w
		}
		a.itemLane[j] = li
		if items[i].IDGiven && !items[i].Close {
			a.records++
		}
	}
	a.lay = layOut(cl.items, items, a.itemLane, a.nowMS)
	return a
}

func (a *enqueueArgs) keys() []string {
	ks := make([]string, 0, 9+3*len(a.lanes)+a.records)
	ks = append(ks, a.k.Fence(), a.k.Stats(), a.k.Lanes(), a.k.VirtualTime(), a.k.Delayed(), a.k.Wake(),
		a.k.Completed(), a.k.Watermark(), a.k.Shared())
	ks = a.k.appendLaneKeys(ks, a.lanes...)
	for _, j := range a.lay.single {
		if it := &a.items[a.call[j]]; it.IDGiven && !it.Close {
			ks = append(ks, a.k.Job(it.ID))
		}
	}
	return ks
}

func (a *enqueueArgs) argv() []any {
	n, m := len(a.lay.single), len(a.lanes)
	args := make([]any, 0, 8+3*m+8*n+6*len(a.lay.runs)+len(a.call)-n)
	args = append(args, a.token, strconv.FormatInt(a.nowMS, 10), a.topic, n, m, a.ttl, len(a.lay.runs), a.topicID)
	args = appendLaneArgs(args, a.lanes...)
	rec := 0
	for _, j := range a.lay.single {
		it := &a.items[a.call[j]]
		offset := it.Offset
		if !it.HasPosition {
			offset = -1
		}
		if it.Close {
			args = append(args, it.KafkaPartition, offset, a.itemLane[j], 0, 0, it.GroupTotal, it.CallbackURL, "")
			continue
		}
		due := int64(0)
		if !it.RunAt.IsZero() {
			due = it.RunAt.UnixMilli()
		}
		r := 0
		if it.IDGiven {
			rec++
			r = rec
		}
		args = append(args, it.KafkaPartition, offset, a.itemLane[j], due, r, it.GroupTotal, it.CallbackURL,
			Entry(0, it.ID, a.lanes[a.itemLane[j]-1].Name, it.Envelope))
	}
	var offsets []byte
	for _, run := range a.lay.runs {
		first, last := &a.items[a.call[run[0]]], &a.items[a.call[run[len(run)-1]]]
		offsets = offsets[:0]
		for k, j := range run {
			if k > 0 {
				offsets = append(offsets, ',')
			}
			offsets = strconv.AppendInt(offsets, a.items[a.call[j]].Offset, 10)
		}
		li := a.itemLane[run[0]]
		args = append(args, first.KafkaPartition, first.Offset, last.Offset, li, len(run), string(offsets))
		for _, j := range run {
			it := &a.items[a.call[j]]
			args = append(args, Entry(0, it.ID, a.lanes[li-1].Name, it.Envelope))
		}
	}
	return args
}

// enqueueLayout is how one call's items are laid out in the script's
// ARGV: single items (indexes into the call's items), then runs of plain
// jobs, each the indexes of its jobs in offset order.
type enqueueLayout struct {
	single []int
	runs   [][]int
}

// layOut puts the call's plain jobs (ready by nowMS, with a Kafka
// position, no record, total or callback) in runs of one Kafka partition
// and one lane, offsets rising; the rest are single items. The script
// does no work per job of a run but copying its entry, and the relay's
// jobs are nearly all plain.
func layOut(call []int, items []Item, itemLane []int, nowMS int64) enqueueLayout {
	var lay enqueueLayout
	type runKey struct {
		kp   int32
		lane int
	}
	open := map[runKey]int{} // the run each key appends to, an index into lay.runs
	for j, i := range call {
		it := &items[i]
		plain := !it.Close && !it.IDGiven && it.HasPosition && it.Offset >= 0 && it.GroupTotal == 0 && it.CallbackURL == "" &&
			(it.RunAt.IsZero() || it.RunAt.UnixMilli() <= nowMS)
		if !plain {
			lay.single = append(lay.single, j)
			continue
		}
		key := runKey{it.KafkaPartition, itemLane[j]}
		r, ok := open[key]
		if ok {
			run := lay.runs[r]
			if items[call[run[len(run)-1]]].Offset < it.Offset {
				lay.runs[r] = append(run, j)
				continue
			}
		}
		open[key] = len(lay.runs)
		lay.runs = append(lay.runs, []int{j})
	}
	return lay
}
