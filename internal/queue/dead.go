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

// StageReplayed counts dead jobs an operator put back to ready: they are
// open again, so the funnel's Redis balance is relayed + replayed −
// (completed + dead + cancelled).
const StageReplayed = "replayed"

// StageDLQReplayed counts records replayed from <topic>.dlq into the topic
// by the admin API: produced to Kafka, not through a gate, so the funnel
// adds them to the gates' produced count.
const StageDLQReplayed = "dlq_replayed"

// Replay outcomes.
const (
	ReplayGone      = 0  // not in the dead set (replayed or purged already, or capped out)
	ReplayDone      = 1  // back on its group's ready list
	ReplayExpired   = -1 // in the dead set, but its hash had expired: removed from the set
	ReplayCancelled = -2 // its group was cancelled: left dead
)

// replayScript puts a dead job back on its group's ready list with its
// attempts reset: off the dead set, state, dead_ms and attempts cleared,
// the hash made persistent again (a dead job's has a TTL), the group's dead
// count down by one and the group back in the fair order if it had left
// it, the ready depth up by one, an idle consumer woken.
//
// KEYS[1] dead   KEYS[2] job:<id>   KEYS[3] group:<g>   KEYS[4] ready:<g>
// KEYS[5] groups   KEYS[6] vt   KEYS[7] stats: ready, and the funnel's
// replayed field of the group's topic   KEYS[8] wake
// ARGV[1] id   ARGV[2] the group's name   ARGV[3] the job's topic (when
// the group's hash has none)   ARGV[4] now, Unix ms
// Returns 1 replayed, 0 not in the dead set, -1 its hash had expired (the
// id is taken off the dead set), -2 its group was cancelled (left dead).
//
// A bulk group that had completed stays completed: its completed_ms is set
// (HSETNX), so the job's end does not queue the group a second time, and
// its hash keeps the expiry the watcher gave it (--keep).
var replayScript = newScript(luaFunnel + `
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
if redis.call('HEXISTS', KEYS[2], 'env') == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return -1
end
if redis.call('HEXISTS', KEYS[3], 'cancelled_ms') == 1 then return -2 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('PERSIST', KEYS[2])
redis.call('HDEL', KEYS[2], 'state', 'dead_ms', 'attempts')
redis.call('HSET', KEYS[2], 'replayed_ms', ARGV[4])
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- A group set to expire once ended must last while the job is open
  -- again (its end sets the expiry anew), unless it completed: a bulk
  -- group's completion is final and it keeps its --keep expiry.
  if redis.call('HEXISTS', KEYS[3], 'completed_ms') == 0 then redis.call('PERSIST', KEYS[3]) end
  redis.call('HINCRBY', KEYS[3], 'dead', -1)
end
redis.call('RPUSH', KEYS[4], ARGV[1])
if not redis.call('ZSCORE', KEYS[5], ARGV[2]) then
  -- As the enqueue script: a group becoming active starts at the virtual
  -- clock, or where its own last service ended if later.
  local vt = tonumber(redis.call('GET', KEYS[6]) or '0')
  local start = math.max(vt, tonumber(redis.call('HGET', KEYS[3], 'vfinish') or '0'))
  redis.call('ZADD', KEYS[5], start, ARGV[2])
end
redis.call('HINCRBY', KEYS[7], 'ready', 1)
local topic = redis.call('HGET', KEYS[3], 'topic') or ARGV[3]
redis.call('HINCRBY', KEYS[7], funnelField(ARGV[2], topic, 'replayed'), 1)
redis.call('RPUSH', KEYS[8], 1)
redis.call('LTRIM', KEYS[8], -1, -1)
return 1
`)

// purgeScript removes a dead job for good: off the dead set, its hash
// deleted. The group's counters keep it as dead.
//
// KEYS[1] dead   KEYS[2] job:<id>
// ARGV[1] id
// Returns 1 purged, 0 not in the dead set.
var purgeScript = newScript(`
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
func (p *Pool) DeadPage(ctx context.Context, part int, beforeMS int64, beforeID string, n int) ([]DeadRef, error) {
	c, k := p.byPart[part], p.layout.Keys(part)
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
func (p *Pool) DeadJobs(ctx context.Context, part int, refs []DeadRef) error {
	if len(refs) == 0 {
		return nil
	}
	c, k := p.byPart[part], p.layout.Keys(part)
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

// FindDead finds the partition whose dead set holds id (a job's partition
// follows its group, which the id does not tell): one ZSCORE per
// partition. ok is false when no dead set holds it.
func (p *Pool) FindDead(ctx context.Context, id string) (ref DeadRef, part int, ok bool, err error) {
	for part := range p.layout.Partitions {
		s, err := p.byPart[part].ZScore(ctx, p.layout.Keys(part).Dead(), id).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return DeadRef{}, part, false, fmt.Errorf("dead set of partition %d: %w", part, err)
		}
		ref = DeadRef{ID: id, At: time.UnixMilli(int64(s))}
		return ref, part, true, nil
	}
	return DeadRef{}, 0, false, nil
}

// ReplayDead puts dead job id (of group, topic) of partition part back on
// its group's ready list with its attempts reset; see replayScript and the
// Replay* outcomes.
func (p *Pool) ReplayDead(ctx context.Context, part int, id, group, topic string, now time.Time) (int, error) {
	k := p.layout.Keys(part)
	keys := []string{k.Dead(), k.Job(id), k.Group(group), k.Ready(group), k.Groups(), k.VirtualTime(), k.Stats(), k.Wake()}
	res, err := runScript(ctx, p.byPart[part], replayScript, keys, id, group, topic, now.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("replaying dead job %s on partition %d: %w", id, part, err)
	}
	n, _ := res.(int64)
	return int(n), nil
}

// PurgeDead removes dead job id of partition part for good; false when it
// was not in the dead set.
func (p *Pool) PurgeDead(ctx context.Context, part int, id string) (bool, error) {
	k := p.layout.Keys(part)
	res, err := runScript(ctx, p.byPart[part], purgeScript, []string{k.Dead(), k.Job(id)}, id)
	if err != nil {
		return false, fmt.Errorf("purging dead job %s on partition %d: %w", id, part, err)
	}
	return res == int64(1), nil
}
