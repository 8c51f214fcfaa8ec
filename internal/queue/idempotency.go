package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"
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
var idemBeginScript = newScript(`
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
// find it done, not free.
//
// KEYS[1] idem:<key>
// ARGV[1] "running:<id>:<attempt>"   ARGV[2] "done:<id>", or "" after a failure   ARGV[3] TTL, ms
// Returns 1 when the mark was the job's (or none was left), else 0.
var idemEndScript = newScript(`
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and (v or ARGV[2] == '') then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
`)

func (p *Pool) idemKey(key string) (string, int) {
	part := p.layout.PartitionOf(key)
	return p.layout.PartKeys(part).Idempotency(key), part
}

// IdempotencyBegin claims key for an attempt of job id for up to hold. It
// returns "" when the attempt may run, else the mark in force ("done:<id>"
// or "running:<id>:<attempt>").
func (p *Pool) IdempotencyBegin(ctx context.Context, key, id string, attempt int, hold time.Duration) (string, error) {
	k, part := p.idemKey(key)
	res, err := runScript(ctx, p.byPart[part], idemBeginScript, []string{k}, runningMark(id, attempt), hold.Milliseconds())
	if err != nil {
		return "", fmt.Errorf("idempotency key %q: %w", key, err)
	}
	s, _ := res.(string)
	return s, nil
}

func runningMark(id string, attempt int) string { return "running:" + id + ":" + strconv.Itoa(attempt) }

// IdempotencyEnd records the end of an attempt of job id's run of key: done
// (kept for ttl) or failed (the key is free again).
func (p *Pool) IdempotencyEnd(ctx context.Context, key, id string, attempt int, succeeded bool, ttl time.Duration) error {
	k, part := p.idemKey(key)
	done := ""
	if succeeded {
		done = "done:" + id
	}
	_, err := runScript(ctx, p.byPart[part], idemEndScript, []string{k}, runningMark(id, attempt), done, ttl.Milliseconds())
	return err
}
