package queue

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A worker's maintenance round, every --maintain-every (500 ms): on each
// queue of each partition it serves, the delayed jobs that came due and,
// every --liveness-every (2 s), its consumer's heartbeat and the leases
// that expired. Read one after another that was three round trips a queue
// and a round, most of them finding nothing: an idle worker's main work.
// ReadMaintenance makes them one round trip per Redis server, whatever
// the number of partitions on it (an idle worker's wake-ups are its cost);
// what they found is acted on by Maintain, which makes none when nothing
// is due.

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

// PartMaintenance is what a maintenance round asks of one partition.
type PartMaintenance struct {
	Part int
	// Beat, when set, is sent as the partition's consumer heartbeat, and
	// the queues' expired leases (by Redis's clock) are read too.
	Beat   *ConsumerBeat
	Queues []Queue // the partition's queues, one per served topic
}

// MaintenanceRound is what ReadMaintenance found on a partition.
type MaintenanceRound struct {
	Part int
	// Checkpoint is the partition's checkpointed worker count, as
	// Heartbeat answers it (0: none, or no Beat).
	Checkpoint int
	Due        []DueWork // per queue, in the order asked
	// Err: the partition's round failed (its server did not answer):
	// Due and Checkpoint are empty, and the next round tries again.
	Err error
}

// The most expired batches and due delayed entries a round takes on a
// queue; more wait for the next round.
const (
	ReapBatches    = 100
	PromoteEntries = 500
)

// ReadMaintenance reads, for each partition asked, the delayed jobs due by
// now of its queues and, with a Beat, sends the heartbeat and reads the
// expired leases too: one pipeline per Redis server, the servers' in
// parallel. It answers a round per ask, in their order.
func (p *Pool) ReadMaintenance(ctx context.Context, asks []PartMaintenance, now time.Time) []MaintenanceRound {
	rounds := make([]MaintenanceRound, len(asks))
	byServer := map[redis.UniversalClient][]int{} // indexes into asks
	var servers []redis.UniversalClient
	for i, a := range asks {
		rounds[i].Part = a.Part
		if a.Part < 0 || a.Part >= len(p.byPart) {
			rounds[i].Err = fmt.Errorf("maintenance: no partition %d", a.Part)
			continue
		}
		c := p.byPart[a.Part]
		if _, ok := byServer[c]; !ok {
			servers = append(servers, c)
		}
		byServer[c] = append(byServer[c], i)
	}
	var wg sync.WaitGroup
	for _, c := range servers {
		wg.Go(func() { p.readServerMaintenance(ctx, c, asks, byServer[c], rounds, now) })
	}
	wg.Wait()
	return rounds
}

// readServerMaintenance is ReadMaintenance's pipeline to one server, for
// asks[at...], answered into rounds[at...].
func (p *Pool) readServerMaintenance(ctx context.Context, c redis.UniversalClient, asks []PartMaintenance, at []int, rounds []MaintenanceRound, now time.Time) {
	for try := 0; ; try++ {
		noScript := p.readMaintenance(ctx, c, asks, at, rounds, now)
		if !noScript || try > 0 {
			return
		}
		// Redis lost its scripts (a restart, SCRIPT FLUSH): a pipeline
		// does not fall back from EVALSHA, so load them and go again.
		for _, s := range []*script{heartbeatScript, dueLeasesScript} {
			if err := s.load(ctx, c); err != nil {
				for _, i := range at {
					rounds[i] = MaintenanceRound{Part: asks[i].Part, Err: err}
				}
				return
			}
		}
	}
}

// readMaintenance sends one pipeline for asks[at...] and answers each
// partition's round from its own commands; it reports whether a script
// was missing (NOSCRIPT), to be loaded and the pipeline sent again.
func (p *Pool) readMaintenance(ctx context.Context, c redis.UniversalClient, asks []PartMaintenance, at []int, rounds []MaintenanceRound, now time.Time) (noScript bool) {
	type sent struct {
		hb      *redis.Cmd
		leases  []*redis.Cmd
		delayed []*redis.StringSliceCmd
	}
	pipe := c.Pipeline()
	cmds := make([]sent, len(at))
	for n, i := range at {
		a := asks[i]
		rounds[i] = MaintenanceRound{Part: a.Part}
		pk := p.keyspace.PartKeys(a.Part)
		if a.Beat != nil {
			cmds[n].hb = heartbeatScript.queueIn(ctx, pipe, []string{pk.Consumers(), pk.WorkerCount()},
				a.Beat.Consumer, a.Beat.Workers, a.Beat.Busy.Milliseconds())
		}
		cmds[n].leases = make([]*redis.Cmd, len(a.Queues))
		cmds[n].delayed = make([]*redis.StringSliceCmd, len(a.Queues))
		for j, q := range a.Queues {
			if q.Part != a.Part {
				rounds[i].Err = fmt.Errorf("maintenance of partition %d: queue %s is another's", a.Part, q)
				break
			}
			k := p.keyspace.Keys(q)
			if a.Beat != nil {
				cmds[n].leases[j] = dueLeasesScript.queueIn(ctx, pipe, []string{k.Leases()}, ReapBatches)
			}
			cmds[n].delayed[j] = pipe.ZRangeArgs(ctx, dueBy(k.Delayed(), now, PromoteEntries))
		}
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error, read below
	for n, i := range at {
		a, round := asks[i], &rounds[i]
		if round.Err != nil {
			continue
		}
		var all []redis.Cmder
		if cmds[n].hb != nil {
			all = append(all, cmds[n].hb)
		}
		for j := range a.Queues {
			if cmds[n].leases[j] != nil {
				all = append(all, cmds[n].leases[j])
			}
			all = append(all, cmds[n].delayed[j])
		}
		for _, cmd := range all {
			if err := cmd.Err(); err != nil && err != redis.Nil {
				noScript = noScript || isNoScript(err)
				round.Err = fmt.Errorf("maintenance of partition %d: %w", a.Part, err)
				break
			}
		}
		if round.Err != nil {
			continue
		}
		if cmds[n].hb != nil {
			s, _ := cmds[n].hb.Val().(string)
			round.Checkpoint, _ = strconv.Atoi(s)
		}
		round.Due = make([]DueWork, len(a.Queues))
		for j, q := range a.Queues {
			round.Due[j] = DueWork{Queue: q, delayed: cmds[n].delayed[j].Val()}
			if cmds[n].leases[j] != nil {
				round.Due[j].leases = stringsOf(cmds[n].leases[j].Val())
			}
		}
	}
	return noScript
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
