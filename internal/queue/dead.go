package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The dead set's operator side (the admin API, docs/admin.md): list it,
// replay a dead job (back to ready with its attempts reset) or purge it.

// MilestoneReplayed counts dead jobs an operator put back to ready: they are
// open again, so the funnel's Redis balance is relayed + replayed −
// (completed + dead + cancelled).
const MilestoneReplayed = "replayed"

// MilestoneDLQReplayed counts records replayed from <topic>.dlq into the topic
// by the admin API: produced to Kafka, not through a gate, so the funnel
// adds them to the gates' produced count.
const MilestoneDLQReplayed = "dlq_replayed"

// Replay outcomes.
const (
	ReplayGone      = 0  // not in the dead set (replayed or purged already, or capped out)
	ReplayDone      = 1  // back on its group's ready list
	ReplayExpired   = -1 // in the dead set, but its hash had expired: removed from the set
	ReplayCancelled = -2 // its group was cancelled: left dead
)

// replayScript puts a dead job back on its lane with its attempts reset:
// off the dead set, its entry (kept in its record) at the back of its lane,
// the record's state, dead_ms and env cleared and replayed_ms set (the
// record keeps its last error until it expires), the group's dead count
// down by one, the lane back in the fair order if it had left it, the
// ready depth up by one, an idle consumer woken.
//
// KEYS[1] dead   KEYS[2] job:<id>   KEYS[3] lanes   KEYS[4] vt
// KEYS[5] stats: ready, and the funnel's replayed field of the job's topic
// KEYS[6] wake   KEYS[7] shared   KEYS[8..10] its lane's keys (appendLaneKeys)
// ARGV[1] id   ARGV[2..4] its lane's fields (appendLaneArgs)   ARGV[5] now, Unix ms
// ARGV[6] the queue's topic
// Returns 1 replayed, 0 not in the dead set, -1 its record had expired (the
// id is taken off the dead set), -2 its group was cancelled (left dead).
//
// A bulk group that had completed stays completed: its completed_ms is set
// (HSETNX), so the job's end does not queue the group a second time, and
// its hash keeps the expiry the watcher gave it (--keep).
var replayScript = newScript("replay", luaFunnel, luaLanes, `
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local e = redis.call('HGET', KEYS[2], 'env')
if not e or e == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return -1
end
local lanes = readLanes(1, 7, 1, ARGV[6])
local l = lanes[1]
if l.group ~= '' and redis.call('HEXISTS', l.meta, 'cancelled_ms') == 1 then return -2 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], 'state', 'dead_ms', 'env')
redis.call('HSET', KEYS[2], 'replayed_ms', ARGV[5])
if l.group ~= '' and redis.call('EXISTS', l.meta) == 1 then
  -- A group set to expire once ended must last while the job is open
  -- again (its end sets the expiry anew), unless it completed: a bulk
  -- group's completion is final and it keeps its --keep expiry.
  if redis.call('HEXISTS', l.meta, 'completed_ms') == 0 then
    redis.call('PERSIST', l.meta)
    redis.call('PERSIST', l.results)
  end
  redis.call('HINCRBY', l.meta, 'dead', -1)
  -- Open again: its death is no longer its result (an ack with an empty
  -- result writes nothing there).
  redis.call('HDEL', l.results, ARGV[1])
end
redis.call('RPUSH', l.list, withAttempts(e, 0))
activate(l, KEYS[3], KEYS[4], KEYS[7], {})
redis.call('HINCRBY', KEYS[5], 'ready', 1)
redis.call('HINCRBY', KEYS[5], funnelField(l.group, l.topic, 'replayed'), 1)
redis.call('RPUSH', KEYS[6], 1)
redis.call('LTRIM', KEYS[6], -1, -1)
return 1
`)

// purgeScript removes a dead job for good: off the dead set, its hash
// deleted. The group's counters keep it as dead.
//
// KEYS[1] dead   KEYS[2] job:<id>
// ARGV[1] id
// Returns 1 purged, 0 not in the dead set.
var purgeScript = newScript("purge", `
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('DEL', KEYS[2])
return 1
`)

// DeadRef is an id in a partition's dead set and when it died.
type DeadRef struct {
	ID     string
	At     time.Time
	Fields map[string]string // filled by DeadJobs
}

// Score is the dead set's score: when the job died, Unix ms.
func (d DeadRef) Score() int64 { return d.At.UnixMilli() }

// DeadPage lists up to n ids of partition part's dead set, newest first,
// strictly after the cursor (beforeMS, beforeID) in that order: a score
// below beforeMS, or equal with an id below beforeID. beforeMS < 0 starts
// at the newest.
func (p *Pool) DeadPage(ctx context.Context, q Queue, beforeMS int64, beforeID string, n int) ([]DeadRef, error) {
	c, k := p.byPart[q.Part], p.keyspace.Keys(q)
	var out []DeadRef
	add := func(zs []redis.Z) {
		for _, z := range zs {
			id, _ := z.Member.(string)
			ms := int64(z.Score)
			out = append(out, DeadRef{ID: id, At: time.UnixMilli(ms)})
		}
	}
	maxScore := "+inf"
	if beforeMS >= 0 {
		// Ties first: ids with the cursor's own score, below its id (REV
		// gives equal scores in descending lexical order).
		same, err := c.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: k.Dead(), ByScore: true, Rev: true, Start: strconv.FormatInt(beforeMS, 10), Stop: strconv.FormatInt(beforeMS, 10),
		}).Result()
		if err != nil {
			return nil, err
		}
		var keep []redis.Z
		for _, z := range same {
			if id, _ := z.Member.(string); id < beforeID {
				keep = append(keep, z)
			}
		}
		if len(keep) > n {
			keep = keep[:n]
		}
		add(keep)
		maxScore = "(" + strconv.FormatInt(beforeMS, 10)
	}
	if len(out) >= n {
		return out, nil
	}
	zs, err := c.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key: k.Dead(), ByScore: true, Rev: true, Start: maxScore, Stop: "-inf", Count: int64(n - len(out)),
	}).Result()
	if err != nil {
		return nil, err
	}
	add(zs)
	return out, nil
}

// deadFields are the job hash's fields a dead entry shows.
var deadFields = []string{"env", "attempts", "last_error", "dead_ms", "failed_ms", "state"}

// DeadJobs fills refs' Fields (env, attempts, last_error, dead_ms,
// failed_ms, state) in one round trip; a job whose hash has expired gets
// an empty map.
func (p *Pool) DeadJobs(ctx context.Context, q Queue, refs []DeadRef) error {
	if len(refs) == 0 {
		return nil
	}
	c, k := p.byPart[q.Part], p.keyspace.Keys(q)
	pipe := c.Pipeline()
	cmds := make([]*redis.SliceCmd, len(refs))
	for i, r := range refs {
		cmds[i] = pipe.HMGet(ctx, k.Job(r.ID), deadFields...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i := range refs {
		m := map[string]string{}
		for j, v := range cmds[i].Val() {
			if s, ok := v.(string); ok {
				m[deadFields[j]] = s
			}
		}
		refs[i].Fields = m
	}
	return nil
}

// FindDead finds the partition of topic whose dead set holds id (a job's
// partition follows its group, which the id does not tell): one ZSCORE per
// partition. ok is false when no dead set holds it.
func (p *Pool) FindDead(ctx context.Context, topic, id string) (ref DeadRef, q Queue, ok bool, err error) {
	for part := range p.keyspace.Partitions {
		q = Queue{Topic: topic, Part: part}
		s, err := p.byPart[q.Part].ZScore(ctx, p.keyspace.Keys(q).Dead(), id).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return DeadRef{}, q, false, fmt.Errorf("dead set of %s: %w", q, err)
		}
		ref = DeadRef{ID: id, At: time.UnixMilli(int64(s))}
		return ref, q, true, nil
	}
	return DeadRef{}, Queue{}, false, nil
}

// ReplayDead puts dead job id of queue partition q back on its lane with its
// attempts reset; see replayScript and the Replay* outcomes.
func (p *Pool) ReplayDead(ctx context.Context, q Queue, id string, now time.Time) (int, error) {
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	e, err := c.HGet(ctx, k.Job(id), "env").Result()
	if errors.Is(err, redis.Nil) || (err == nil && e == "") {
		e = "0 " + id + " g/? {}" // no record: the script finds it gone
	} else if err != nil {
		return 0, fmt.Errorf("replaying dead job %s on %s: %w", id, q, err)
	}
	pe, err := ParseEntry(e)
	if err != nil {
		return 0, fmt.Errorf("replaying dead job %s on %s: %w", id, q, err)
	}
	l, err := ParseLane(pe.Lane)
	if err != nil {
		return 0, fmt.Errorf("replaying dead job %s on %s: %w", id, q, err)
	}
	keys := k.appendLaneKeys([]string{k.Dead(), k.Job(id), k.Lanes(), k.VirtualTime(), k.Stats(), k.Wake(), k.Shared()}, l)
	args := append(appendLaneArgs([]any{id}, l), now.UnixMilli(), q.Topic)
	res, err := replayScript.run(ctx, c, keys, args...)
	if err != nil {
		return 0, fmt.Errorf("replaying dead job %s on %s: %w", id, q, err)
	}
	n, _ := res.(int64)
	return int(n), nil
}

// PurgeDead removes dead job id of queue partition q for good; false when it
// was not in the dead set.
func (p *Pool) PurgeDead(ctx context.Context, q Queue, id string) (bool, error) {
	k := p.keyspace.Keys(q)
	res, err := purgeScript.run(ctx, p.byPart[q.Part], []string{k.Dead(), k.Job(id)}, id)
	if err != nil {
		return false, fmt.Errorf("purging dead job %s on %s: %w", id, q, err)
	}
	return res == int64(1), nil
}
