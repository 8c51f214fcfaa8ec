package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// luaGroupEnded is shared by the scripts that end jobs (ack, dead, cancel,
// close). A bulk group (one with a total) whose jobs have all ended goes on
// the completed list exactly once: completed_ms is set with HSETNX, and
// only the call that sets it pushes. A group without a total (single jobs,
// or a bulk group not closed yet) is kept for keep seconds once nothing of
// it is left, then expires, its results (rk) with it: a group hash per
// single job must not pile up. The enqueue script PERSISTs a group (and
// its results) that gets new jobs.
//
// Every group gathers its items' results, total or not: the gate streams
// a bulk group's items before the close that carries its total, so its
// first items may end before the group is known to be bulk.
const luaGroupEnded = `
local function groupEndedAfter(gk, rk, name, completedKey, now, keep, total, relayed, ended)
  if total > 0 then
    if ended >= total and redis.call('HSETNX', gk, 'completed_ms', now) == 1 then
      redis.call('RPUSH', completedKey, name)
    end
  elseif ended >= relayed then
    redis.call('EXPIRE', gk, keep)
    redis.call('EXPIRE', rk, keep)
  end
end
local function groupEnded(gk, rk, name, completedKey, now, keep)
  local f = redis.call('HMGET', gk, 'total', 'relayed', 'done', 'dead', 'cancelled')
  groupEndedAfter(gk, rk, name, completedKey, now, keep, tonumber(f[1] or '0'), tonumber(f[2] or '0'),
    tonumber(f[3] or '0') + tonumber(f[4] or '0') + tonumber(f[5] or '0'))
end
`

// endedKeep is how long a group that ends in a script without a worker's
// keep (a cancel, a return or promotion that drops a cancelled group's
// jobs) is kept once nothing of it is left.
const endedKeep = 24 * time.Hour

// cancelScript cancels a group's ready jobs, a chunk at a time: the first
// call marks the group cancelled and takes its lane out of the fair order
// (no more claims; enqueue and the return scripts drop its jobs from then
// on), each call removes the given entries from the lane. Entries come
// from a read of the lane's head; each is removed only if still there.
//
// KEYS[1] group:<g>   KEYS[2] lane:g/<g>   KEYS[3] lanes   KEYS[4] completed
// KEYS[5] stats: the call that takes the lane out of the fair order takes
// its whole length off the partition's ready count (they can no longer be
// claimed); later calls only remove entries. The funnel's cancelled field
// of the group's topic counts the removed jobs.   KEYS[6] results:<g>
// KEYS[7] fence:<topic>
// ARGV[1] now, Unix ms   ARGV[2] seconds to keep an ended group
// ARGV[3] the group's name   ARGV[4] its lane's name   ARGV[5] the queue's
// topic   ARGV[6] the relay's lock token, or 0 for a cancel that holds no
// lock (the admin API's)   ARGV[7..] entries
// Returns how many jobs it removed, or -1 when the token is older than the
// fence (a deposed relay's cancel: nothing changed).
var cancelScript = newScript("cancel", luaGroupEnded, luaFunnel, luaLanes, `
if ARGV[6] ~= '0' and tonumber(ARGV[6]) < tonumber(redis.call('GET', KEYS[7]) or '0') then
  return -1
end
local now, keep, name = ARGV[1], ARGV[2], ARGV[3]
redis.call('HSETNX', KEYS[1], 'cancelled_ms', now)
if redis.call('ZREM', KEYS[3], ARGV[4]) == 1 then
  redis.call('HINCRBY', KEYS[5], 'ready', -redis.call('LLEN', KEYS[2]))
end
local removed, res = 0, {}
for i = 7, #ARGV do
  if redis.call('LREM', KEYS[2], 1, ARGV[i]) == 1 then
    removed = removed + 1
    local _, id = entryHead(ARGV[i])
    if id then res[#res+1] = id; res[#res+1] = 'cancelled 0 ' end
  end
end
if #res > 0 then redis.call('HSET', KEYS[6], unpack(res)) end
if removed > 0 then
  redis.call('HINCRBY', KEYS[1], 'cancelled', removed)
  redis.call('HINCRBY', KEYS[5], funnelField(name, ARGV[5], 'cancelled'), removed)
end
groupEnded(KEYS[1], KEYS[6], name, KEYS[4], now, keep)
return removed
`)

