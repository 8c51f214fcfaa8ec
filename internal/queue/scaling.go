package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxWorkers bounds a consumer's pool size: what the coordinator commands
// and pins, and what a worker accepts (a typo must not start a million
// goroutines).
const MaxWorkers = 10000

// Command types the coordinator puts on a partition's cmd list.
const (
	ScaleUp   = "SCALE_UP"
	ScaleDown = "SCALE_DOWN"
)

// Command is a coordinator command on a partition's cmd list:
// {"type":"SCALE_UP","partition":2,"targetWorkers":24,"reason":"..."}.
// TargetWorkers is the pool size of every consumer of the partition.
type Command struct {
	Type          string `json:"type"`
	Partition     int    `json:"partition"`
	TargetWorkers int    `json:"targetWorkers"`
	Reason        string `json:"reason"`
}

// PushCommand appends c to its partition's cmd list. A consumer blocked on
// the list applies it at once; a busy one within a maintenance tick.
func (p *Pool) PushCommand(ctx context.Context, c Command) error {
	if c.Partition < 0 || c.Partition >= p.keyspace.Partitions {
		return fmt.Errorf("command for partition %d: out of range 0..%d", c.Partition, p.keyspace.Partitions-1)
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return p.byPart[c.Partition].RPush(ctx, p.keyspace.PartKeys(c.Partition).Cmd(), raw).Err()
}

// heartbeatScript records a consumer's heartbeat, stamped with Redis's
// clock (so that workers' clocks need not agree with the coordinator's),
// and reads the partition's checkpointed worker count.
//
// KEYS[1] consumers  hash: consumer id -> "<workers>:<unix ms>:<busy ms>"
// KEYS[2] workers    string: the partition's checkpointed worker count
// ARGV[1] consumer id   ARGV[2] its pool size   ARGV[3] its busy time, ms
// Returns the checkpointed count, or "" when there is none.
var heartbeatScript = newScript("heartbeat", `
local t = redis.call('TIME')
local ms = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ms .. ':' .. ARGV[3])
return redis.call('GET', KEYS[2]) or ''
`)

// Heartbeat publishes a consumer's pool size and busy time (the sum over
// its slots of the time each held a job, since the consumer started) and
// returns the partition's checkpointed worker count (0: none), which every
// consumer of the partition follows.
func (p *Pool) Heartbeat(ctx context.Context, part int, consumer string, workers int, busy time.Duration) (checkpoint int, err error) {
	k := p.keyspace.PartKeys(part)
	res, err := heartbeatScript.run(ctx, p.byPart[part], []string{k.Consumers(), k.WorkerCount()},
		consumer, workers, busy.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("heartbeat on partition %d: %w", part, err)
	}
	s, _ := res.(string)
	n, _ := strconv.Atoi(s)
	return n, nil
}

// StopWaiting ends consumer's idle BLPOP on partition part, which also
// waits on its Stop list: a token pushed there, kept a few seconds should
// the consumer have stopped waiting already (its next wait takes it and
// returns at once, which a stopping consumer does not mind).
func (p *Pool) StopWaiting(ctx context.Context, part int, consumer string) error {
	key := p.keyspace.PartKeys(part).Stop(consumer)
	pipe := p.byPart[part].TxPipeline()
	pipe.RPush(ctx, key, 1)
	pipe.Expire(ctx, key, 5*time.Second)
	_, err := pipe.Exec(ctx)
	return err
}

// Leave removes a stopping consumer's heartbeat: its workers no longer
// count.
func (p *Pool) Leave(ctx context.Context, part int, consumer string) error {
	return p.byPart[part].HDel(ctx, p.keyspace.PartKeys(part).Consumers(), consumer).Err()
}

// loadScript reads what the coordinator's scaler needs of a partition
// beside its queues' ready depths, in one round trip: Redis's clock, the
// checkpointed worker count and the consumers' heartbeats. Heartbeats
// older than ARGV[1] are removed (their consumers died without leaving).
//
// KEYS[1] consumers  KEYS[2] workers
// ARGV[1] forget heartbeats older than this many ms
// Returns {now (Unix ms), checkpoint or "", id 1, heartbeat 1, ...}.
var loadScript = newScript("load", `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {now, redis.call('GET', KEYS[2]) or ''}
local all = redis.call('HGETALL', KEYS[1])
local forget = tonumber(ARGV[1])
for i = 1, #all, 2 do
  local at = tonumber(string.match(all[i+1], '^%d+:(%d+)') or '')
  if not at or now - at > forget then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out+1] = all[i]
    out[#out+1] = all[i+1]
  end
end
return out
`)

// readyScript reads a queue partition's ready depth (O(1): a counter, not
// a scan). When no lane is active the queue has no ready job, so a counter
// that drifted (say, jobs queued by a version without it) is set back to
// 0 there.
//
// KEYS[1] stats  KEYS[2] lanes
// Returns the ready depth.
var readyScript = newScript("ready", `
local ready = tonumber(redis.call('HGET', KEYS[1], 'ready') or '0')
if ready ~= 0 and redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[1], 'ready', 0)
  ready = 0
end
return ready
`)

// Beat is a consumer's last heartbeat.
type Beat struct {
	Workers int
	At      time.Time     // by Redis's clock
	Busy    time.Duration // its slots' busy time since it started
}

// PartitionLoad is what Load read of a partition.
type PartitionLoad struct {
	// Ready is the partition's ready depth over the topics read: jobs that
	// a consumer could claim now (not delayed, not in flight).
	Ready int64
	// Now is Redis's clock at the read, to age heartbeats by.
	Now time.Time
	// Checkpoint is the checkpointed worker count; 0: none.
	Checkpoint int
	// Consumers are the heartbeats younger than Load's forget.
	Consumers map[string]Beat
}

// Load reads partition part's ready depth summed over topics, its clock,
// checkpoint and heartbeats, one script call for the partition and one per
// topic, and forgets heartbeats older than forget.
func (p *Pool) Load(ctx context.Context, part int, topics []string, forget time.Duration) (PartitionLoad, error) {
	k, c := p.keyspace.PartKeys(part), p.byPart[part]
	res, err := loadScript.run(ctx, c, []string{k.Consumers(), k.WorkerCount()}, forget.Milliseconds())
	if err != nil {
		return PartitionLoad{}, fmt.Errorf("load of partition %d: %w", part, err)
	}
	flat, _ := res.([]any)
	if len(flat) < 2 {
		return PartitionLoad{}, fmt.Errorf("load of partition %d: %d values", part, len(flat))
	}
	now, _ := flat[0].(int64)
	cp, _ := flat[1].(string)
	out := PartitionLoad{Now: time.UnixMilli(now), Consumers: map[string]Beat{}}
	out.Checkpoint, _ = strconv.Atoi(cp)
	for i := 2; i+1 < len(flat); i += 2 {
		id, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		if b, err := parseBeat(v); err == nil {
			out.Consumers[id] = b
		}
	}
	for _, topic := range topics {
		qk := p.keyspace.Keys(Queue{Topic: topic, Part: part})
		res, err := readyScript.run(ctx, c, []string{qk.Stats(), qk.Lanes()})
		if err != nil {
			return PartitionLoad{}, fmt.Errorf("ready depth of %s/p%d: %w", topic, part, err)
		}
		n, _ := res.(int64)
		out.Ready += max(n, 0)
	}
	return out, nil
}

// parseBeat reads "<workers>:<unix ms>:<busy ms>".
func parseBeat(v string) (Beat, error) {
	f := strings.Split(v, ":")
	if len(f) != 3 {
		return Beat{}, errors.New("want <workers>:<unix ms>:<busy ms>")
	}
	var n [3]int64
	for i, s := range f {
		var err error
		if n[i], err = strconv.ParseInt(s, 10, 64); err != nil || n[i] < 0 {
			return Beat{}, fmt.Errorf("heartbeat %q: want <workers>:<unix ms>:<busy ms>", v)
		}
	}
	return Beat{Workers: int(n[0]), At: time.UnixMilli(n[1]), Busy: time.Duration(n[2]) * time.Millisecond}, nil
}
