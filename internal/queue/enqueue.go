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
	// Weight is the group's fair-share weight: its priority class + 1.
	Weight int
	// RunAt delays the job; zero or past means ready now.
	RunAt time.Time
	// GroupTotal is the bulk group's size when the envelope states it.
	GroupTotal int64
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
)

func (o Outcome) String() string {
	return [...]string{"failed", "queued", "delayed", "duplicate", "fenced"}[o]
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
// KEYS[2] stats           hash: partition counters
// KEYS[3] groups          zset: active groups by virtual time
// KEYS[4] vt              string: the partition's virtual clock
// KEYS[5] delayed         zset: job ids by due time
// KEYS[5+i]               job:<id of job i>, i = 1..n
// KEYS[5+n+2g-1]          ready:<group g>, g = 1..m
// KEYS[5+n+2g]            group:<group g>
// ARGV[1] lock token   ARGV[2] now, Unix ms   ARGV[3] topic   ARGV[4] n   ARGV[5] m
// ARGV[5+g]               name of group g
// ARGV[5+m+6(i-1)+1..6]   job i: id, group index g, weight (>= 1), due time
// Unix ms (0: now), group total (0: unknown), envelope
// Returns -1 when fenced (nothing written), else n codes: 1 queued,
// 2 delayed, 0 duplicate (nothing written), 3 refused (the group's keys hold
// the wrong types; nothing written for it).
//
// The fence comes first: a deposed relay changes nothing, not even counters
// of its own. Dedupe by the job hash: it lives until the job's result
// expires, which outlasts any relay's redelivery window.
var enqueueScript = newScript(`
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
local usable = {}
for g = 1, m do
  local rt = redis.call('TYPE', KEYS[5+n+2*g-1]).ok
  local gt = redis.call('TYPE', KEYS[5+n+2*g]).ok
  usable[g] = (rt == 'list' or rt == 'none') and (gt == 'hash' or gt == 'none')
end
local codes, ready, per = {}, {}, {}
local relayed, deduped = 0, 0
for i = 1, n do
  local a = 5 + m + 6*(i-1)
  local id, g = ARGV[a+1], tonumber(ARGV[a+2])
  if not usable[g] then
    codes[i] = 3
  elseif redis.call('EXISTS', KEYS[5+i]) == 1 then
    codes[i] = 0
    deduped = deduped + 1
  else
    local c = per[g]
    if not c then c = {relayed = 0, ready = 0, delayed = 0, weight = 0, total = 0}; per[g] = c end
    c.relayed = c.relayed + 1
    local w, total, due = tonumber(ARGV[a+3]), tonumber(ARGV[a+5]), tonumber(ARGV[a+4])
    if w > c.weight then c.weight = w end
    if total > 0 then c.total = total end
    if due > nowN then
      redis.call('HSET', KEYS[5+i], 'env', ARGV[a+6], 'group', ARGV[5+g], 'state', 'delayed', 'relayed_ms', now)
      redis.call('ZADD', KEYS[5], due, id)
      c.delayed = c.delayed + 1
      codes[i] = 2
    else
      redis.call('HSET', KEYS[5+i], 'env', ARGV[a+6], 'group', ARGV[5+g], 'state', 'ready', 'relayed_ms', now)
      local ids = ready[g]
      if not ids then ids = {}; ready[g] = ids end
      ids[#ids+1] = id
      c.ready = c.ready + 1
      codes[i] = 1
    end
    relayed = relayed + 1
  end
end
local vt
for g, c in pairs(per) do
  local rk, gk = KEYS[5+n+2*g-1], KEYS[5+n+2*g]
  redis.call('HINCRBY', gk, 'relayed', c.relayed)
  if redis.call('HSETNX', gk, 'first_ms', now) == 1 then
    redis.call('HSET', gk, 'topic', ARGV[3])
  end
  if c.total > 0 then redis.call('HSET', gk, 'total', c.total) end
  if c.weight > tonumber(redis.call('HGET', gk, 'weight') or '0') then
    redis.call('HSET', gk, 'weight', c.weight)
  end
  if c.delayed > 0 then redis.call('HINCRBY', gk, 'delayed', c.delayed) end
  if c.ready > 0 then
    redis.call('RPUSH', rk, unpack(ready[g]))
    redis.call('HINCRBY', gk, 'ready', c.ready)
    if not redis.call('ZSCORE', KEYS[3], ARGV[5+g]) then
      -- A group becoming active starts at the partition's virtual clock,
      -- or where its own last service ended if later: no credit for idling.
      if not vt then vt = tonumber(redis.call('GET', KEYS[4]) or '0') end
      local vfinish = tonumber(redis.call('HGET', gk, 'vfinish') or '0')
      redis.call('ZADD', KEYS[3], math.max(vt, vfinish), ARGV[5+g])
    end
  end
end
if relayed > 0 then redis.call('HINCRBY', KEYS[2], 'relayed', relayed) end
if deduped > 0 then redis.call('HINCRBY', KEYS[2], 'deduped', deduped) end
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
	ks := make([]string, 0, 5+n+2*m)
	ks = append(ks, keys.Fence(topic), keys.Stats(), keys.Groups(), keys.VirtualTime(), keys.Delayed())
	for _, i := range cl.items {
		ks = append(ks, keys.Job(items[i].ID))
	}
	for _, g := range groups {
		ks = append(ks, keys.Ready(g), keys.Group(g))
	}
	args := make([]any, 0, 5+m+6*n)
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
		args = append(args, it.ID, groupIndex[it.Group], max(it.Weight, 1), due, it.GroupTotal, it.Envelope)
	}
	return ks, args
}
