package coordinator

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// The algorithm, driven through load shapes by a small queue model: one
// partition, one consumer, cycles of 5 s, jobs of 100 ms (a worker serves
// 50 jobs a cycle). Each cycle the model observes the partition, Decide
// chooses, and the consumer runs the target from then on (commands apply
// within a cycle). No Redis, no clock but the injected one.

const (
	cycle    = 5 * time.Second
	perCycle = 50.0 // jobs one worker serves in a cycle
)

func testParams() Params {
	return Params{Threshold: 20, Cycles: 3, Base: 2, MaxFactor: 8, HalfLife: time.Minute}
}

// phase is a stretch of cycles with the same arrivals per cycle (jitter:
// ±that share, drawn from a fixed seed).
type phase struct {
	name     string
	cycles   int
	arrivals float64
	jitter   float64
}

// step is one cycle of a run, as observed and decided.
type step struct {
	phase    string
	at       time.Duration
	ready    float64
	workers  int // observed this cycle
	target   int // decided this cycle
	decision Decision
}

type model struct {
	p       Params
	s       State
	workers int     // what the consumer runs
	ready   float64 // the backlog
	busy    float64 // average busy workers over the last cycle; -1 unknown
	now     time.Time
	lag     int // cycles a command takes to apply (0: within the cycle)
	pending []int
	rng     *rand.Rand
}

func newModel(p Params) *model {
	return &model{p: p, workers: p.Base, busy: -1, now: time.Unix(1_800_000_000, 0), rng: rand.New(rand.NewPCG(1, 2))}
}

func (m *model) run(phases ...phase) []step {
	var out []step
	start := m.now
	for _, ph := range phases {
		for range ph.cycles {
			obs := Observation{Ready: int64(m.ready), Workers: m.workers, Consumers: 1, Busy: m.busy}
			var d Decision
			m.s, d = Decide(m.p, m.s, obs, m.now)
			out = append(out, step{phase: ph.name, at: m.now.Sub(start), ready: m.ready, workers: m.workers, target: m.s.Target, decision: d})
			m.pending = append(m.pending, m.s.Target)
			if len(m.pending) > m.lag {
				m.workers, m.pending = m.pending[0], m.pending[1:]
			}
			arrivals := ph.arrivals * (1 + ph.jitter*(2*m.rng.Float64()-1))
			served := min(m.ready+arrivals, float64(m.workers)*perCycle)
			m.busy = served / perCycle
			m.ready += arrivals - served
			m.now = m.now.Add(cycle)
		}
	}
	return out
}

// turns counts the changes of direction of the target within a phase.
func turns(steps []step, name string) int {
	n, dir := 0, 0
	prev := -1
	for _, s := range steps {
		if s.phase != name {
			continue
		}
		if prev >= 0 && s.target != prev {
			d := 1
			if s.target < prev {
				d = -1
			}
			if dir != 0 && d != dir {
				n++
			}
			dir = d
		}
		prev = s.target
	}
	return n
}

func inPhase(steps []step, name string) []step {
	var out []step
	for _, s := range steps {
		if s.phase == name {
			out = append(out, s)
		}
	}
	return out
}

func trace(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		if s.decision.Type != "" {
			b.WriteString("\n  " + s.at.String() + " " + s.phase + ": " + s.decision.Type + " to " + strconv.Itoa(s.target) + ": " + s.decision.Reason)
		}
	}
	return b.String()
}

// every step respects the base and the max.
func withinBounds(t *testing.T, p Params, steps []step) {
	t.Helper()
	for _, s := range steps {
		if s.target < p.Base || s.target > p.Limit() {
			t.Fatalf("at %s the target is %d, outside [%d, %d]%s", s.at, s.target, p.Base, p.Limit(), trace(steps))
		}
	}
}

