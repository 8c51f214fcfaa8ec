package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/scaling"
)

// resendAfter is how many cycles in a row a live consumer may run another
// count than the target before the command is sent again (it missed the
// command: its checkpoint was lost, or it started between a command and
// its checkpoint).
const resendAfter = 2

// scaler runs the scaling cycle over every partition while its coordinator
// holds the lock: it reads each partition's load (Pool.Load: the ready
// depth summed over the stage's topics, heartbeats, checkpoint; a script
// call for the partition and one per topic), decides (Decide) and pushes
// the command onto the partition's cmd list. Workers are per partition,
// whatever the topic: a consumer of a partition serves every topic's queue
// there, so the partition's PWQD is the ready jobs of all its queues per
// live worker. The topics are read from the registry each cycle, so a
// topic a relay registers later counts from the next cycle. A new holder
// starts from the partitions' checkpoints, so a failover changes nobody's
// workers.
type scaler struct {
	c     *Coordinator
	valid func() bool
	log   *slog.Logger
	parts []partScaling
	// topics are the last topics read from the registry: kept while it
	// cannot be read, so the partitions on other Redis servers go on.
	topics        []string
	topicsFailing bool
	// idle are the partitions without a live consumer, as last logged:
	// one line per change of the set, not one per partition (a stage
	// with no worker yet has them all).
	idle []int
}

// partScaling is what the scaler keeps of a partition between cycles.
type partScaling struct {
	State
	beats    map[string]queue.Beat // the last cycle's live heartbeats, for busy time
	mismatch int                   // consecutive cycles a consumer ran another count than Target
	failing  bool                  // Redis failed at the last read (logged once)
	idle     bool                  // no live consumer at the last read (logged once)
}

func (c *Coordinator) newScaler(valid func() bool) *scaler {
	return &scaler{c: c, valid: valid, log: c.log.With("part", "scaler"), parts: make([]partScaling, c.cfg.Partitions)}
}

