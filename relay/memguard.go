package relay

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/queue"
)

// memGuard keeps a Redis below its maxmemory. Redis at maxmemory refuses
// the writes that dequeueing needs, which is the outage Kafka in front
// exists to prevent. So the relay stops writing while used_memory is above
// High x maxmemory and resumes below Low x maxmemory; Kafka holds the
// backlog meanwhile.
//
// Redis publishes no memory events, so the guard samples INFO memory every
// period. Sampling alone is not enough: a fast relay writes megabytes between
// two samples. So each batch also reserves its estimated size, and a batch
// that would take the last sample plus what was written since over the high
// watermark waits for the next sample.
type memGuard struct {
	client    redis.UniversalClient // a cluster client: its fullest master
	addr      string
	high, low float64
	period    time.Duration
	log       *slog.Logger
	onChange  func(addr string, paused bool, ratio float64)

	mu      sync.Mutex
	known   bool          // a sample has been taken
	paused  bool          // above high, not yet below low
	used    uint64        // used_memory at the last sample
	limit   uint64        // maxmemory; 0: no limit, the guard is off
	pending uint64        // bytes reserved since the last sample
	sampled chan struct{} // closed at the next sample
	// quiet: nothing was reserved in the last sample period, so Run
	// samples every idleSamples periods; a reservation kicks it back.
	quiet bool
	kick  chan struct{} // buffered 1: the first reservation after a quiet period
}

// idleSamples is how many sample periods the guard waits between samples
// while nothing is written (an idle relay): used_memory does not grow by
// the relay's writes then, and the first batch after the pause goes as any
// batch alone in its period does while it asks for a fresh sample at once.
// At the default 250 ms that is 4 INFO calls a second down to one every 2 s.
const idleSamples = 8

func newMemGuard(client redis.UniversalClient, addr string, high, low float64, period time.Duration, log *slog.Logger, onChange func(string, bool, float64)) *memGuard {
	return &memGuard{client: client, addr: addr, high: high, low: low, period: period, log: log, onChange: onChange, sampled: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// jobFootprint estimates what one job costs Redis beyond its envelope: its
// entry's head (attempts, id, lane) and the list node. A plain job has no
// key of its own (docs/redis-layout.md).
const jobFootprint = 96

// Reserve waits until n more bytes fit under the high watermark, then
// counts them as written. A batch alone in its sample period always goes
// (unless the guard is paused), so a batch larger than the headroom cannot
// wait forever; keep batches far below (1-high) x maxmemory.
func (g *memGuard) Reserve(ctx context.Context, n uint64) error {
	for {
		g.mu.Lock()
		if g.quiet {
			g.quiet = false
			select {
			case g.kick <- struct{}{}:
			default:
			}
		}
		fits := g.known && !g.paused &&
			(g.limit == 0 || g.pending == 0 || float64(g.used+g.pending+n) < g.high*float64(g.limit))
		if fits {
			g.pending += n
			g.mu.Unlock()
			return nil
		}
		next := g.sampled
		g.mu.Unlock()
		select {
		case <-next:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run samples Redis until ctx ends. A failed sample changes nothing: while
// Redis is unreachable the writers find out by themselves.
func (g *memGuard) Run(ctx context.Context) {
	t := time.NewTimer(g.period)
	defer t.Stop()
	warnedNoLimit := false
	for {
		used, limit, err := readMemory(ctx, g.client)
		switch {
		case err != nil:
		case limit == 0:
			if !warnedNoLimit {
				g.log.Warn("Redis has no maxmemory: the memory guard cannot protect it; set maxmemory (and maxmemory-policy noeviction)", "redis", g.addr)
				warnedNoLimit = true
			}
			g.apply(used, 0)
		default:
			g.apply(used, limit)
		}
		g.mu.Lock()
		wait := g.period
		if g.quiet {
			wait *= idleSamples
		}
		g.mu.Unlock()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.kick:
		}
	}
}

// apply records a sample, moves between paused and running with
// hysteresis, and wakes the batches waiting for it.
func (g *memGuard) apply(used, limit uint64) {
	ratio := 0.0
	if limit > 0 {
		ratio = float64(used) / float64(limit)
	}
	g.mu.Lock()
	was := g.paused
	switch {
	case limit == 0:
		g.paused = false
	case !g.paused && ratio >= g.high:
		g.paused = true
	case g.paused && ratio <= g.low:
		g.paused = false
	}
	paused := g.paused
	g.quiet = g.known && g.pending == 0 && !paused
	g.known, g.used, g.limit, g.pending = true, used, limit, 0
	close(g.sampled)
	g.sampled = make(chan struct{})
	g.mu.Unlock()
	if paused != was {
		if paused {
			g.log.Warn("Redis memory above the high watermark: relaying paused, Kafka holds the backlog", "redis", g.addr, "used_ratio", ratio, "high", g.high)
		} else {
			g.log.Info("Redis memory below the low watermark: relaying resumed", "redis", g.addr, "used_ratio", ratio, "low", g.low)
		}
	}
	if g.onChange != nil {
		g.onChange(g.addr, paused, ratio)
	}
}

// readMemory returns used_memory and maxmemory from INFO memory; on a
// cluster those of the master nearest its maxmemory (a master without one
// only when none has one): a partition's writes all go to one master, and
// the guard cannot tell which, so the fullest one pauses the relay.
func readMemory(ctx context.Context, c redis.UniversalClient) (used, limit uint64, err error) {
	var mu sync.Mutex
	found := false
	err = queue.ForEachMaster(ctx, c, func(ctx context.Context, m *redis.Client) error {
		u, l, err := readServerMemory(ctx, m)
		if _, cluster := c.(*redis.ClusterClient); err != nil && cluster {
			return fmt.Errorf("Redis %s: %w", m.Options().Addr, err)
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !found || fuller(u, l, used, limit) {
			used, limit, found = u, l, true
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return used, limit, nil
}

// fuller reports whether used u of limit l is nearer its limit than used of
// limit; no limit (0) is the emptiest.
func fuller(u, l, used, limit uint64) bool {
	switch {
	case l == 0:
		return false
	case limit == 0:
		return true
	}
	return float64(u)/float64(l) > float64(used)/float64(limit)
}

// readServerMemory returns one server's used_memory and maxmemory from INFO
// memory.
func readServerMemory(ctx context.Context, c *redis.Client) (used, limit uint64, err error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, err
	}
	var seen int
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			used, err = strconv.ParseUint(v, 10, 64)
			seen++
		case "maxmemory":
			limit, err = strconv.ParseUint(v, 10, 64)
			seen++
		}
		if err != nil {
			return 0, 0, fmt.Errorf("INFO memory %s: %w", k, err)
		}
	}
	if seen != 2 {
		return 0, 0, fmt.Errorf("INFO memory lacks used_memory or maxmemory")
	}
	return used, limit, nil
}
