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

// One job's cancel and delete (docs/admin.md#cancel-and-delete-a-job). A
// ready or delayed job is taken out of its queue at once: a cancel leaves
// its record in state cancelled (the lookup finds it), a delete leaves
// nothing. A running job cannot be taken from its worker by Redis alone:
// its cancel is a request, written beside the claimed batches (Keys.Cancels),
// that the worker's lease extension reads in the same script call (no
// extra round trip, and nothing read but one EXISTS while none is
// pending); the worker then cancels the handler's context and settles the
// job cancelled (SettleCancelled). A delete of a running job is refused:
// cancel it, then delete its record.

// removeScript takes one ready or delayed job out of its queue: the entry
// a lookup found, if it is still there. Its group counts it cancelled
// (its results say so), so that the group still completes; the funnel
// counts it cancelled. A cancel leaves the job's record in state
// cancelled; a delete removes the record.
//
// KEYS[1] lanes   KEYS[2] lane:<its lane>   KEYS[3] delayed   KEYS[4] stats
// KEYS[5] job:<id>   KEYS[6] group:<g> (stats without a group, unused)
// KEYS[7] results:<g> (stats without a group, unused)   KEYS[8] completed
// ARGV[1] "ready" or "delayed"   ARGV[2] the entry   ARGV[3] its lane's name
// ARGV[4] id   ARGV[5] group ("" none)   ARGV[6] the queue's topic
// ARGV[7] now, Unix ms   ARGV[8] "cancel" or "delete"   ARGV[9] seconds to
// keep the cancelled record, and an ended group
// Returns 1 removed, 0 no longer there (it moved on: look again).
var removeScript = newScript("remove", luaGroupEnded, luaFunnel, luaLanes, luaKeepRecord, `
local group, e = ARGV[5], ARGV[2]
if ARGV[1] == 'ready' then
  if redis.call('LREM', KEYS[2], 1, e) == 0 then return 0 end
  -- Counted ready only while its lane is in the fair order (a cancelled
  -- group's lane is not).
  if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
    redis.call('HINCRBY', KEYS[4], 'ready', -1)
    if redis.call('LLEN', KEYS[2]) == 0 then redis.call('ZREM', KEYS[1], ARGV[3]) end
  end
else
  if redis.call('ZREM', KEYS[3], e) == 0 then return 0 end
  if group ~= '' then redis.call('HINCRBY', KEYS[6], 'delayed', -1) end
end
local attempts = entryHead(e) or 0
redis.call('HINCRBY', KEYS[4], funnelField(group, ARGV[6], 'cancelled'), 1)
if group ~= '' then
  redis.call('HINCRBY', KEYS[6], 'cancelled', 1)
  redis.call('HSET', KEYS[7], ARGV[4], 'cancelled ' .. attempts .. ' ')
  groupEnded(KEYS[6], KEYS[7], group, KEYS[8], ARGV[7], ARGV[9])
end
if ARGV[8] == 'delete' then
  redis.call('DEL', KEYS[5])
else
  redis.call('HSET', KEYS[5], 'state', 'cancelled', 'cancelled_ms', ARGV[7], 'attempts', attempts)
  keepRecord(KEYS[5], ARGV[9])
end
return 1
`)

// requestCancelScript asks the worker holding a claimed job to cancel it:
// the job's place joins its batch's field of the cancels hash, which the
// lease extension reads (extendScript), and the job's record notes when
// the cancel was asked for.
//
// KEYS[1] leases   KEYS[2] lease:<batch>   KEYS[3] settled:<batch>
// KEYS[4] cancels   KEYS[5] job:<id>
// ARGV[1] batch   ARGV[2] the job's place in it   ARGV[3] id   ARGV[4] now, Unix ms
// ARGV[5] seconds to keep the record at least
// Returns 1 requested (or requested before), 0 the job is no longer held
// there (it ended, or its batch was reaped: look again).
var requestCancelScript = newScript("requestCancel", luaLanes, luaKeepRecord, `
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local e = redis.call('LINDEX', KEYS[2], ARGV[2])
if not e then return 0 end
local _, id = entryHead(e)
if id ~= ARGV[3] then return 0 end
local s = redis.call('GETRANGE', KEYS[3], ARGV[2], ARGV[2])
if s ~= '' and string.byte(s) ~= 0 then return 0 end
local places = redis.call('HGET', KEYS[4], ARGV[1]) or ' '
if not string.find(places, ' ' .. ARGV[2] .. ' ', 1, true) then
  redis.call('HSET', KEYS[4], ARGV[1], places .. ARGV[2] .. ' ')
end
redis.call('HSET', KEYS[5], 'cancel_ms', ARGV[4])
keepRecord(KEYS[5], ARGV[5])
return 1
`)

