package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CanaryGroupPrefix starts the group of every heartbeat canary (see
// internal/canary): the scripts count a canary's milestones apart from user
// jobs'.
const CanaryGroupPrefix = "sluice.canary."

// The funnel: per topic, scripts count each hand-off in the
// partition's stats hash, in fields "funnel:<topic>:<milestone>" (user jobs) or
// "canary:<topic>:<milestone>" (canaries). Kafka topic names cannot hold a
// colon, so the fields read back unambiguously. The counters live as long
// as Redis's data does (AOF), across restarts of every part, so a funnel
// read after any run balances: see Funnel and docs/stats.md.
const (
	MilestoneRelayed      = "relayed"       // enqueue: written into Redis, new
	MilestoneDeduplicated = "deduplicated"  // enqueue: a job with this id was there already
	MilestoneDropped      = "dropped"       // enqueue: its group was cancelled; not written
	MilestoneDeadLettered = "dead_lettered" // relay: poison, produced to <topic>.dlq
	MilestoneRequeued     = "requeued"      // relay: refused by Redis, produced to Kafka again
	MilestoneDequeued     = "dequeued"      // claim: leased by a worker (every attempt)
	MilestoneCompleted    = "completed"     // ack
	MilestoneRetried      = "retried"       // fail: a failed attempt, retried later
	MilestoneDead         = "dead"          // fail: the last attempt failed
	MilestoneCancelled    = "cancelled"     // cancel, return: removed with its cancelled group
)

// luaFunnel gives scripts the stats field of a milestone of a group's topic.
var luaFunnel = `
local function funnelField(group, topic, milestone)
  if string.sub(group, 1, ` + strconv.Itoa(len(CanaryGroupPrefix)) + `) == '` + CanaryGroupPrefix + `' then
    return 'canary:' .. topic .. ':' .. milestone
  end
  return 'funnel:' .. topic .. ':' .. milestone
end
local function funnelAdd(acc, field, n)
  if n ~= 0 then acc[field] = (acc[field] or 0) + n end
end
local function funnelFlush(statsKey, acc)
  for field, n in pairs(acc) do redis.call('HINCRBY', statsKey, field, n) end
end
`

// CountMilestone adds n to a milestone of topic's funnel, for the milestones counted
// outside a script (the relay's dead letters and requeues). They go to
// the topic's partition its name picks; readers sum every partition.
func (p *Pool) CountMilestone(ctx context.Context, topic, milestone string, canary bool, n int64) error {
	q := Queue{Topic: topic, Part: p.keyspace.PartitionOf(topic)}
	return p.byPart[q.Part].HIncrBy(ctx, p.keyspace.Keys(q).Stats(), funnelName(topic, milestone, canary), n).Err()
}

// FunnelField is the stats hash's field that counts milestone of topic's
// funnel: its user jobs', or its canaries'.
func FunnelField(topic, milestone string, canary bool) string {
	return funnelName(topic, milestone, canary)
}

func funnelName(topic, milestone string, canary bool) string {
	if canary {
		return "canary:" + topic + ":" + milestone
	}
	return "funnel:" + topic + ":" + milestone
}

// PartitionFunnel is one partition's funnel counters and what it holds, read
// at one moment (one MULTI), so that its numbers agree with each other.
type PartitionFunnel struct {
	Queue Queue
	// Milestones holds the counters by topic, then milestone; Canaries, the same
	// for canaries.
	Milestones, Canaries map[string]map[string]int64
	// Ready, Delayed, Inflight are the jobs the partition holds now; Dead
	// is the size of its dead set (capped, so not a count of deaths).
	Ready, Delayed, Inflight, Dead int64
	// Completed is the stats hash's "done" counter (jobs acked, ever);
	// ActiveGroups, the number of lanes with a job ready.
	Completed, ActiveGroups int64
}

// Held is how many jobs the partition holds: ready, delayed or in flight.
func (f PartitionFunnel) Held() int64 { return f.Ready + f.Delayed + f.Inflight }

// Funnel reads a partition's funnel counters and the sizes of its ready,
// delayed, in-flight and dead sets in one transaction.
func (p *Pool) Funnel(ctx context.Context, q Queue) (PartitionFunnel, error) {
	k := p.keyspace.Keys(q)
	pipe := p.byPart[q.Part].TxPipeline()
	stats := pipe.HGetAll(ctx, k.Stats())
	delayed := pipe.ZCard(ctx, k.Delayed())
	dead := pipe.ZCard(ctx, k.Dead())
	active := pipe.ZCard(ctx, k.Lanes())
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return PartitionFunnel{}, fmt.Errorf("funnel of %s: %w", q, err)
	}
	f := PartitionFunnel{
		Queue: q, Milestones: map[string]map[string]int64{}, Canaries: map[string]map[string]int64{},
		Delayed: delayed.Val(), Dead: dead.Val(), ActiveGroups: active.Val(),
	}
	for field, v := range stats.Val() {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch field {
		case "ready":
			f.Ready = max(n, 0)
			continue
		case "done":
			f.Completed = n
			continue
		case "inflight":
			f.Inflight = max(n, 0)
			continue
		}
		kind, rest, ok := strings.Cut(field, ":")
		topic, milestone, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 {
			continue
		}
		var m map[string]map[string]int64
		switch kind {
		case "funnel":
			m = f.Milestones
		case "canary":
			m = f.Canaries
		default:
			continue
		}
		if m[topic] == nil {
			m[topic] = map[string]int64{}
		}
		m[topic][milestone] += n
	}
	// As in Load: with no active group nothing is ready, whatever a
	// counter left by an older version says.
	if active.Val() == 0 {
		f.Ready = 0
	}
	return f, nil
}
