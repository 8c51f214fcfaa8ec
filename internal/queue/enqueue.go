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
// idempotent. One call per batch, not per job: Redis runs scripts on one
// core, and per-call and per-group work amortised over a batch is what
// lets a relay approach Redis's limit.
//
// KEYS[1] fence:<topic>   string: newest lock token seen for the topic
// KEYS[2] stats           hash: partition counters; its ready field counts
// the ids on the ready lists of active groups (luaReadyCounter)
// KEYS[3] groups          zset: active groups by virtual time
// KEYS[4] vt              string: the partition's virtual clock
// KEYS[5] delayed         zset: job ids by due time
// KEYS[6] wake            list: wake-up token for idle consumers
// KEYS[7] completed       list: bulk groups whose jobs have all ended
// KEYS[7+i]               job:<id of item i>, i = 1..n (a close item's is unused)
// KEYS[7+n+2g-1]          ready:<group g>, g = 1..m
// KEYS[7+n+2g]            group:<group g>
// ARGV[1] lock token   ARGV[2] now, Unix ms   ARGV[3] topic   ARGV[4] n   ARGV[5] m
// ARGV[5+g]               name of group g
// ARGV[5+m+7(i-1)+1..7]   item i: id, group index g, weight (>= 1), due time
// Unix ms (0: now), group total (0: unknown), callback URL (may be empty),
// envelope. An item with an empty id closes its bulk group instead: its
// total is the group's size (its envelope is unused).
// Returns -1 when fenced (nothing written), else n codes: 1 queued,
// 2 delayed, 0 duplicate (nothing written), 3 refused (a key of the job or
// its group holds the wrong type; nothing left written for it), 4 dropped
// (its group was cancelled), 5 closed (a close item, recorded).
//
// The stage funnel's fields of ARGV[3] (funnel.go) count relayed,
// deduplicated and dropped jobs, per batch.
//
// The fence comes first: a deposed relay changes nothing, not even counters
// of its own. Dedupe by the job hash: it lives until the job's result
// expires, which outlasts any relay's redelivery window.
var enqueueScript = newScript(luaGroupEnded + luaFunnel + `
local token = tonumber(ARGV[1])
local fence = tonumber(redis.call('GET', KEYS[1]) or '0')
if token < fence then
  redis.call('HINCRBY', KEYS[2], 'fenced', ARGV[4])
  return -1
end
if token > fence then
  redis.call('SET', KEYS[1], ARGV[1])
end
local now, n, m = ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])
local nowN = tonumber(now)
local function failed(r) return type(r) == 'table' and r.err end

-- A cancelled group takes no more jobs: they are counted, not written.
local cancelled = {}
for g = 1, m do
  cancelled[g] = redis.pcall('HEXISTS', KEYS[7+n+2*g], 'cancelled_ms') == 1
end

-- Jobs: dedupe and write in one command each. The env field exists for as
-- long as the job's hash does.
local codes, per, funnel = {}, {}, {}
local relayed, deduped, readied = 0, 0, 0
local function group(g)
  local c = per[g]
  if not c then c = {jobs = {}, ready = {}, delayed = {}, weight = 1, total = 0, dropped = 0}; per[g] = c end
  return c
end
for i = 1, n do
  local a = 5 + m + 7*(i-1)
  local g = tonumber(ARGV[a+2])
  if ARGV[a+1] == '' then
    local c = group(g)
    c.close, c.total = true, tonumber(ARGV[a+5])
    if ARGV[a+6] ~= '' then c.callback = ARGV[a+6] end
    codes[i] = 5
  elseif cancelled[g] then
    local c = group(g)
    c.dropped = c.dropped + 1
    codes[i] = 4
  else
    local r = redis.pcall('HSETNX', KEYS[7+i], 'env', ARGV[a+7])
    if failed(r) then
      codes[i] = 3
    elseif r == 0 then
      codes[i] = 0
      deduped = deduped + 1
      funnelAdd(funnel, funnelField(ARGV[5+g], ARGV[3], 'deduplicated'), 1)
    else
      local c = group(g)
      c.jobs[#c.jobs+1] = i
      local w, total, due = tonumber(ARGV[a+3]), tonumber(ARGV[a+5]), tonumber(ARGV[a+4])
      if w > c.weight then c.weight = w end
      if total > 0 then c.total = total end
      if ARGV[a+6] ~= '' then c.callback = ARGV[a+6] end
      if due > nowN then
        c.delayed[#c.delayed+1] = due
        c.delayed[#c.delayed+1] = ARGV[a+1]
        codes[i] = 2
      else
        c.ready[#c.ready+1] = ARGV[a+1]
        codes[i] = 1
      end
      relayed = relayed + 1
    end
  end
end

-- Groups: a handful of commands per group and batch. If Redis refuses one
-- (a key of the wrong type), that group's jobs of this call are undone and
-- refused, and the others go on.
local vt
local activate = {} -- groups entering the fair order: one ZADD for all
for g, c in pairs(per) do
  local rk, gk, name = KEYS[7+n+2*g-1], KEYS[7+n+2*g], ARGV[5+g]
  local count = redis.pcall('HINCRBY', gk, 'relayed', #c.jobs)
  local ok = not failed(count)
  if ok and #c.ready > 0 and failed(redis.pcall('RPUSH', rk, unpack(c.ready))) then
    redis.call('HINCRBY', gk, 'relayed', -#c.jobs)
    ok = false
  end
  if not ok then
    for _, i in ipairs(c.jobs) do
      redis.call('DEL', KEYS[7+i])
      codes[i] = 3
    end
    relayed = relayed - #c.jobs
  else
    -- HINCRBY's answer says whether the group is new.
    local fresh = (count == #c.jobs)
    if fresh then
      redis.call('HSET', gk, 'first_ms', now, 'topic', ARGV[3])
    elseif #c.jobs > 0 then
      redis.call('PERSIST', gk) -- it may have been idle, set to expire
    end
    if c.total > 0 then redis.call('HSET', gk, 'total', c.total) end
    if c.dropped > 0 then redis.call('HINCRBY', gk, 'cancelled', c.dropped) end
    funnelAdd(funnel, funnelField(name, ARGV[3], 'relayed'), #c.jobs)
    funnelAdd(funnel, funnelField(name, ARGV[3], 'dropped'), c.dropped)
    -- Weight 1 is the default; read the stored one only to raise it.
    if c.weight > 1 and (fresh or c.weight > tonumber(redis.call('HGET', gk, 'weight') or '1')) then
      redis.call('HSET', gk, 'weight', c.weight)
    end
    if #c.delayed > 0 then
      redis.call('ZADD', KEYS[5], unpack(c.delayed))
      redis.call('HINCRBY', gk, 'delayed', #c.delayed / 2)
    end
    if #c.ready > 0 and (fresh or not redis.call('ZSCORE', KEYS[3], name)) then
      -- A group becoming active starts at the partition's virtual clock,
      -- or where its own last service ended if later: no credit for idling.
      if not vt then vt = tonumber(redis.call('GET', KEYS[4]) or '0') end
      local start = vt
      if not fresh then start = math.max(vt, tonumber(redis.call('HGET', gk, 'vfinish') or '0')) end
      activate[#activate+1] = start
      activate[#activate+1] = name
    end
    readied = readied + #c.ready
    if c.close then redis.call('HSET', gk, 'closed_ms', now) end
    if c.callback then redis.call('HSET', gk, 'callback_url', c.callback) end
    if c.close or c.dropped > 0 then
      -- Its jobs may all have ended before the total arrived.
      groupEnded(gk, name, KEYS[7], now, 86400)
    end
  end
end
if #activate > 0 then redis.call('ZADD', KEYS[3], unpack(activate)) end
if relayed > 0 then redis.call('HINCRBY', KEYS[2], 'relayed', relayed) end
if deduped > 0 then redis.call('HINCRBY', KEYS[2], 'deduped', deduped) end
if readied > 0 then redis.call('HINCRBY', KEYS[2], 'ready', readied) end
funnelFlush(KEYS[2], funnel)
if readied > 0 then
  -- One token is enough: a consumer that finds more work than it can take
  -- wakes the next one.
  redis.call('RPUSH', KEYS[6], 1)
  redis.call('LTRIM', KEYS[6], -1, -1)
end
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
// item is deduped by id. Otherwise each item has its result; an item Redis
// refused for a reason of its own is Failed with the reason.
func (p *Pool) Enqueue(ctx context.Context, token uint64, items []Item, now time.Time) ([]Result, error) {
	results := make([]Result, len(items))
	byClient := map[*redis.Client][]int{}
	for i := range items {
		c := p.byPart[p.layout.PartitionOf(items[i].Group)]
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
			if err := p.enqueueOn(ctx, c, token, items, idx, results, now); err != nil {
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

// call is one script call: a batch of items of one partition.
type call struct {
	part  int
	items []int // indexes into the caller's items
}

func (p *Pool) enqueueOn(ctx context.Context, c *redis.Client, token uint64, items []Item, idx []int, results []Result, now time.Time) error {
	nowMS := strconv.FormatInt(now.UnixMilli(), 10)
	tok := strconv.FormatUint(token, 10)
	var calls []call
	byPart := map[int][]int{}
	for _, i := range idx {
		part := p.layout.PartitionOf(items[i].Group)
		byPart[part] = append(byPart[part], i)
	}
	for part, list := range byPart {
		for len(list) > 0 {
			k := min(len(list), maxScriptBatch)
			calls = append(calls, call{part: part, items: list[:k]})
			list = list[k:]
		}
	}
	for attempt := 0; len(calls) > 0; attempt++ {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(calls))
		for k, cl := range calls {
			keys, args := p.enqueueArgs(cl, items, tok, nowMS)
			cmds[k] = enqueueScript.EvalSha(ctx, pipe, keys, args...)
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
				return fmt.Errorf("enqueue on %s: %w", c.Options().Addr, err)
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
			codes, _ := cmd.Int64Slice()
			for j, i := range cl.items {
				switch {
				case j >= len(codes):
					results[i] = Result{Outcome: Failed, Err: fmt.Errorf("enqueue script returned %d codes for %d jobs", len(codes), len(cl.items))}
				case codes[j] == 1:
					results[i] = Result{Outcome: Queued}
				case codes[j] == 2:
					results[i] = Result{Outcome: Delayed}
				case codes[j] == 0:
					results[i] = Result{Outcome: Duplicate}
				case codes[j] == 4:
					results[i] = Result{Outcome: Dropped}
				case codes[j] == 5:
					results[i] = Result{Outcome: Closed}
				default:
					results[i] = Result{Outcome: Failed, Err: fmt.Errorf("the keys of group %q hold values of the wrong type", items[i].Group)}
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
			return fmt.Errorf("enqueue on %s: script still missing after loading it", c.Options().Addr)
		}
		if err := enqueueScript.Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("enqueue on %s: reloading the script: %w", c.Options().Addr, err)
		}
	}
	return nil
}

// enqueueArgs lays out one call's KEYS and ARGV as enqueueScript documents.
func (p *Pool) enqueueArgs(cl call, items []Item, tok, nowMS string) ([]string, []any) {
	keys := p.layout.Keys(cl.part)
	groupIndex := map[string]int{}
	var groups []string
	for _, i := range cl.items {
		if _, ok := groupIndex[items[i].Group]; !ok {
			groups = append(groups, items[i].Group)
			groupIndex[items[i].Group] = len(groups)
		}
	}
	n, m := len(cl.items), len(groups)
	topic := items[cl.items[0]].Topic
	ks := make([]string, 0, 7+n+2*m)
	ks = append(ks, keys.Fence(topic), keys.Stats(), keys.Groups(), keys.VirtualTime(), keys.Delayed(), keys.Wake(), keys.Completed())
	for _, i := range cl.items {
		ks = append(ks, keys.Job(items[i].ID)) // a close item's is unused
	}
	for _, g := range groups {
		ks = append(ks, keys.Ready(g), keys.Group(g))
	}
	args := make([]any, 0, 5+m+7*n)
	args = append(args, tok, nowMS, topic, n, m)
	for _, g := range groups {
		args = append(args, g)
	}
	for _, i := range cl.items {
		it := &items[i]
		due := int64(0)
		if !it.RunAt.IsZero() {
			due = it.RunAt.UnixMilli()
		}
		if it.Close {
			args = append(args, "", groupIndex[it.Group], 1, 0, it.GroupTotal, it.CallbackURL, "")
			continue
		}
		args = append(args, it.ID, groupIndex[it.Group], max(it.Weight, 1), due, it.GroupTotal, it.CallbackURL, it.Envelope)
	}
	return ks, args
}
