package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A worker's maintenance round on a partition, every --maintain-every
// (500 ms): on each queue the delayed jobs that came due and, every
// --liveness-every (2 s), its consumer's heartbeat and the leases that
// expired. Read one after another that was three round trips a queue and
// a round, most of them finding nothing: an idle worker's main work.
// ReadMaintenance makes them one round trip; what they found is acted on
// by Maintain, which makes none when nothing is due.

// ConsumerBeat is what a consumer publishes in its heartbeat (Heartbeat's arguments).
type ConsumerBeat struct {
	Consumer string
	Workers  int
	Busy     time.Duration
}

// DueWork is what a maintenance round found due on one queue.
type DueWork struct {
	Queue   Queue
	leases  []string // batches whose leases expired, at most ReapBatches
	delayed []string // delayed entries due, at most PromoteEntries
}

// Empty says nothing was due.
func (d DueWork) Empty() bool { return len(d.leases) == 0 && len(d.delayed) == 0 }

// MaintenanceRound is what ReadMaintenance found on a partition.
type MaintenanceRound struct {
	// Checkpoint is the partition's checkpointed worker count, as
	// Heartbeat answers it (0: none).
	Checkpoint int
	Due        []DueWork // per queue, in the order asked
}

// The most expired batches and due delayed entries a round takes on a
// queue; more wait for the next round.
const (
	ReapBatches    = 100
	PromoteEntries = 500
)

// ReadMaintenance reads the delayed jobs due by now of each queue of
// partition part and, with a beat, sends it as the consumer's heartbeat
// and reads the expired leases (by Redis's clock) too, in one pipeline.
func (p *Pool) ReadMaintenance(ctx context.Context, part int, beat *ConsumerBeat, queues []Queue, now time.Time) (MaintenanceRound, error) {
	for try := 0; ; try++ {
		round, err := p.readMaintenance(ctx, part, beat, queues, now)
		if !isNoScript(err) || try > 0 {
			return round, err
		}
		// Redis lost its scripts (a restart, SCRIPT FLUSH): a pipeline
		// does not fall back from EVALSHA, so load them and go again.
		c := p.byPart[part]
		if err := heartbeatScript.load(ctx, c); err != nil {
			return MaintenanceRound{}, err
		}
		if err := dueLeasesScript.load(ctx, c); err != nil {
			return MaintenanceRound{}, err
		}
	}
}

func (p *Pool) readMaintenance(ctx context.Context, part int, beat *ConsumerBeat, queues []Queue, now time.Time) (MaintenanceRound, error) {
	pk := p.keyspace.PartKeys(part)
	pipe := p.byPart[part].Pipeline()
	var hb *redis.Cmd
	if beat != nil {
		hb = heartbeatScript.queueIn(ctx, pipe, []string{pk.Consumers(), pk.WorkerCount()},
			beat.Consumer, beat.Workers, beat.Busy.Milliseconds())
	}
	leases := make([]*redis.Cmd, len(queues))
	delayed := make([]*redis.StringSliceCmd, len(queues))
	for i, q := range queues {
		if q.Part != part {
			return MaintenanceRound{}, fmt.Errorf("maintenance of partition %d: queue %s is another's", part, q)
		}
		k := p.keyspace.Keys(q)
		if beat != nil {
			leases[i] = dueLeasesScript.queueIn(ctx, pipe, []string{k.Leases()}, ReapBatches)
		}
		delayed[i] = pipe.ZRangeArgs(ctx, dueBy(k.Delayed(), now, PromoteEntries))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		if isNoScript(err) {
			return MaintenanceRound{}, err // ReadMaintenance loads the scripts
		}
		return MaintenanceRound{}, fmt.Errorf("maintenance of partition %d: %w", part, err)
	}
	round := MaintenanceRound{Due: make([]DueWork, len(queues))}
	if hb != nil {
		s, _ := hb.Val().(string)
		round.Checkpoint, _ = strconv.Atoi(s)
	}
	for i, q := range queues {
		round.Due[i] = DueWork{Queue: q, delayed: delayed[i].Val()}
		if leases[i] != nil {
			round.Due[i].leases = stringsOf(leases[i].Val())
		}
	}
	return round, nil
}

// Maintain acts on what a round found due on a queue: it returns the
// expired batches to their lanes, each attempt counted (as Reap, within
// dead and limit), and promotes the due delayed jobs (as Promote). It
// returns how many jobs went back, died and were promoted; nothing due
// costs no round trip.
func (p *Pool) Maintain(ctx context.Context, due DueWork, dead DeadLimits, limit AttemptLimit, now time.Time) (returned, died, promoted int, err error) {
	if returned, died, err = p.reapBatches(ctx, due.Queue, due.leases, dead, limit); err != nil {
		return returned, died, 0, err
	}
	promoted, err = p.promoteEntries(ctx, due.Queue, due.delayed, now)
	return returned, died, promoted, err
}