// settleCancelledScript settles a claimed job its worker stopped on a
// cancel request: it leaves its batch (which ends once every job is
// settled), its group counts it cancelled, its record says cancelled, and
// its cancel request is done with.
//
// KEYS[1] leases   KEYS[2] lease:<batch>   KEYS[3] settled:<batch>   KEYS[4] stats
// KEYS[5] job:<id>   KEYS[6] group:<g> (stats without a group, unused)
// KEYS[7] results:<g> (stats without a group, unused)   KEYS[8] completed
// KEYS[9] cancels
// ARGV[1] batch   ARGV[2] the job's place   ARGV[3] id   ARGV[4] group ("" none)
// ARGV[5] the queue's topic   ARGV[6] now, Unix ms   ARGV[7] seconds to keep
// the record and an ended group   ARGV[8] the attempt
// ARGV[9] "expired": only if the batch's lease expired by Redis's clock (the
// reaper's call: a lease its holder extended meanwhile is left to it); ""
// the holder's call
// Returns 1 settled, 0 the job was no longer held in its batch (or, for
// "expired", its lease was not expired).
var settleCancelledScript = newScript("settleCancelled", luaNow, luaGroupEnded, luaFunnel, luaKeepRecord, luaSettle, `
if ARGV[9] == 'expired' then
  local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if not due or tonumber(due) > redisNow() then return 0 end
end
local places = redis.call('HGET', KEYS[9], ARGV[1])
if places then
  places = string.gsub(places, ' ' .. ARGV[2] .. ' ', ' ')
  if places == ' ' then redis.call('HDEL', KEYS[9], ARGV[1]) else redis.call('HSET', KEYS[9], ARGV[1], places) end
end
local _, held = settle(KEYS[2], KEYS[3], tonumber(ARGV[2]), '\1')
if held == 0 then return 0 end
batchEnd(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
local group = ARGV[4]
redis.call('HINCRBY', KEYS[4], 'inflight', -1)
redis.call('HINCRBY', KEYS[4], funnelField(group, ARGV[5], 'cancelled'), 1)
if group ~= '' then
  redis.call('HINCRBY', KEYS[6], 'running', -1)
  redis.call('HINCRBY', KEYS[6], 'cancelled', 1)
  redis.call('HSET', KEYS[7], ARGV[3], 'cancelled ' .. ARGV[8] .. ' ')
  groupEnded(KEYS[6], KEYS[7], group, KEYS[8], ARGV[6], ARGV[7])
end
redis.call('HSET', KEYS[5], 'state', 'cancelled', 'cancelled_ms', ARGV[6], 'attempts', ARGV[8])
keepRecord(KEYS[5], ARGV[7])
return 1
`)

// What CancelJob did.
const (
	Cancelled       = "cancelled"        // taken out of its queue, its record says cancelled
	Deleted         = "deleted"          // taken out of its queue (or its record removed), nothing left
	CancelRequested = "cancel-requested" // running: its worker stops it at its next lease extension
)

// ErrJobNotFound: Redis holds no job of that id where its lookup places it.
var ErrJobNotFound = errors.New("no such job in Redis")

// JobStateError refuses a cancel or delete the job's state does not allow
// (a delete of a running job, a cancel of one that ended); Where is the
// state, Fix what to do instead.
type JobStateError struct {
	Where, Message, Fix string
}

func (e *JobStateError) Error() string { return e.Message }

// CancelKeep is how long a cancelled job's record is kept: as long as a
// done job's result by default (the worker's --result-ttl).
const CancelKeep = 24 * time.Hour

// CancelJob cancels (del false) or deletes (del true) one job, found as
// FindJob finds it: a ready or delayed job is taken out of its queue at
// once; a running job's cancel is requested of its worker
// (CancelRequested), and its delete refused; a dead job's delete purges
// it, a done or cancelled job's delete removes its record; a cancel of a
// job that ended is refused. It returns what it did and the job's
// whereabouts before. A job that moves on between the lookup and the
// script is looked up again, a few times.
func (p *Pool) CancelJob(ctx context.Context, l JobLookup, del bool, now time.Time) (string, JobWhereabouts, error) {
	for range 5 {
		w, err := p.FindJob(ctx, l)
		if err != nil {
			return "", w, err
		}
		done, outcome, err := p.cancelAt(ctx, l, w, del, now)
		if err != nil || done {
			return outcome, w, err
		}
	}
	return "", JobWhereabouts{}, fmt.Errorf("job %s kept moving between its lookup and its cancel: try again", l.ID)
}