// A sustained load far beyond the max: the workers double every cycle
// once the PWQD has been high for K cycles, reach the max
// log2(max/base) - 1 cycles after the first doubling and stay there.
func TestScalingSustainedReachesTheMaxInExpectedCycles(t *testing.T) {
	p := testParams()
	m := newModel(p)
	steps := m.run(phase{name: "sustained", cycles: 60, arrivals: 2000})
	withinBounds(t, p, steps)
	// Cycle 0 sees the partition before the load arrives: cycles 1..K
	// are the K above the threshold.
	first := p.Cycles
	want := first + int(math.Log2(float64(p.MaxFactor))) - 1 // the last doubling
	for i, s := range steps {
		switch {
		case i < first && s.decision.Type != "":
			t.Fatalf("cycle %d: %s before %d cycles above the threshold%s", i, s.decision.Type, p.Cycles, trace(steps))
		case i == want && s.target != p.Limit():
			t.Fatalf("cycle %d: target %d, want the max %d%s", i, s.target, p.Limit(), trace(steps))
		case i >= want && s.target != p.Limit():
			t.Fatalf("cycle %d: left the max (%d)%s", i, s.target, trace(steps))
		}
	}
	if steps[want-1].target == p.Limit() {
		t.Fatalf("reached the max before cycle %d%s", want, trace(steps))
	}
	if d := steps[first].decision; d.Type != queue.ScaleUp || d.Target != 2*p.Base || !strings.HasPrefix(d.Reason, "PWQD threshold exceeded for 3 consecutive cycles") {
		t.Fatalf("first decision %+v", d)
	}
	if n := turns(steps, "sustained"); n != 0 {
		t.Fatalf("%d turns under a sustained load%s", n, trace(steps))
	}
}

// A step from idle to a steady load that needs 6 of up to 16 workers,
// with ±20% noise per cycle: the workers rise, may come down once to
// what the load keeps busy, and then hold: no oscillation, and never so
// few that a backlog builds again. When the load ends they decay to the
// base.
func TestScalingStepLoadDoesNotOscillate(t *testing.T) {
	p := testParams()
	m := newModel(p)
	steps := m.run(
		phase{name: "idle", cycles: 10},
		phase{name: "step", cycles: 240, arrivals: 6 * perCycle, jitter: 0.2},
		phase{name: "quiet", cycles: 240},
	)
	withinBounds(t, p, steps)
	if n := turns(steps, "step"); n > 1 {
		t.Fatalf("%d turns in the steady phase, want at most 1%s", n, trace(steps))
	}
	for _, s := range inPhase(steps, "idle") {
		if s.target != p.Base {
			t.Fatalf("idle: target %d%s", s.target, trace(steps))
		}
	}
	step := inPhase(steps, "step")
	settled := step[len(step)/2:]
	for _, s := range settled {
		if s.target < 7 || s.ready > 6*perCycle {
			t.Fatalf("steady load needing 6 at %s: target %d, backlog %.0f%s", s.at, s.target, s.ready, trace(steps))
		}
	}
	if n := turns(steps, "quiet"); n != 0 {
		t.Fatalf("the decay turned %d times%s", n, trace(steps))
	}
	quiet := inPhase(steps, "quiet")
	if last := quiet[len(quiet)-1]; last.target != p.Base {
		t.Fatalf("after %s of quiet the target is %d, want the base %d%s", last.at-quiet[0].at, last.target, p.Base, trace(steps))
	}
}

