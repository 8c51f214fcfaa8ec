package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Canary records: see Keys.Canary. The monitor writes when it sends, the
// worker's built-in canary handler when one completes, and the monitor and
// `sluice stats` read them back; internal/canary gives them meaning.

// Canary hash field prefixes and the monitor's field.
const (
	CanarySentPrefix = "sent:"
	CanaryDonePrefix = "done:"
	CanaryMonitor    = "monitor"
	// CanaryAlerting, on partition 0, is set while a monitor has told its
	// webhook "firing" and not yet "resolved": the next monitor (after a
	// failover) owes the resolution.
	CanaryAlerting = "alerting"
)

// canaryDoneScript records a completed canary unless a newer one (sent
// later) has been recorded: canaries held up by an outage arrive late and
// out of order, and must not make a path look younger than it is.
//
// KEYS[1] canary  hash: the partition's canary records
// ARGV[1] field, "done:<topic>/<kafka partition>"
// ARGV[2] when the canary was sent, Unix ms   ARGV[3] when it completed, Unix ms
// Returns 1 recorded, 0 older than the record.
var canaryDoneScript = newScript("canaryDone", `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local sent = tonumber(string.match(cur, '^(%d+):') or '0')
  if sent >= tonumber(ARGV[2]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
return 1
`)

// RecordCanaryDone records that the canary sent at sent along path field
// completed on partition part at done. It reports false when a newer one
// had been recorded already.
func (p *Pool) RecordCanaryDone(ctx context.Context, part int, field string, sent, done time.Time) (bool, error) {
	res, err := canaryDoneScript.run(ctx, p.byPart[part], []string{p.keyspace.PartKeys(part).Canary()},
		CanaryDonePrefix+field, sent.UnixMilli(), done.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("recording a canary on partition %d: %w", part, err)
	}
	return res == int64(1), nil
}

// RecordCanariesSent records, per partition, the paths (fields) a canary
// was just sent along, at sent.
func (p *Pool) RecordCanariesSent(ctx context.Context, fields map[int][]string, sent time.Time) error {
	ms := sent.UnixMilli()
	for part, fs := range fields {
		vals := make([]any, 0, 2*len(fs))
		for _, f := range fs {
			vals = append(vals, CanarySentPrefix+f, ms)
		}
		if err := p.byPart[part].HSet(ctx, p.keyspace.PartKeys(part).Canary(), vals...).Err(); err != nil {
			return fmt.Errorf("recording sent canaries on partition %d: %w", part, err)
		}
	}
	return nil
}

// SetCanaryMonitor records the monitor's settings on partition 0.
func (p *Pool) SetCanaryMonitor(ctx context.Context, value string) error {
	return p.byPart[0].HSet(ctx, p.keyspace.PartKeys(0).Canary(), CanaryMonitor, value).Err()
}

// SetCanaryAlerting records on partition 0 whether an alert is out (see
// CanaryAlerting).
func (p *Pool) SetCanaryAlerting(ctx context.Context, on bool) error {
	c, key := p.byPart[0], p.keyspace.PartKeys(0).Canary()
	if on {
		return c.HSet(ctx, key, CanaryAlerting, "1").Err()
	}
	return c.HDel(ctx, key, CanaryAlerting).Err()
}

// CanaryAlerting reads on partition 0 whether an alert is out (see
// CanaryAlerting, the field).
func (p *Pool) CanaryAlerting(ctx context.Context) (bool, error) {
	v, err := p.byPart[0].HGet(ctx, p.keyspace.PartKeys(0).Canary(), CanaryAlerting).Result()
	if err == redis.Nil {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the canary alert on partition 0: %w", err)
	}
	return v != "", nil
}

// ForgetCanaries removes a partition's records of the given fields (with
// their prefixes): paths the monitor no longer plans.
func (p *Pool) ForgetCanaries(ctx context.Context, part int, fields []string) error {
	if len(fields) == 0 {
		return nil
	}
	return p.byPart[part].HDel(ctx, p.keyspace.PartKeys(part).Canary(), fields...).Err()
}

// CanaryHashes reads every partition's canary hash, by partition.
func (p *Pool) CanaryHashes(ctx context.Context) (map[int]map[string]string, error) {
	out := make(map[int]map[string]string, p.keyspace.Partitions)
	for part := range p.keyspace.Partitions {
		h, err := p.byPart[part].HGetAll(ctx, p.keyspace.PartKeys(part).Canary()).Result()
		if err != nil {
			return nil, fmt.Errorf("reading canaries of partition %d: %w", part, err)
		}
		out[part] = h
	}
	return out, nil
}