func (p *Pool) cancelAt(ctx context.Context, l JobLookup, w JobWhereabouts, del bool, now time.Time) (done bool, outcome string, err error) {
	q := w.Queue
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	keep := int64(CancelKeep / time.Second)
	switch w.Where {
	case WhereReady, WhereDelayed:
		pe, err := ParseEntry(w.entry)
		if err != nil {
			return true, "", err
		}
		group, results := k.Stats(), k.Stats()
		if g := laneGroup(pe.Lane); g != "" {
			group, results = k.Group(g), k.Results(g)
		}
		verb, outcome := "cancel", Cancelled
		if del {
			verb, outcome = "delete", Deleted
		}
		res, err := removeScript.run(ctx, c,
			[]string{k.Lanes(), k.Lane(pe.Lane), k.Delayed(), k.Stats(), k.Job(l.ID), group, results, k.Completed()},
			w.Where, w.entry, pe.Lane, l.ID, laneGroup(pe.Lane), q.Topic, now.UnixMilli(), verb, keep)
		if err != nil {
			return true, "", fmt.Errorf("%s job %s on %s: %w", verb, l.ID, q, err)
		}
		return res == int64(1), outcome, nil
	case WhereRunning:
		if del {
			return true, "", &JobStateError{Where: w.Where, Message: "job " + l.ID + " is running: a running job is not deleted under its worker",
				Fix: "cancel it first (POST .../jobs/{id}/cancel, sluice jobs cancel), then delete its record once it is cancelled"}
		}
		res, err := requestCancelScript.run(ctx, c,
			[]string{k.Leases(), k.Lease(w.Batch), k.Settled(w.Batch), k.Cancels(), k.Job(l.ID)},
			w.Batch, w.place, l.ID, now.UnixMilli(), keep)
		if err != nil {
			return true, "", fmt.Errorf("cancel job %s on %s: %w", l.ID, q, err)
		}
		return res == int64(1), CancelRequested, nil
	case WhereDead:
		if !del {
			return true, "", &JobStateError{Where: w.Where, Message: "job " + l.ID + " is dead: it has ended, there is nothing to cancel",
				Fix: "delete it (sluice jobs delete), or replay it (sluice dlq replay)"}
		}
		ok, err := p.PurgeDead(ctx, q, l.ID)
		return ok || err != nil, Deleted, err
	case WhereDone, WhereCancelled:
		if !del {
			return true, "", &JobStateError{Where: w.Where, Message: "job " + l.ID + " is " + w.Where + ": it has ended, there is nothing to cancel",
				Fix: "delete its record (sluice jobs delete) if it must go"}
		}
		if err := c.Del(ctx, k.Job(l.ID)).Err(); err != nil {
			return true, "", fmt.Errorf("delete the record of job %s on %s: %w", l.ID, q, err)
		}
		return true, Deleted, nil
	case WhereInKafka, WhereRatePaused:
		return true, "", &JobStateError{Where: w.Where, Message: "job " + l.ID + " is still in Kafka: the relay has not moved it to Redis yet",
			Fix: "try again once it is relayed (its lookup then says ready); a paused relay rate holds it in Kafka"}
	}
	return true, "", fmt.Errorf("job %s on %s: %w", l.ID, q, ErrJobNotFound)
}

// laneGroup is the group of a group lane, "" for a shared one.
func laneGroup(lane string) string {
	if g, ok := strings.CutPrefix(lane, "g/"); ok {
		return g
	}
	return ""
}

// SettleCancelled settles a claimed job its worker stopped on a cancel
// request (CancelJob): cancelled, its record kept for keep. It reports
// false when the job was no longer held in its batch.
func (p *Pool) SettleCancelled(ctx context.Context, q Queue, job Claimed, now time.Time, keep time.Duration) (bool, error) {
	return p.settleCancelled(ctx, q, job, now, keep, false)
}

// settleCancelled is SettleCancelled; onlyExpired: only if the job's batch
// expired by Redis's clock (the reaper's call).
func (p *Pool) settleCancelled(ctx context.Context, q Queue, job Claimed, now time.Time, keep time.Duration, onlyExpired bool) (bool, error) {
	only := ""
	if onlyExpired {
		only = "expired"
	}
	k := p.keyspace.Keys(q)
	group, results := k.Stats(), k.Stats()
	if job.Group != "" {
		group, results = k.Group(job.Group), k.Results(job.Group)
	}
	res, err := settleCancelledScript.run(ctx, p.byPart[q.Part],
		[]string{k.Leases(), k.Lease(job.Batch), k.Settled(job.Batch), k.Stats(), k.Job(job.ID), group, results, k.Completed(), k.Cancels()},
		job.Batch, job.Index, job.ID, job.Group, q.Topic, now.UnixMilli(), max(wholeSeconds(keep), 1), job.Attempt, only)
	if err != nil {
		return false, fmt.Errorf("settle cancelled job %s on %s: %w", job.ID, q, err)
	}
	return res == int64(1), nil
}