// run runs a cycle at once, then every ScaleEvery, until ctx ends.
func (s *scaler) run(ctx context.Context) {
	defer func() {
		s.c.m.resetScaling()
		for i := range s.c.targets {
			s.c.targets[i].Store(0)
		}
	}()
	p := s.c.Params()
	s.log.Info("scaler started", "every", s.c.cfg.ScaleEvery, "params", p.String())
	t := time.NewTicker(s.c.cfg.ScaleEvery)
	defer t.Stop()
	for {
		s.cycle(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// cycle reads, decides and commands every partition once.
func (s *scaler) cycle(ctx context.Context) {
	p := s.c.Params()
	s.c.m.scaleCycles.Inc()
	if topics, err := s.c.topics(ctx); err != nil {
		if ctx.Err() != nil {
			return
		}
		s.c.m.redisErrors.Inc()
		if !s.topicsFailing {
			s.topicsFailing = true
			s.log.Warn("scaler: reading the stage's topics failed; reading the last known ones", "topics", s.topics, "err", err)
		}
	} else {
		if s.topicsFailing {
			s.topicsFailing = false
			s.log.Info("scaler: the stage's topics can be read again")
		}
		if !slices.Equal(topics, s.topics) {
			s.log.Info("scaler: the ready depth sums these topics' queues", "topics", topics)
		}
		s.topics = topics
	}
	for part := range s.parts {
		if ctx.Err() != nil || !s.valid() {
			return
		}
		s.partition(ctx, p, part)
	}
	s.logIdle()
}

// logIdle logs the partitions without a live consumer when their set
// changed since the last line.
func (s *scaler) logIdle() {
	var idle []int
	for part := range s.parts {
		if s.parts[part].idle {
			idle = append(idle, part)
		}
	}
	if slices.Equal(idle, s.idle) {
		return
	}
	if len(idle) > 0 {
		s.log.Info("scaler: no live consumer on these partitions; nothing to command there until a worker serves them", "partitions", fmt.Sprint(idle))
	} else {
		s.log.Info("scaler: every partition has live consumers again")
	}
	s.idle = idle
}

func (s *scaler) partition(ctx context.Context, p Params, part int) {
	st := &s.parts[part]
	log := s.log.With("partition", part)
	label := strconv.Itoa(part)
	load, err := s.c.pool.Load(ctx, part, s.topics, 10*s.c.cfg.ConsumerTTL)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		s.c.m.redisErrors.Inc()
		if !st.failing {
			st.failing = true
			log.Warn("scaler: reading the partition failed; its workers stay as they are until it answers", "err", err)
		}
		return
	}
	if st.failing {
		st.failing = false
		log.Info("scaler: the partition answers again")
	}
	obs, live := s.observe(st, load)
	m := s.c.m
	m.scaleReady.WithLabelValues(label).Set(float64(obs.Ready))
	m.scaleWorkers.WithLabelValues(label).Set(float64(obs.Workers))
	m.scaleConsumers.WithLabelValues(label).Set(float64(obs.Consumers))
	m.scaleBusy.WithLabelValues(label).Set(max(obs.Busy, 0))
	switch {
	case obs.Workers > 0:
		m.scalePWQD.WithLabelValues(label).Set(obs.PWQD())
	case obs.Ready > 0:
		m.scalePWQD.WithLabelValues(label).Set(math.Inf(1))
	default:
		m.scalePWQD.WithLabelValues(label).Set(0)
	}
	if obs.Consumers == 0 {
		if !st.idle {
			st.idle = true
			// Summed over the partitions once a cycle, at info (logIdle).
			log.Debug("scaler: no live consumer on the partition; nothing to command", "ready", obs.Ready)
		}
	} else if st.idle {
		st.idle = false
		log.Debug("scaler: the partition has live consumers again", "consumers", obs.Consumers, "workers", obs.Workers)
	}
	if pin, ok := s.c.Pin(part); ok {
		// An operator's pin comes before the parameters, paused or not
		// (docs/admin.md#scaling); with no live consumer there is nobody
		// to command, as for Decide.
		if obs.Consumers > 0 {
			s.pinnedCycle(ctx, st, part, pin, load.Checkpoint, live, log)
		}
		return
	}
	if p.Paused {
		// Measure, command nothing; on resume, start from what runs.
		st.State = State{}
		return
	}
	st.State = st.seeded(load.Checkpoint)
	was := st.Target
	next, d := Decide(p, st.State, obs, s.c.cfg.Now())
	if d.Type == "" {
		d = s.resend(st, next.Target, live, d)
	}
	if d.Type != "" {
		if !s.push(ctx, part, d, was, log,
			"pwqd", round1(d.PWQD), "ready", obs.Ready, "live_workers", obs.Workers, "consumers", obs.Consumers, "busy", round1(obs.Busy)) {
			return // the state stays: the decision is made again
		}
	} else if d.Reason != "" {
		log.Debug("scaling: no command", "reason", d.Reason, "workers", next.Target)
	}
	st.State = next
	s.setTarget(part, st.Target)
}

// setTarget records partition part's target for the metrics and the admin
// API (0: unknown).
func (s *scaler) setTarget(part, target int) {
	s.c.targets[part].Store(int64(target))
	if target > 0 {
		s.c.m.scaleTarget.WithLabelValues(strconv.Itoa(part)).Set(float64(target))
	}
}

// seeded is st, or, with no target yet, what the consumers were last told
// (the checkpoint): a new holder goes on from there (the decay's clock
// starts over).
func (st State) seeded(checkpoint int) State {
	if st.Target == 0 && checkpoint > 0 {
		st.Target, st.Level = checkpoint, float64(checkpoint)
	}
	return st
}

// push pushes decision d's command onto partition part's cmd list, counts
// it and logs it ("scaling decision": d, was the previous target, then
// attrs). It reports whether the command went out: when the lock is gone
// (the next holder decides) or Redis fails, it did not, and the caller
// keeps its state so that the decision is made again next cycle.
func (s *scaler) push(ctx context.Context, part int, d Decision, was int, log *slog.Logger, attrs ...any) bool {
	if !s.valid() {
		return false
	}
	cmd := queue.Command{Type: d.Type, Partition: part, TargetWorkers: d.Target, Reason: d.Reason}
	if err := s.c.pool.PushCommand(ctx, cmd); err != nil {
		if ctx.Err() == nil {
			s.c.m.redisErrors.Inc()
			log.Warn("scaler: pushing a command failed; deciding again next cycle", "type", d.Type, "target", d.Target, "err", err)
		}
		return false
	}
	s.c.m.scaleDecisions.WithLabelValues(strconv.Itoa(part), d.Type).Inc()
	log.Info("scaling decision", append([]any{"type", d.Type, "workers", d.Target, "was", was, "reason", d.Reason}, attrs...)...)
	return true
}

// pinnedCycle is a pinned partition's cycle: the pin's command, if one is
// due, pushed as Decide's are.
func (s *scaler) pinnedCycle(ctx context.Context, st *partScaling, part int, pin admin.Pin, checkpoint int, live map[string]queue.Beat, log *slog.Logger) {
	next, d := s.pinned(st, pin, checkpoint, live)
	if d.Type != "" && !s.push(ctx, part, d, st.Target, log) {
		return // the state stays: the decision is made again
	}
	st.State = next
	s.setTarget(part, st.Target)
}

// observe turns a partition's load into an Observation: the live
// heartbeats (younger than ConsumerTTL by Redis's clock) summed, and their
// busy time since the last cycle's heartbeats. It returns the live ones.
func (s *scaler) observe(st *partScaling, load queue.PartitionLoad) (Observation, map[string]queue.Beat) {
	obs := Observation{Ready: load.Ready}
	live := map[string]queue.Beat{}
	unknown := false
	for id, b := range load.Consumers {
		if load.Now.Sub(b.At) > s.c.cfg.ConsumerTTL {
			continue
		}
		live[id] = b
		obs.Workers += b.Workers
		obs.Consumers++
		prev, ok := st.beats[id]
		if !ok || !b.At.After(prev.At) || b.Busy < prev.Busy {
			unknown = true // new, silent since the last cycle, or restarted
			continue
		}
		obs.Busy += float64(b.Busy-prev.Busy) / float64(b.At.Sub(prev.At))
	}
	if unknown {
		obs.Busy = -1
	}
	st.beats = live
	return obs, live
}

// resend sends the target again when a live consumer has run another count
// for resendAfter cycles: it missed the command (a lost checkpoint, or a
// consumer that started between a command and its checkpoint).
func (s *scaler) resend(st *partScaling, target int, live map[string]queue.Beat, d Decision) Decision {
	var off []int
	for _, b := range live {
		if b.Workers != target {
			off = append(off, b.Workers)
		}
	}
	if target == 0 || len(off) == 0 {
		st.mismatch = 0
		return d
	}
	if st.mismatch++; st.mismatch < resendAfter {
		return d
	}
	st.mismatch = 0
	slices.Sort(off)
	d.Type, d.Target = queue.ScaleDown, target
	if off[0] < target {
		d.Type = queue.ScaleUp
	}
	d.Reason = fmt.Sprintf("consumers run %v workers, not the target %d: the command is sent again", off, target)
	return d
}

// Params are the scaling parameters in force: the Consul key's, else the
// configured defaults.
func (c *Coordinator) Params() Params { return *c.params.Load() }

// watchParams follows sluice/<stage>/scaling until ctx ends. A missing key
// means the configured defaults; an invalid value, or Consul failing,
// keeps the last known parameters.
func (c *Coordinator) watchParams(ctx context.Context) {
	key, _ := scaling.Key(c.cfg.Stage)
	log := c.log.With("key", key)
	consul.Watch(ctx, c.consul, key, consul.WatchOptions{Log: log}, func(value []byte, exists bool) {
		p := c.cfg.Scaling
		if exists {
			var err error
			if p, err = ParseParams(value, c.cfg.Scaling); err != nil {
				log.Error("ignoring invalid scaling parameters; the last ones stay in force", "err", err, "in_force", c.Params().String())
				return
			}
		}
		c.params.Store(&p)
		log.Info("scaling parameters in force", "params", p.String(), "from_consul", exists)
	})
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }
