package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// raiseFenceScript raises a topic's fence in one queue partition to a lock
// holder's token, unless the partition has seen a newer one. The relay runs
// it in every partition of its topic as soon as it holds the lock, before
// its first write: from then on a deposed holder's writes are refused in
// every partition, not only in those the new holder has written to.
//
// KEYS[1] fence:<topic>   string: newest lock token seen for the topic
// ARGV[1] lock token
// Returns the fence after the call, as a string: ARGV[1] when it was raised
// or already there, a larger token when a newer holder raised it (the
// caller is deposed).
var raiseFenceScript = newScript("raiseFence", `
local fence = redis.call('GET', KEYS[1])
if fence and tonumber(fence) >= tonumber(ARGV[1]) then
  return fence
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
`)

// countMilestoneFencedScript adds to a milestone of a topic's funnel for a lock
// holder: like CountMilestone, but a deposed holder's count is refused, so
// that its late side effects do not count twice what the new holder
// counts when it relays the same records again.
//
// KEYS[1] fence:<topic>   KEYS[2] stats
// ARGV[1] lock token   ARGV[2] the funnel's field   ARGV[3] n
// Returns 0 when fenced (nothing counted), 1 when counted.
var countMilestoneFencedScript = newScript("countMilestoneFenced", `
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[1]) or '0') then
  return 0
end
redis.call('HINCRBY', KEYS[2], ARGV[2], ARGV[3])
return 1
`)

// RaiseFence raises topic's fence to token in every queue partition of
// the layout, one script call per partition (raiseFenceScript). It returns
// nil only when every partition holds token. A partition that holds a
// newer token makes it return an error wrapping ErrFenced that names the
// partition and that token; a partition Redis cannot serve, the error for
// it (Transient tells whether to retry). Every partition is tried either
// way, so a retry has only the failed ones left to change.
func (p *Pool) RaiseFence(ctx context.Context, topic string, token uint64) error {
	if err := ValidTopic(topic); err != nil {
		return err
	}
	var errs []error
	for part := range p.keyspace.Partitions {
		if err := p.raiseFenceIn(ctx, Queue{Topic: topic, Part: part}, token); err != nil {
			errs = append(errs, err)
		}
	}
	// Deposed says more than Redis being down: put it first.
	for i, err := range errs {
		if errors.Is(err, ErrFenced) {
			errs[0], errs[i] = errs[i], errs[0]
			break
		}
	}
	return errors.Join(errs...)
}

// CheckFence raises topic's fence to token in one queue partition, the one
// the topic's name picks, and reports ErrFenced (wrapped) if it holds a
// newer token. A new holder raises the fence in every partition before it
// writes anything (RaiseFence), so one partition answers for all: the relay
// asks it before each produce to Kafka, which no script can fence.
func (p *Pool) CheckFence(ctx context.Context, topic string, token uint64) error {
	if err := ValidTopic(topic); err != nil {
		return err
	}
	return p.raiseFenceIn(ctx, Queue{Topic: topic, Part: p.keyspace.PartitionOf(topic)}, token)
}

func (p *Pool) raiseFenceIn(ctx context.Context, q Queue, token uint64) error {
	tok := strconv.FormatUint(token, 10)
	res, err := raiseFenceScript.run(ctx, p.byPart[q.Part], []string{p.keyspace.Keys(q).Fence()}, tok)
	if err != nil {
		return fmt.Errorf("raising the fence of %s on %s: %w", q, p.serverOf(p.byPart[q.Part]), err)
	}
	if s, _ := res.(string); s != tok {
		return fmt.Errorf("%w: partition %s holds token %s, newer than %s", ErrFenced, q, s, tok)
	}
	return nil
}

// CountMilestoneFenced is CountMilestone for a lock holder's writes: the count is
// refused with ErrFenced when the partition has seen a token newer than
// token. Canaries' milestones are not counted this way (no relay counts them).
func (p *Pool) CountMilestoneFenced(ctx context.Context, token uint64, topic, milestone string, n int64) error {
	q := Queue{Topic: topic, Part: p.keyspace.PartitionOf(topic)}
	k := p.keyspace.Keys(q)
	res, err := countMilestoneFencedScript.run(ctx, p.byPart[q.Part], []string{k.Fence(), k.Stats()},
		strconv.FormatUint(token, 10), funnelName(topic, milestone, false), n)
	if err != nil {
		return fmt.Errorf("counting %s of %s: %w", milestone, topic, err)
	}
	if v, _ := res.(int64); v == 0 {
		return fmt.Errorf("counting %s of %s: %w", milestone, topic, ErrFenced)
	}
	return nil
}
