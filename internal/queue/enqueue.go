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

// enqueueScript writes one job into its partition, fenced and idempotent.
//
// KEYS[1] job:<id>       hash: the job
// KEYS[2] ready:<group>  list: the group's ready job ids
// KEYS[3] group:<group>  hash: the group's counters, weight, virtual finish
// KEYS[4] groups         zset: active groups by virtual time
// KEYS[5] delayed        zset: job ids by due time
// KEYS[6] fence:<topic>  string: newest lock token seen for the topic
// KEYS[7] stats          hash: partition counters
// KEYS[8] vt             string: the partition's virtual clock
// ARGV[1] lock token     ARGV[2] envelope        ARGV[3] job id
// ARGV[4] group          ARGV[5] weight (>= 1)   ARGV[6] due time, Unix ms (0: now)
// ARGV[7] now, Unix ms   ARGV[8] group total (0: unknown)  ARGV[9] topic
// Returns 1 queued, 2 delayed, 0 duplicate (nothing written), -1 fenced
// (nothing written).
//
// The fence comes first: a deposed relay changes nothing, not even
// counters of its own. Dedupe by the job hash: it lives until the job's
// result expires, which outlasts any relay's redelivery window.
var enqueueScript = newScript(`
local token = tonumber(ARGV[1])
local fence = tonumber(redis.call('GET', KEYS[6]) or '0')
if token < fence then
  redis.call('HINCRBY', KEYS[7], 'fenced', 1)
  return -1
end
if token > fence then
  redis.call('SET', KEYS[6], ARGV[1])
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[7], 'deduped', 1)
  return 0
end
local due = tonumber(ARGV[6])
local now = tonumber(ARGV[7])
local weight = tonumber(ARGV[5])
local state = 'ready'
if due > now then state = 'delayed' end
redis.call('HSET', KEYS[1], 'env', ARGV[2], 'group', ARGV[4], 'topic', ARGV[9],
  'state', state, 'attempts', 0, 'relayed_ms', ARGV[7], 'weight', weight)
redis.call('HINCRBY', KEYS[3], 'relayed', 1)
if redis.call('HSETNX', KEYS[3], 'first_ms', ARGV[7]) == 1 then
  redis.call('HSET', KEYS[3], 'topic', ARGV[9])
end
if tonumber(ARGV[8]) > 0 then
  redis.call('HSET', KEYS[3], 'total', ARGV[8])
end
if weight > tonumber(redis.call('HGET', KEYS[3], 'weight') or '0') then
  redis.call('HSET', KEYS[3], 'weight', weight)
end
redis.call('HINCRBY', KEYS[7], 'relayed', 1)
if state == 'delayed' then
  redis.call('ZADD', KEYS[5], due, ARGV[3])
  redis.call('HINCRBY', KEYS[3], 'delayed', 1)
  return 2
end
redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('HINCRBY', KEYS[3], 'ready', 1)
if not redis.call('ZSCORE', KEYS[4], ARGV[4]) then
  -- A group becoming active starts at the partition's virtual clock, or
  -- where its own last service ended if that is later: no credit for idling.
  local vt = tonumber(redis.call('GET', KEYS[8]) or '0')
  local vfinish = tonumber(redis.call('HGET', KEYS[3], 'vfinish') or '0')
  redis.call('ZADD', KEYS[4], math.max(vt, vfinish), ARGV[4])
end
return 1
`)

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

func (p *Pool) enqueueOn(ctx context.Context, c *redis.Client, token uint64, items []Item, idx []int, results []Result, now time.Time) error {
	nowMS := strconv.FormatInt(now.UnixMilli(), 10)
	tok := strconv.FormatUint(token, 10)
	for attempt := 0; len(idx) > 0; attempt++ {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(idx))
		for k, i := range idx {
			it := &items[i]
			keys := p.layout.Keys(p.layout.PartitionOf(it.Group))
			due := int64(0)
			if !it.RunAt.IsZero() {
				due = it.RunAt.UnixMilli()
			}
			cmds[k] = enqueueScript.EvalSha(ctx, pipe, []string{
				keys.Job(it.ID), keys.Ready(it.Group), keys.Group(it.Group), keys.Groups(),
				keys.Delayed(), keys.Fence(it.Topic), keys.Stats(), keys.VirtualTime(),
			}, tok, it.Envelope, it.ID, it.Group, max(it.Weight, 1), due, nowMS, it.GroupTotal, it.Topic)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		var again []int
		for k, cmd := range cmds {
			err := cmd.Err()
			switch {
			case err == nil:
			case isNoScript(err):
				again = append(again, idx[k])
				continue
			case Transient(err):
				return fmt.Errorf("enqueue on %s: %w", c.Options().Addr, err)
			default:
				results[idx[k]] = Result{Outcome: Failed, Err: err}
				continue
			}
			code, _ := cmd.Int64()
			switch code {
			case 1:
				results[idx[k]] = Result{Outcome: Queued}
			case 2:
				results[idx[k]] = Result{Outcome: Delayed}
			case 0:
				results[idx[k]] = Result{Outcome: Duplicate}
			case -1:
				results[idx[k]] = Result{Outcome: Fenced}
			default:
				results[idx[k]] = Result{Outcome: Failed, Err: fmt.Errorf("enqueue script returned %d", code)}
			}
		}
		if len(again) == 0 {
			return nil
		}
		// Redis lost its script cache (a restart): load the script and
		// run the items that missed it again.
		idx = again
		if attempt > 0 {
			return fmt.Errorf("enqueue on %s: script still missing after loading it", c.Options().Addr)
		}
		if err := enqueueScript.Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("enqueue on %s: reloading the script: %w", c.Options().Addr, err)
		}
	}
	return nil
}
