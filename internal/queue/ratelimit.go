package queue

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// reserveScript hands out start slots under a resource key's execution rate
// limit, GCRA-style, shared by every worker and partition: the hash keeps
// the theoretical arrival time (tat) of the next slot, and each call takes
// the next slot, now or later. A slot beyond the hold horizon is recorded
// for the job, which the caller puts in delayed until shortly before it;
// when the job comes back, the same call returns the recorded slot instead
// of a new one, so a job is throttled once however long its wait.
//
// The hash's fields: tat (µs), limit (the definition in force), epoch (+1
// at each change of definition), last (the latest slot handed out, µs),
// and r:<job id> = "<slot µs>:<throttles>:<epoch>" for each recorded slot.
// Times are Unix microseconds: at 1,000/s and more, milliseconds would
// round the spacing off by whole percents.
//
// KEYS[1] limit:<resource>  hash, in the partition PartitionOf(resource)
// ARGV[1] now, Unix µs
// ARGV[2] the limit's definition as configured: a different one voids the
// slots recorded under the old one (their jobs reserve again) and starts a
// new schedule after the last slot that can no longer be recalled
// ARGV[3] emission interval, µs: the spacing of slots
// ARGV[4] burst tolerance, µs: (burst-1) × interval
// ARGV[5] job id
// ARGV[6] hold horizon, µs: a slot later than now+hold is recorded and
// returned with deferred=1; a nearer one the caller waits for in process
// ARGV[7] not before, µs: the earliest slot the caller can use (0: now)
// ARGV[8] throttles the job had already (a caller whose start the window
// log held back too long reserves again, and keeps the count)
// ARGV[9] seconds the hash outlives its schedule
// Returns {slot µs, throttles, deferred, recorded}: the job starts at slot,
// not before; deferred=1 when the caller should put it in delayed until
// then; recorded=1 when slot is the one recorded for the job earlier.
var reserveScript = newScript("reserve", `
local now, def, T, tau = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local field, hold, notBefore = 'r:' .. ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local throttles, keep = tonumber(ARGV[8]), tonumber(ARGV[9])
local st = redis.call('HMGET', KEYS[1], 'tat', 'limit', 'epoch', 'last', field)
local tat, epoch, last = tonumber(st[1] or '0'), tonumber(st[3] or '0'), tonumber(st[4] or '0')
if st[2] ~= def then
  if st[2] then
    -- Slots within the hold horizon went to jobs about to start: the new
    -- schedule begins one interval after the latest of them.
    epoch = epoch + 1
    tat = math.max(now, math.min(last, now + hold) + T)
  end
  redis.call('HSET', KEYS[1], 'limit', def, 'epoch', string.format('%d', epoch))
end
if st[5] then
  local s, n, e = string.match(st[5], '^(%d+):(%d+):(%d+)$')
  s, n, e = tonumber(s), tonumber(n), tonumber(e)
  throttles = math.max(throttles, n)
  if e == epoch and notBefore == 0 then
    -- The job's own slot: back early, it is deferred again to the same
    -- slot (no new throttle); otherwise it starts then, or as soon as the
    -- window log lets it if it came back late.
    if s > now + hold then return {s, n, 1, 1} end
    redis.call('HDEL', KEYS[1], field)
    return {s, n, 0, 1}
  end
  redis.call('HDEL', KEYS[1], field)
end
tat = math.max(tat, now, notBefore)
local slot = math.max(now, notBefore, tat - tau)
tat = tat + T
last = math.max(last, slot)
redis.call('HSET', KEYS[1], 'tat', string.format('%d', tat), 'last', string.format('%d', last))
local deferred = 0
if slot > now + hold then
  throttles = throttles + 1
  deferred = 1
  redis.call('HSET', KEYS[1], field, string.format('%d:%d:%d', slot, throttles, epoch))
end
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil((tat - now) / 1000) + keep * 1000))
return {slot, throttles, deferred, 0}
`)

// Reservation asks for a job's start slot under its resource key's limit.
type Reservation struct {
	Resource string
	Job      string
	// Limit is the limit's definition as configured (its rate and burst,
	// not the margin of this worker): every worker must pass the same one,
	// and a change voids the slots recorded under the previous one.
	Limit string
	// Interval is the spacing of slots; Burst how many may start at once
	// after a quiet spell (at least 1).
	Interval time.Duration
	Burst    int
	// Hold is how far ahead a slot may be for the caller to wait for it in
	// process; a later one is recorded, and the job should wait in delayed.
	Hold time.Duration
	// NotBefore, if set, asks for a new slot no earlier: the window log
	// (Admit) would hold the job back until then.
	NotBefore time.Time
	// Throttles the job already had: a caller reserving again passes the
	// count it was given with its previous slot.
	Throttles int
}

// Slot is a reserved start.
type Slot struct {
	// At is the start: not before.
	At time.Time
	// Throttles is how often the job was sent to wait in delayed for a slot
	// in this attempt: 1 for a job that waited once.
	Throttles int
	// Deferred means At is beyond Hold: the slot is recorded for the job,
	// which should wait in delayed until shortly before At; coming back, it
	// gets the same slot.
	Deferred bool
	// Recorded means the slot was reserved earlier, when the job was
	// throttled, rather than by this call.
	Recorded bool
}

// LimitKeep is how long a resource's schedule outlives its last slot.
const LimitKeep = time.Hour

// Reserve returns the job's start slot: the one recorded for it, if it
// came back for it in time, or the next free one.
func (p *Pool) Reserve(ctx context.Context, r Reservation, now time.Time) (Slot, error) {
	if r.Interval <= 0 || r.Burst < 1 || r.Hold < 0 {
		return Slot{}, errors.New("queue: a reservation needs a positive interval and burst, and a hold not negative")
	}
	notBefore := int64(0)
	if !r.NotBefore.IsZero() {
		notBefore = r.NotBefore.UnixMicro()
	}
	part := p.keyspace.PartitionOf(r.Resource)
	interval := r.Interval.Microseconds()
	res, err := reserveScript.run(ctx, p.byPart[part], []string{p.keyspace.PartKeys(part).Limit(r.Resource)},
		now.UnixMicro(), r.Limit, interval, int64(r.Burst-1)*interval, r.Job,
		r.Hold.Microseconds(), notBefore, r.Throttles, int64(LimitKeep/time.Second))
	if err != nil {
		return Slot{}, fmt.Errorf("rate limit of %q: %w", r.Resource, err)
	}
	flat, _ := res.([]any)
	if len(flat) != 4 {
		return Slot{}, fmt.Errorf("rate limit of %q: unexpected answer %v", r.Resource, res)
	}
	at, _ := flat[0].(int64)
	n, _ := flat[1].(int64)
	deferred, _ := flat[2].(int64)
	recorded, _ := flat[3].(int64)
	return Slot{At: time.UnixMicro(at), Throttles: int(n), Deferred: deferred == 1, Recorded: recorded == 1}, nil
}

// admitScript is the last word on a rate-limited start: a log of the
// resource's recent starts, so that no window [t, t+W) ever holds more than
// the limit's starts, whatever the slots said. Slots keep starts apart when
// jobs start on time; the log holds back a job whose predecessors started
// late (a stalled or busy worker), shifting the schedule a little instead
// of crowding a window. Entries are the starts' actual times: the worker
// records the time its handler started (startedScript) once it knows it.
//
// KEYS[1] starts:<resource>  zset: "<job id>:<check µs>" -> start, Unix µs
// ARGV[1] now, Unix µs   ARGV[2] window W, µs   ARGV[3] most starts in a window
// ARGV[4] the start's member name
// Returns 0 when the job may start now (recorded at now), else the µs to
// wait before asking again.
var admitScript = newScript("admit", `
local now, W, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
-- A start at or before now-W shares no window with one at now.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - W))
-- Every start left counts, also those recorded as later than now (another
-- worker's clock read a little later, or a handler started late): they
-- share a window with now.
local n = redis.call('ZCARD', KEYS[1])
if n < cap then
  redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[4])
  redis.call('PEXPIRE', KEYS[1], math.ceil(2 * W / 1000))
  return 0
end
-- The start that must leave the window first.
local e = redis.call('ZRANGE', KEYS[1], n - cap, n - cap, 'WITHSCORES')
return math.max(tonumber(e[2]) + W - now, 1)
`)

// startedScript moves a start recorded by admitScript to the time its
// handler actually started: never earlier.
//
// KEYS[1] starts:<resource>
// ARGV[1] the start's member name   ARGV[2] the handler's start, Unix µs
// Returns 1 when moved, 0 when the entry was gone or already later.
var startedScript = newScript("started", `
return redis.call('ZADD', KEYS[1], 'XX', 'GT', 'CH', ARGV[2], ARGV[1])
`)

// Admit asks the resource's window log whether a start may happen now: at
// most max starts in any window [t, t+window). It returns 0 when the start
// is recorded, else how long to wait before asking again. member names the
// start (unique per start): Started moves it to the actual start time.
func (p *Pool) Admit(ctx context.Context, resource, member string, max int, window time.Duration, now time.Time) (time.Duration, error) {
	part := p.keyspace.PartitionOf(resource)
	res, err := admitScript.run(ctx, p.byPart[part], []string{p.keyspace.PartKeys(part).LimitStarts(resource)},
		now.UnixMicro(), window.Microseconds(), max, member)
	if err != nil {
		return 0, fmt.Errorf("rate limit of %q: %w", resource, err)
	}
	wait, _ := res.(int64)
	return time.Duration(wait) * time.Microsecond, nil
}

// Started records when the handler of an admitted start actually began.
func (p *Pool) Started(ctx context.Context, resource, member string, at time.Time) error {
	part := p.keyspace.PartitionOf(resource)
	_, err := startedScript.run(ctx, p.byPart[part], []string{p.keyspace.PartKeys(part).LimitStarts(resource)}, member, at.UnixMicro())
	return err
}