// A spike (one cycle with 100 cycles' worth of a worker's jobs) and then
// nothing: up, then down, one turn; the decay is slow (half per
// half-life), not a drop.
func TestScalingSpikeGoesUpThenDecaysSlowly(t *testing.T) {
	p := testParams()
	m := newModel(p)
	steps := m.run(
		phase{name: "spike", cycles: 1, arrivals: 100 * perCycle},
		phase{name: "after", cycles: 200},
	)
	withinBounds(t, p, steps)
	peak, peakAt := 0, time.Duration(0)
	for _, s := range steps {
		if s.target > peak {
			peak, peakAt = s.target, s.at
		}
	}
	if peak <= p.Base {
		t.Fatalf("a spike of %d jobs did not scale up%s", int(100*perCycle), trace(steps))
	}
	var drained time.Duration = -1
	for _, s := range steps {
		if s.at > peakAt && s.ready == 0 && drained < 0 {
			drained = s.at
		}
		// Within one half-life of draining, at least half the peak is up.
		if drained >= 0 && s.at <= drained+p.HalfLife && s.target < peak/2 {
			t.Fatalf("%s after draining the target is %d of a peak of %d: faster than the half-life%s", s.at-drained, s.target, peak, trace(steps))
		}
	}
	all := append(append([]step(nil), inPhase(steps, "spike")...), inPhase(steps, "after")...)
	for i := range all {
		all[i].phase = "whole"
	}
	if n := turns(all, "whole"); n != 1 {
		t.Fatalf("%d turns for a spike, want 1 (up, then down)%s", n, trace(steps))
	}
	if last := steps[len(steps)-1]; last.target != p.Base {
		t.Fatalf("did not decay to the base: %d%s", last.target, trace(steps))
	}
}

// Two waves 30 s apart: the second finds the workers still well up, and
// is back at the max sooner than the first got there.
func TestScalingSecondWaveFindsWorkersUp(t *testing.T) {
	p := testParams()
	m := newModel(p)
	wave := 400 * perCycle // a backlog of 400 worker-cycles
	steps := m.run(
		phase{name: "wave1", cycles: 1, arrivals: wave},
		phase{name: "drain1", cycles: 40},
	)
	var drained time.Duration = -1
	for _, s := range steps {
		if s.phase == "drain1" && s.ready == 0 && drained < 0 {
			drained = s.at
		}
	}
	if drained < 0 {
		t.Fatalf("wave 1 did not drain%s", trace(steps))
	}
	// Cut the quiet to 30 s after the drain.
	m2 := newModel(p)
	cut := int((drained+30*time.Second)/cycle) - 1
	steps = m2.run(
		phase{name: "wave1", cycles: 1, arrivals: wave},
		phase{name: "quiet", cycles: cut},
		phase{name: "wave2", cycles: 1, arrivals: wave},
		phase{name: "drain2", cycles: 60},
	)
	withinBounds(t, p, steps)
	w2 := inPhase(steps, "wave2")[0]
	if w2.workers < p.Limit()/2 {
		t.Fatalf("the second wave found %d workers, want at least half the max (%d)%s", w2.workers, p.Limit()/2, trace(steps))
	}
	cyclesToMax := func(from string) int {
		started := false
		n := 0
		for _, s := range steps {
			if s.phase == from {
				started = true
			}
			if !started {
				continue
			}
			if s.target == p.Limit() {
				return n
			}
			n++
		}
		return -1
	}
	first, second := cyclesToMax("wave1"), cyclesToMax("wave2")
	if second < 0 || second >= first {
		t.Fatalf("back at the max after %d cycles in wave 2, %d in wave 1%s", second, first, trace(steps))
	}
	for _, name := range []string{"quiet", "drain2"} {
		if n := turns(steps, name); n > 1 {
			t.Fatalf("%s: %d turns%s", name, n, trace(steps))
		}
	}
}