// Cancels still pending when a batch goes back. A running job's cancel is
// a request its worker reads at its next lease extension; should the
// worker die, be cut off from Redis, or stop before that, the job would go
// back to its lane (reaped, or released) and run again. So the reaper and
// a release settle cancelled, first, the jobs of the batch whose cancel is
// pending: the request outlives its worker.

// reapCancels settles the pending cancels of an expired batch; entries is
// the batch's list, requested the reply to HMGET of its cancels field.
func (p *Pool) reapCancels(ctx context.Context, q Queue, batch string, entries []string, requested []any) (map[int]bool, error) {
	field := firstString(requested)
	var jobs []Claimed
	for _, place := range parseCancels(field) {
		if place >= len(entries) {
			continue
		}
		pe, err := ParseEntry(entries[place])
		if err != nil {
			continue // the reaper buries what cannot be read
		}
		l, err := ParseLane(pe.Lane)
		if err != nil {
			continue
		}
		jobs = append(jobs, Claimed{ID: pe.ID, Group: l.Group, Lane: pe.Lane, Batch: batch, Index: place, Attempt: pe.Attempts + 1})
	}
	return p.settlePendingCancels(ctx, q, jobs, true)
}

// releaseCancels settles the pending cancels among jobs, which a stopping
// worker hands back from one batch.
func (p *Pool) releaseCancels(ctx context.Context, q Queue, batch string, jobs []Claimed) (map[int]bool, error) {
	field, err := p.byPart[q.Part].HGet(ctx, p.keyspace.Keys(q).Cancels(), batch).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cancel requests of batch %s on %s: %w", batch, q, err)
	}
	requested := map[int]bool{}
	for _, place := range parseCancels(field) {
		requested[place] = true
	}
	var pending []Claimed
	for _, j := range jobs {
		if requested[j.Index] {
			pending = append(pending, j)
		}
	}
	return p.settlePendingCancels(ctx, q, pending, false)
}

// settlePendingCancels settles jobs cancelled (onlyExpired: as
// settleCancelled's), their records kept for CancelKeep, and returns the
// places it settled. A place settled meanwhile (its worker's own
// settlement raced it) is not among them; the return script leaves it
// alone too.
func (p *Pool) settlePendingCancels(ctx context.Context, q Queue, jobs []Claimed, onlyExpired bool) (map[int]bool, error) {
	var settled map[int]bool
	for _, j := range jobs {
		ok, err := p.settleCancelled(ctx, q, j, time.Now(), CancelKeep, onlyExpired)
		if err != nil {
			return settled, err
		}
		if ok {
			if settled == nil {
				settled = map[int]bool{}
			}
			settled[j.Index] = true
		}
	}
	return settled, nil
}

// firstString is the first value of an HMGET reply; "" when it is nil.
func firstString(reply []any) string {
	if len(reply) == 0 {
		return ""
	}
	s, _ := reply[0].(string)
	return s
}

// parseCancels reads a batch's field of the cancels hash: the places of
// the jobs whose cancel was requested, " 3 7 ".
func parseCancels(s string) []int {
	var out []int
	for _, f := range strings.Fields(s) {
		if n, err := strconv.Atoi(f); err == nil && n >= 0 {
			out = append(out, n)
		}
	}
	return out
}

// JobChange is the admin API's answer to a job's cancel or delete (POST
// .../jobs/{id}/cancel, DELETE .../jobs/{id}): what was done, and where the
// job was before.
type JobChange struct {
	Topic          string `json:"topic"`
	ID             string `json:"id"`
	RedisPartition int    `json:"redis_partition"`
	// Was is the job's state before (a lookup's state), Outcome one of
	// Cancelled, Deleted, CancelRequested.
	Was     string `json:"was"`
	Outcome string `json:"outcome"`
	Note    string `json:"note"`
}

// Change renders what CancelJob did.
func (w JobWhereabouts) Change(l JobLookup, outcome string) JobChange {
	c := JobChange{Topic: l.Topic, ID: l.ID, RedisPartition: w.Queue.Part, Was: w.Where, Outcome: outcome}
	switch outcome {
	case Cancelled:
		c.Note = "taken out of its queue; its lookup says cancelled while its record is kept"
	case Deleted:
		c.Note = "gone: nothing of it is left in Redis"
	case CancelRequested:
		c.Note = "its worker cancels its handler's context at its next lease extension (within a third of the lease) and settles it cancelled; its lookup says so then"
	}
	return c
}
