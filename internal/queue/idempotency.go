package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// idemBeginScript marks an idempotency key as running for one attempt of a
// job, unless a job with the key ran to completion within the TTL or an
// attempt runs now. The mark names the attempt: a job whose lease was lost
// while its attempt may still run (a stalled worker, a Redis outage longer
// than the lease) is claimed again as a new attempt, and that attempt must
// wait for the earlier one's mark to end or expire, not run beside it.
//
// KEYS[1] idem:<key>
// ARGV[1] "running:<id>:<attempt>"   ARGV[2] how long the mark holds, ms
// Returns "" when the caller may run (marked, or already this attempt's),
// else the mark in force: "done:<id>" or "running:<id>:<attempt>".
var idemBeginScript = newScript("idemBegin", `
local v = redis.call('GET', KEYS[1])
if not v or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ''
end
return v
`)

// idemEndScript ends a job's run of an idempotency key: on success the
// mark becomes "done:<id>" for the TTL; on failure it is removed, so the
// next try (or another job with the key) may run. Only the job's own mark
// is touched, or a success recorded where no mark is left: the running
// mark expired while Redis could not take the record (a long MISCONF
// outage), and no attempt has taken the key since; the next holder must
// find it done, not free. The jobs deferred behind the mark (idemWaitScript)
// are handed to the caller, which wakes them: the key they waited for has
// ended, and they need not sit out the lease they were deferred for.
//
// KEYS[1] idem:<key>   KEYS[2] idemwait:<key>
// ARGV[1] "running:<id>:<attempt>"   ARGV[2] "done:<id>", or "" after a failure   ARGV[3] TTL, ms
// Returns {1, waiters...} when the mark was the job's (or none was left),
// else {0}.
var idemEndScript = newScript("idemEnd", `
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and (v or ARGV[2] == '') then return {0} end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
local out = redis.call('SMEMBERS', KEYS[2])
if #out > 0 then redis.call('DEL', KEYS[2]) end
table.insert(out, 1, 1)
return out
`)

// idemWaitScript registers a job deferred behind another job's running
// mark, so that the end of that run wakes it (idemEndScript) instead of
// the deferral's due time, a lease away. It registers only while the mark
// it was deferred behind is still in force: a run that ended meanwhile
// has handed its waiters over already, and the caller wakes its own job.
//
// KEYS[1] idem:<key>   KEYS[2] idemwait:<key>
// ARGV[1] the mark the job was deferred behind   ARGV[2] the waiter
// ("<topic> <partition> <entry>", its deferred entry)   ARGV[3] how long the
// registration may be needed, ms: the mark's own hold at most
// Returns 1 registered, 0 the mark is no longer in force.
var idemWaitScript = newScript("idemWait", `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SADD', KEYS[2], ARGV[2])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
return 1
`)

func (p *Pool) idemKey(key string) (string, int) {
	part := p.keyspace.PartitionOf(key)
	return p.keyspace.PartKeys(part).Idempotency(key), part
}

// IdempotencyBegun is what IdempotencyBegin found of a key: exactly one of
// its fields is set.
type IdempotencyBegun struct {
	// Run: the attempt holds the key's running mark (set now, or its own
	// already) and may run.
	Run bool
	// DoneBy is the job that ran the key to completion within its TTL: the
	// attempt is done without running.
	DoneBy string
	// Running is the mark of another attempt that holds the key now
	// ("running:<id>:<attempt>"): the attempt waits behind it, and
	// IdempotencyWait takes it.
	Running string
}

// IdempotencyBegin claims key for an attempt of job id for up to hold, and
// says whether the attempt may run, is done already, or waits behind
// another attempt's run.
func (p *Pool) IdempotencyBegin(ctx context.Context, key, id string, attempt int, hold time.Duration) (IdempotencyBegun, error) {
	k, part := p.idemKey(key)
	res, err := idemBeginScript.run(ctx, p.byPart[part], []string{k}, runningMark(id, attempt), hold.Milliseconds())
	if err != nil {
		return IdempotencyBegun{}, fmt.Errorf("idempotency key %q: %w", key, err)
	}
	mark, _ := res.(string)
	if mark == "" {
		return IdempotencyBegun{Run: true}, nil
	}
	if id, ok := strings.CutPrefix(mark, "done:"); ok {
		return IdempotencyBegun{DoneBy: id}, nil
	}
	return IdempotencyBegun{Running: mark}, nil
}

func runningMark(id string, attempt int) string { return "running:" + id + ":" + strconv.Itoa(attempt) }

// IdempotencyEnd records the end of an attempt of job id's run of key: done
// (kept for ttl) or failed (the key is free again). It returns the jobs
// deferred behind the run (IdempotencyWait), for WakeDeferred.
func (p *Pool) IdempotencyEnd(ctx context.Context, key, id string, attempt int, succeeded bool, ttl time.Duration) ([]Deferred, error) {
	k, part := p.idemKey(key)
	done := ""
	if succeeded {
		done = "done:" + id
	}
	res, err := idemEndScript.run(ctx, p.byPart[part], []string{k, p.idemWaitKey(key, part)}, runningMark(id, attempt), done, ttl.Milliseconds())
	if err != nil {
		return nil, err
	}
	flat, _ := res.([]any)
	var out []Deferred
	for _, v := range flat[min(1, len(flat)):] {
		s, _ := v.(string)
		if d, ok := parseDeferred(s); ok {
			out = append(out, d)
		}
	}
	return out, nil
}

func (p *Pool) idemWaitKey(key string, part int) string {
	return p.keyspace.PartKeys(part).IdempotencyWaiters(key)
}

// Deferred is a job waiting in delayed of its queue: its entry as it
// stands there.
type Deferred struct {
	Queue Queue
	Entry string
}

func (d Deferred) String() string {
	return d.Queue.Topic + " " + strconv.Itoa(d.Queue.Part) + " " + d.Entry
}

func parseDeferred(s string) (Deferred, bool) {
	topic, rest, ok1 := strings.Cut(s, " ")
	part, entry, ok2 := strings.Cut(rest, " ")
	n, err := strconv.Atoi(part)
	if !ok1 || !ok2 || err != nil || ValidTopic(topic) != nil {
		return Deferred{}, false
	}
	return Deferred{Queue: Queue{Topic: topic, Part: n}, Entry: entry}, true
}

// DeferredEntry is the entry a claimed job has in delayed once deferred
// (Defer): the entry it was claimed with, its attempts not counted.
func DeferredEntry(q Queue, job Claimed) Deferred {
	return Deferred{Queue: q, Entry: Entry(job.Attempt-1, job.ID, job.Lane, job.Envelope)}
}

// IdempotencyWait registers d, deferred behind mark (another job's run of
// key, as IdempotencyBegin answered), to be handed to that run's
// IdempotencyEnd. It reports false when mark is no longer in force: the
// run ended before d was registered, and the caller wakes d itself.
func (p *Pool) IdempotencyWait(ctx context.Context, key, mark string, d Deferred, hold time.Duration) (bool, error) {
	k, part := p.idemKey(key)
	res, err := idemWaitScript.run(ctx, p.byPart[part], []string{k, p.idemWaitKey(key, part)}, mark, d.String(), hold.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("idempotency key %q: %w", key, err)
	}
	return res == int64(1), nil
}

// WakeDeferred makes deferred jobs due now and promotes them to their
// lanes: what they waited for has ended. A job no longer in delayed (woken
// already, or promoted at its due time) is left alone.
func (p *Pool) WakeDeferred(ctx context.Context, jobs []Deferred, now time.Time) error {
	byQueue := map[Queue][]string{}
	for _, d := range jobs {
		byQueue[d.Queue] = append(byQueue[d.Queue], d.Entry)
	}
	for q, entries := range byQueue {
		k, c := p.keyspace.Keys(q), p.byPart[q.Part]
		pipe := c.Pipeline()
		for _, e := range entries {
			// XX: only an entry still there. Due at the epoch, it is
			// among the first the promotion below takes.
			pipe.ZAddXX(ctx, k.Delayed(), redis.Z{Score: 0, Member: e})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("waking deferred jobs on %s: %w", q, err)
		}
		if _, err := p.Promote(ctx, q, max(len(entries), 100), now); err != nil {
			return err
		}
	}
	return nil
}
