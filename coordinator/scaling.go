package coordinator

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/scaling"
)

// The scaling algorithm, "exponential and time decay", as a pure function
// (Decide) of the parameters, the partition's state, what a cycle observed
// and the time: no I/O, so that tests drive it through whole load shapes
// with an injected clock. scaler.go does the I/O.

// decayUtilization is the busy share decay aims at: the workers never
// decay below the busy ones / 0.8. Without that floor, a steady load that
// needs, say, 5 workers would see 8 decay to 4, a backlog, 8 again: an
// oscillation with the half-life as its period.
const decayUtilization = 0.8

// Params are the scaling parameters: the flags' defaults (Config.Scaling),
// overridden live by the JSON value of the Consul key
// sluice/<stage>/scaling (ParseParams). The type lives in internal/scaling,
// which the console shares to show them.
type Params = scaling.Params

// DefaultParams are the flags' defaults: the workers' default pool (10)
// as the base.
func DefaultParams() Params { return scaling.DefaultParams() }

// ParseParams reads the Consul value of sluice/<stage>/scaling over
// defaults (internal/scaling.ParseParams, where the value is described).
func ParseParams(value []byte, defaults Params) (Params, error) {
	return scaling.ParseParams(value, defaults)
}

// State is what the scaler remembers of a partition between cycles.
type State struct {
	// Target is the workers per consumer last commanded, or adopted from
	// what runs; 0 until known.
	Target int
	// Level is the decaying worker count: Target is ceil(Level) while
	// the load is low, and Level is Target while it is high.
	Level float64
	// Above counts consecutive cycles with the PWQD above the threshold.
	Above int
	// At is the last cycle's time (the decay's clock).
	At time.Time
}

// Observation is what a cycle read of a partition.
type Observation struct {
	// Ready is the ready depth: jobs a consumer could claim now, summed
	// over the partition's queues (one per topic).
	Ready int64
	// Workers is the live workers: the pool sizes in the heartbeats of
	// the partition's live consumers, summed.
	Workers int
	// Consumers is how many live consumers there are.
	Consumers int
	// Busy is how many workers the load kept busy on average since the
	// last cycle, summed over the consumers; negative when unknown (a
	// consumer's first heartbeat): then nothing decays.
	Busy float64
}

// PWQD is the per-worker queue depth: ready jobs per live worker.
func (o Observation) PWQD() float64 {
	if o.Workers <= 0 {
		return math.Inf(1)
	}
	return float64(o.Ready) / float64(o.Workers)
}

// Decision is what Decide chose: a command (Type non-empty) or none, with
// the reason either way.
type Decision struct {
	Type   string // queue.ScaleUp, queue.ScaleDown, or "" for no command
	Target int    // the workers per consumer from now on
	PWQD   float64
	Reason string
}

// Decide is one cycle of the algorithm for one partition:
//
//   - The workers stay within [Base, Limit]: a target outside (the
//     parameters changed) is brought back first.
//   - Exponential up: once the PWQD has been above the threshold for
//     Cycles consecutive cycles, the target doubles, and doubles again
//     every further cycle the pressure lasts, up to Limit. It does not
//     double again before the consumers run the last target (Workers
//     reaches Target per consumer), so a slow command is not taken for
//     too little capacity.
//   - Time decay down: while the PWQD is at or below the threshold, the
//     level decays by half per HalfLife towards Base, and never below
//     what the load keeps busy (Busy / 0.8): a steady load keeps its
//     workers, and a second wave soon after the first finds them up.
//
// With no live consumer nothing is decided: there is nobody to command.
func Decide(p Params, s State, o Observation, now time.Time) (State, Decision) {
	var dt time.Duration
	if !s.At.IsZero() {
		dt = max(now.Sub(s.At), 0)
	}
	s.At = now
	if o.Consumers <= 0 || o.Workers <= 0 {
		s.Above = 0
		return s, Decision{Target: s.Target, PWQD: math.NaN(), Reason: "no live consumers"}
	}
	pwqd := o.PWQD()
	limit := p.Limit()
	if s.Target == 0 {
		// A new holder adopts what runs (the checkpoint, normally).
		s.Target = (o.Workers + o.Consumers - 1) / o.Consumers
		s.Level = float64(s.Target)
	}
	switch {
	case s.Target < p.Base:
		s.Target, s.Level, s.Above = p.Base, float64(p.Base), 0
		return s, Decision{Type: queue.ScaleUp, Target: s.Target, PWQD: pwqd,
			Reason: fmt.Sprintf("below the base: raised to %d workers", p.Base)}
	case s.Target > limit:
		s.Target, s.Level, s.Above = limit, float64(limit), 0
		return s, Decision{Type: queue.ScaleDown, Target: s.Target, PWQD: pwqd,
			Reason: fmt.Sprintf("above the maximum: lowered to %d workers", limit)}
	}
	if pwqd > p.Threshold {
		s.Above++
		s.Level = float64(s.Target)
		d := Decision{Target: s.Target, PWQD: pwqd}
		switch {
		case s.Above < p.Cycles:
			d.Reason = fmt.Sprintf("PWQD %.1f above the threshold %g for %d of %d cycles", pwqd, p.Threshold, s.Above, p.Cycles)
		case s.Target >= limit:
			d.Reason = fmt.Sprintf("PWQD %.1f above the threshold %g, at the maximum of %d workers", pwqd, p.Threshold, limit)
		case o.Workers < s.Target*o.Consumers:
			d.Reason = fmt.Sprintf("PWQD %.1f above the threshold %g; waiting for the consumers to run %d workers (%d live)", pwqd, p.Threshold, s.Target, o.Workers)
		default:
			s.Target = min(2*s.Target, limit)
			s.Level = float64(s.Target)
			d.Type, d.Target = queue.ScaleUp, s.Target
			d.Reason = fmt.Sprintf("PWQD threshold exceeded for %d consecutive cycles (PWQD %.1f > %g: %d ready / %d workers)",
				s.Above, pwqd, p.Threshold, o.Ready, o.Workers)
		}
		return s, d
	}
	s.Above = 0
	level := s.Level * math.Exp2(-dt.Seconds()/p.HalfLife.Seconds())
	need := float64(s.Target) // busy unknown: hold
	if o.Busy >= 0 {
		need = o.Busy / decayUtilization / float64(o.Consumers)
	}
	s.Level = min(max(level, need, float64(p.Base)), float64(s.Target))
	next := int(math.Ceil(s.Level - 1e-9))
	if next >= s.Target {
		return s, Decision{Target: s.Target, PWQD: pwqd}
	}
	s.Target = next
	return s, Decision{Type: queue.ScaleDown, Target: next, PWQD: pwqd,
		Reason: fmt.Sprintf("load fell (PWQD %.1f <= %g, %.1f of %d workers busy): decaying with half-life %s",
			pwqd, p.Threshold, max(o.Busy, 0), o.Workers, p.HalfLife)}
}
