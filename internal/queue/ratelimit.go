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
// ARGV[7] late tolerance, µs: a recorded slot missed by more than this is
// void (starting then could crowd the slots after it); a new one is taken
// ARGV[8] throttles the job had already (a caller that missed a slot it
// was handed reserves again and keeps the count)
// ARGV[9] seconds the hash outlives its schedule
// Returns {slot µs, throttles, deferred}: the job starts at slot, not
// before; deferred=1 when the caller should put it in delayed until then.
var reserveScript = newScript(`
local now, def, T, tau = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local field, hold, late = 'r:' .. ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
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
  if e == epoch and s >= now - late then
    -- The job's own slot: back early, it is deferred again to the same
    -- slot (no new throttle); in time, it starts then.
    if s > now + hold then return {s, n, 1} end
    redis.call('HDEL', KEYS[1], field)
    return {s, n, 0}
  end
  redis.call('HDEL', KEYS[1], field)
end
tat = math.max(tat, now)
local slot = math.max(now, tat - tau)
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
return {slot, throttles, deferred}
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
	// Late is how long after its slot a job may still start. Later, its
	// slot is void and it gets a new one.
	Late time.Duration
	// Throttles the job already had: a caller reserving again after it
	// missed a slot passes the count it was given with that slot.
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
}

// LimitKeep is how long a resource's schedule outlives its last slot.
const LimitKeep = time.Hour

// Reserve returns the job's start slot: the one recorded for it, if it
// came back for it in time, or the next free one.
func (p *Pool) Reserve(ctx context.Context, r Reservation, now time.Time) (Slot, error) {
	if r.Interval <= 0 || r.Burst < 1 || r.Hold < 0 || r.Late < 0 {
		return Slot{}, errors.New("queue: a reservation needs a positive interval and burst, and hold and late not negative")
	}
	part := p.layout.PartitionOf(r.Resource)
	interval := r.Interval.Microseconds()
	res, err := runScript(ctx, p.byPart[part], reserveScript, []string{p.layout.Keys(part).Limit(r.Resource)},
		now.UnixMicro(), r.Limit, interval, int64(r.Burst-1)*interval, r.Job,
		r.Hold.Microseconds(), r.Late.Microseconds(), r.Throttles, int64(LimitKeep/time.Second))
	if err != nil {
		return Slot{}, fmt.Errorf("rate limit of %q: %w", r.Resource, err)
	}
	flat, _ := res.([]any)
	if len(flat) != 3 {
		return Slot{}, fmt.Errorf("rate limit of %q: unexpected answer %v", r.Resource, res)
	}
	at, _ := flat[0].(int64)
	n, _ := flat[1].(int64)
	deferred, _ := flat[2].(int64)
	return Slot{At: time.UnixMicro(at), Throttles: int(n), Deferred: deferred == 1}, nil
}
