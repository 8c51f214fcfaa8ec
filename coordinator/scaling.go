package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
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

// Params are the scaling parameters: the flags' defaults, overridden live
// by the JSON value of the Consul key sluice/<stage>/scaling (ParseParams).
type Params struct {
	// Threshold is the PWQD (the partition's ready jobs, summed over its
	// topics' queues, per live worker) above which a partition is under
	// pressure. Default 100.
	Threshold float64
	// Cycles (K) is how many consecutive cycles above the threshold it
	// takes to double the workers; while the pressure lasts they double
	// again every cycle after that, up to Max. Default 3.
	Cycles int
	// Base is the fewest workers per consumer: decay stops there.
	// Default 10 (the workers' default pool).
	Base int
	// MaxFactor caps the workers per consumer at Base × MaxFactor, unless
	// Max is set. Default 8.
	MaxFactor int
	// Max caps the workers per consumer; 0: Base × MaxFactor. Default 0.
	Max int
	// HalfLife is how fast the workers decay towards Base once the load
	// has fallen: half the way down per HalfLife. Default 2m.
	HalfLife time.Duration
	// Paused keeps the scaler measuring (metrics) without commanding.
	// Default false.
	Paused bool
}

// DefaultParams are the flags' defaults: the workers' default pool (10)
// as the base.
func DefaultParams() Params {
	return Params{Threshold: 100, Cycles: 3, Base: 10, MaxFactor: 8, HalfLife: 2 * time.Minute}
}

// Limit is the most workers per consumer the parameters allow.
func (p Params) Limit() int {
	if p.Max > 0 {
		return p.Max
	}
	return p.Base * p.MaxFactor
}

// Check reports a parameter that makes no sense.
func (p Params) Check() error {
	switch {
	case !(p.Threshold > 0) || math.IsInf(p.Threshold, 0):
		return fmt.Errorf("threshold %g: want a positive PWQD", p.Threshold)
	case p.Cycles < 1:
		return fmt.Errorf("cycles %d: want at least 1", p.Cycles)
	case p.Base < 1 || p.Base > queue.MaxWorkers:
		return fmt.Errorf("base %d: want 1..%d", p.Base, queue.MaxWorkers)
	case p.MaxFactor < 1:
		return fmt.Errorf("max factor %d: want at least 1", p.MaxFactor)
	case p.Max != 0 && p.Max < p.Base:
		return fmt.Errorf("max %d is below the base %d", p.Max, p.Base)
	case p.Limit() > queue.MaxWorkers:
		return fmt.Errorf("max workers %d: want at most %d", p.Limit(), queue.MaxWorkers)
	case p.HalfLife <= 0:
		return fmt.Errorf("half-life %s: want a positive duration", p.HalfLife)
	}
	return nil
}

func (p Params) String() string {
	return fmt.Sprintf("threshold %g, %d cycles, base %d, max %d, half-life %s, paused %t",
		p.Threshold, p.Cycles, p.Base, p.Limit(), p.HalfLife, p.Paused)
}

// paramsJSON is the Consul value; absent fields keep the defaults.
type paramsJSON struct {
	Threshold *float64      `json:"threshold"`
	Cycles    *int          `json:"cycles"`
	Base      *int          `json:"base"`
	MaxFactor *int          `json:"maxFactor"`
	Max       *int          `json:"max"`
	HalfLife  *jsonDuration `json:"halfLife"`
	Paused    *bool         `json:"paused"`
}

// jsonDuration is "90s", "2m" or a number of seconds.
type jsonDuration time.Duration

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		*d = jsonDuration(v)
		return err
	}
	secs, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return errors.New(`want a duration such as "2m" or a number of seconds`)
	}
	*d = jsonDuration(secs * float64(time.Second))
	return nil
}

// ParseParams reads the Consul value of sluice/<stage>/scaling, such as
//
//	{"threshold": 100, "cycles": 3, "base": 2, "maxFactor": 8, "halfLife": "2m"}
//
// Fields left out take their values from defaults (the flags); "max" sets
// the cap directly instead of "maxFactor"; {"paused": true} stops commands.
// Unknown fields are errors: a typo must not pass for a default.
func ParseParams(value []byte, defaults Params) (Params, error) {
	var v paramsJSON
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return Params{}, fmt.Errorf("scaling parameters %q: %v", value, err)
	}
	if dec.More() {
		return Params{}, fmt.Errorf("scaling parameters %q: more than one JSON value", value)
	}
	p := defaults
	if v.Threshold != nil {
		p.Threshold = *v.Threshold
	}
	if v.Cycles != nil {
		p.Cycles = *v.Cycles
	}
	if v.Base != nil {
		p.Base = *v.Base
	}
	if v.MaxFactor != nil {
		p.MaxFactor, p.Max = *v.MaxFactor, 0
	}
	if v.Max != nil {
		p.Max = *v.Max
	}
	if v.HalfLife != nil {
		p.HalfLife = time.Duration(*v.HalfLife)
	}
	if v.Paused != nil {
		p.Paused = *v.Paused
	}
	if err := p.Check(); err != nil {
		return Params{}, fmt.Errorf("scaling parameters %q: %v", value, err)
	}
	return p, nil
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