// From the max, no load: the decay goes down step by step, never below
// the base, and reaches it after about log2(factor) half-lives (plus the
// last step's rounding).
func TestScalingDrainDecaysToTheBase(t *testing.T) {
	p := testParams()
	m := newModel(p)
	steps := m.run(
		phase{name: "load", cycles: 30, arrivals: 2000},
		phase{name: "drain", cycles: 400},
	)
	withinBounds(t, p, steps)
	drain := inPhase(steps, "drain")
	if n := turns(steps, "drain"); n != 0 {
		t.Fatalf("the drain turned %d times%s", n, trace(steps))
	}
	var idle time.Duration = -1
	var based time.Duration = -1
	for _, s := range drain {
		if s.ready == 0 && s.workers > 0 && idle < 0 && s.decision.Type == queue.ScaleDown {
			idle = s.at
		}
		if s.target == p.Base && based < 0 {
			based = s.at
		}
		if s.decision.Type == queue.ScaleUp {
			t.Fatalf("scaled up while draining%s", trace(steps))
		}
	}
	if based < 0 {
		t.Fatalf("never back to the base%s", trace(steps))
	}
	// 16 -> 2 is 3 half-lives; the last step (2.x -> 2) needs the level
	// under 3: log2(16/3) = 2.4 half-lives.
	if took := based - idle; took < 2*p.HalfLife || took > 4*p.HalfLife {
		t.Fatalf("from the first decay step to the base took %s, want about 2.4 half-lives of %s%s", took, p.HalfLife, trace(steps))
	}
}

// The bounds apply live: a higher base raises the workers at once, a
// lower max lowers them at once; commands never leave [base, max].
func TestScalingRespectsBaseAndMaxChangedLive(t *testing.T) {
	p := testParams()
	m := newModel(p)
	steps := m.run(phase{name: "load", cycles: 20, arrivals: 2000})
	if m.s.Target != 16 {
		t.Fatalf("target %d, want 16", m.s.Target)
	}
	m.p.Max = 10
	steps = m.run(phase{name: "lower max", cycles: 1, arrivals: 2000})
	if d := steps[0].decision; d.Type != queue.ScaleDown || d.Target != 10 {
		t.Fatalf("after lowering the max: %+v", d)
	}
	steps = m.run(phase{name: "still loaded", cycles: 10, arrivals: 2000})
	withinBounds(t, m.p, steps)
	m.p = testParams()
	m.p.Base = 12
	m.ready = 0
	steps = m.run(phase{name: "raise base", cycles: 1})
	if d := steps[0].decision; d.Type != queue.ScaleUp || d.Target != 12 {
		t.Fatalf("after raising the base: %+v", d)
	}
	steps = m.run(phase{name: "quiet", cycles: 200})
	withinBounds(t, m.p, steps)
	if m.s.Target != 12 {
		t.Fatalf("decayed to %d, below the base 12", m.s.Target)
	}
}

// Commands that take a cycle to apply: the workers do not double again
// before the consumers run the last target, so the lag costs a cycle per
// doubling and no overshoot.
func TestScalingWaitsForTheConsumersToApply(t *testing.T) {
	p := testParams()
	m := newModel(p)
	m.lag = 1
	steps := m.run(phase{name: "sustained", cycles: 30, arrivals: 2000})
	withinBounds(t, p, steps)
	for i := 1; i < len(steps); i++ {
		if steps[i].decision.Type == queue.ScaleUp && steps[i].workers < steps[i-1].target {
			t.Fatalf("doubled at %s while the consumers ran %d of %d%s", steps[i].at, steps[i].workers, steps[i-1].target, trace(steps))
		}
	}
	if m.s.Target != p.Limit() {
		t.Fatalf("target %d, want the max", m.s.Target)
	}
}

func TestScalingWithoutConsumersDecidesNothing(t *testing.T) {
	p := testParams()
	s := State{Target: 8, Level: 8, Above: 2}
	s, d := Decide(p, s, Observation{Ready: 1e6}, time.Unix(0, 0))
	if d.Type != "" || s.Target != 8 || s.Above != 0 || d.Reason != "no live consumers" {
		t.Fatalf("without consumers: %+v %+v", s, d)
	}
	// A new holder adopts what runs.
	s, d = Decide(p, State{}, Observation{Workers: 9, Consumers: 2, Busy: -1}, time.Unix(5, 0))
	if d.Type != "" || s.Target != 5 {
		t.Fatalf("adopting 9 workers of 2 consumers: %+v %+v", s, d)
	}
}