// CancelGroup cancels what of a group has not run: its ready jobs now, its
// delayed ones when they come due, and jobs still on their way from Kafka
// when the relay brings them. Running jobs finish. It returns how many
// ready jobs it removed.
func (p *Pool) CancelGroup(ctx context.Context, topic, group string, now time.Time) (int, error) {
	return p.cancelGroup(ctx, 0, topic, group, now)
}

// CancelGroupFenced is CancelGroup for the relay, which cancels under its
// lock: with token (non-zero) older than the topic's fence in the group's
// partition it changes nothing and returns an error wrapping ErrFenced. A
// cancel of many chunks that a newer holder fences midway has removed some
// jobs; the new holder relays the same cancel record and finishes it.
func (p *Pool) CancelGroupFenced(ctx context.Context, token uint64, topic, group string, now time.Time) (int, error) {
	if token == 0 {
		return 0, errors.New("queue: CancelGroupFenced needs a lock token (0 is no token)")
	}
	return p.cancelGroup(ctx, token, topic, group, now)
}

func (p *Pool) cancelGroup(ctx context.Context, token uint64, topic, group string, now time.Time) (int, error) {
	q := p.keyspace.QueueOf(topic, group, "")
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	lane := LaneOf(group, "", "", 0)
	keep := int64(endedKeep / time.Second)
	total := 0
	for first := true; ; first = false {
		var entries []string
		if !first {
			var err error
			if entries, err = c.LRange(ctx, k.Lane(lane), 0, 999).Result(); err != nil {
				return total, err
			}
			if len(entries) == 0 {
				return total, nil
			}
		}
		keys := []string{k.Group(group), k.Lane(lane), k.Lanes(), k.Completed(), k.Stats(), k.Results(group), k.Fence()}
		args := []any{now.UnixMilli(), keep, group, lane, topic, strconv.FormatUint(token, 10)}
		for _, e := range entries {
			args = append(args, e)
		}
		res, err := cancelScript.run(ctx, c, keys, args...)
		if err != nil {
			return total, fmt.Errorf("cancelling group %s: %w", group, err)
		}
		n, _ := res.(int64)
		if n < 0 {
			return total, fmt.Errorf("cancelling group %s: %w", group, ErrFenced)
		}
		total += int(n)
	}
}

// GroupStatus is what Redis knows of a group, for GET /v1/groups/{id}.
type GroupStatus struct {
	Found bool
	Topic string
	// Total is the bulk group's size, 0 until its close has been relayed.
	Total                             int64
	Relayed, Queued, Running, Delayed int64
	Done, Failed, Dead, Cancelled     int64
	FirstAt, ClosedAt, CancelledAt    time.Time
	CompletedAt                       time.Time
	CallbackURL, CallbackState        string
	CallbackAttempts                  int64
	CallbackError                     string
}

// Ended is how many of the group's jobs have ended: done, dead or
// cancelled.
func (st GroupStatus) Ended() int64 { return st.Done + st.Dead + st.Cancelled }

// Progress is the share of the group's jobs that have ended, at most 1;
// false until its size (Total) is known.
func (st GroupStatus) Progress() (float64, bool) {
	if st.Total <= 0 {
		return 0, false
	}
	return min(float64(st.Ended())/float64(st.Total), 1), true
}

// GroupStatus reads a group's hash and the length of its lane.
func (p *Pool) GroupStatus(ctx context.Context, topic, group string) (GroupStatus, error) {
	q := p.keyspace.QueueOf(topic, group, "")
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	pipe := c.Pipeline()
	h := pipe.HGetAll(ctx, k.Group(group))
	ready := pipe.LLen(ctx, k.Lane(LaneOf(group, "", "", 0)))
	if _, err := pipe.Exec(ctx); err != nil {
		return GroupStatus{}, err
	}
	f := h.Val()
	num := func(name string) int64 { n, _ := strconv.ParseInt(f[name], 10, 64); return n }
	at := func(name string) time.Time { return msTime(f[name]) }
	st := GroupStatus{
		Found: len(f) > 0, Topic: f["topic"], Total: num("total"), Relayed: num("relayed"), Running: num("running"),
		Delayed: num("delayed"), Done: num("done"), Failed: num("failed"), Dead: num("dead"), Cancelled: num("cancelled"),
		FirstAt: at("first_ms"), ClosedAt: at("closed_ms"), CancelledAt: at("cancelled_ms"), CompletedAt: at("completed_ms"),
		CallbackURL: f["callback_url"], CallbackState: f["callback_state"], CallbackAttempts: num("callback_attempts"),
		CallbackError: f["callback_error"],
	}
	st.Queued = ready.Val() + st.Delayed
	return st, nil
}

// TakeCompleted moves the next completed group of queue partition q to the
// completing list and returns it; "" when there is none. The caller
// delivers it, then calls FinishCompleted.
func (p *Pool) TakeCompleted(ctx context.Context, q Queue) (string, error) {
	k := p.keyspace.Keys(q)
	g, err := p.byPart[q.Part].LMove(ctx, k.Completed(), k.Completing(), "LEFT", "RIGHT").Result()
	if err == redis.Nil {
		return "", nil
	}
	return g, err
}

// Completing lists the groups of queue partition q a watcher took and has not
// finished: a new watcher delivers them first.
func (p *Pool) Completing(ctx context.Context, q Queue) ([]string, error) {
	return p.byPart[q.Part].LRange(ctx, p.keyspace.Keys(q).Completing(), 0, -1).Result()
}

// SetGroupFields records fields on a group's hash (the watcher's callback
// state and attempts).
func (p *Pool) SetGroupFields(ctx context.Context, topic, group string, fields map[string]any) error {
	q := p.keyspace.QueueOf(topic, group, "")
	return p.byPart[q.Part].HSet(ctx, p.keyspace.Keys(q).Group(group), fields).Err()
}

// FinishCompleted records a completed group's final fields, keeps the group
// (and so its status) for keep, and takes it off the completing list, in
// one transaction.
func (p *Pool) FinishCompleted(ctx context.Context, topic, group string, fields map[string]any, keep time.Duration) error {
	q := p.keyspace.QueueOf(topic, group, "")
	k := p.keyspace.Keys(q)
	_, err := p.byPart[q.Part].TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, k.Group(group), fields)
		pipe.Expire(ctx, k.Group(group), keep)
		pipe.Expire(ctx, k.Results(group), keep)
		pipe.LRem(ctx, k.Completing(), 1, group)
		return nil
	})
	return err
}

// JobState is a bulk group item's state as the group's results record it.
type JobState struct {
	ID, State string
	Result    []byte
	LastError string
	Attempts  int
}

// JobStates reads the states of a bulk group's items from the group's
// results in one round trip. An item the results do not name completed
// with an empty result (a group's results name only the items that
// returned something, died or were cancelled): its State is "done" and
// Attempts 0 (not recorded). Only meaningful once the group completed.
func (p *Pool) JobStates(ctx context.Context, topic, group string, ids []string) ([]JobState, error) {
	q := p.keyspace.QueueOf(topic, group, "")
	k := p.keyspace.Keys(q)
	vals, err := p.byPart[q.Part].HMGet(ctx, k.Results(group), ids...).Result()
	if err != nil && err != redis.Nil {
		return nil, err
	}
	out := make([]JobState, len(ids))
	for i, id := range ids {
		out[i] = JobState{ID: id, State: "done"}
		s, _ := vals[i].(string)
		if s == "" {
			continue
		}
		state, rest, _ := strings.Cut(s, " ")
		attempts, detail, _ := strings.Cut(rest, " ")
		out[i].State = state
		out[i].Attempts, _ = strconv.Atoi(attempts)
		switch state {
		case "done":
			if detail != "" {
				out[i].Result = []byte(detail)
			}
		default:
			out[i].LastError = detail
		}
	}
	return out, nil
}
