package periodic

import (
	"encoding/json"
	"fmt"
	"time"
)

// State is what the scheduler remembers of a schedule, kept as JSON in
// Redis (PoolStore): written by the leader after each fire, read by the
// next leader and by the console.
type State struct {
	// LastSlot is the latest slot dealt with: fired, or skipped (missed
	// or paused). Slots after it are still to come.
	LastSlot time.Time `json:"last_slot"`
	// LastFire is when the last job was posted, LastJob its id, LastError
	// the last post's error ("" when it succeeded).
	LastFire  time.Time `json:"last_fire,omitzero"`
	LastJob   string    `json:"last_job,omitempty"`
	LastTopic string    `json:"last_topic,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	// RunNow is the last run-now nonce fired, so each is fired once.
	RunNow string `json:"run_now,omitempty"`
}

// DecodeState reads a State's JSON.
func DecodeState(b []byte) (State, error) {
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("periodic: state: %v", err)
	}
	return s, nil
}

// Encode is the State's JSON.
func (s State) Encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

// Plan is what is due for one schedule at a moment.
type Plan struct {
	// Fire are the slots to fire now, oldest first: every on-time slot
	// (at most Grace old) and the latest CatchUp missed ones.
	Fire []time.Time
	// Missed counts the missed slots not fired (older than Grace, beyond
	// CatchUp); CaughtUp how many of Fire were missed ones.
	Missed, CaughtUp int
	// Paused counts slots that passed while the schedule was paused.
	Paused int
	// LastSlot is the State's LastSlot once Fire is done: the latest slot
	// at or before now, or the old one when none passed.
	LastSlot time.Time
	// Next is the first slot after now (zero: the expression never fires
	// again, as a date in the past or "30 Feb").
	Next time.Time
}

// maxSlotsScanned bounds the slots Plan walks after a long outage of a
// frequent schedule (a 1s schedule down for 28 hours); past it the missed
// slots are skipped without being counted one by one, none caught up.
const maxSlotsScanned = 100_000

// Plan says what is due at now for a schedule whose last dealt-with slot
// is last. A zero last (a schedule seen for the first time) is now: no
// slot before the scheduler first saw a schedule fires.
func (p *Parsed) Plan(last, now time.Time) Plan {
	if last.IsZero() {
		last = now
	}
	plan := Plan{LastSlot: last}
	grace := p.GraceOrDefault()
	var missed []time.Time // kept: the latest CatchUp
	s := p.Next(last)
	for n := 0; !s.IsZero() && !s.After(now); n++ {
		if n == maxSlotsScanned && now.Sub(s) > grace {
			// Too many to walk (a frequent schedule after a long outage):
			// count the rest of the missed ones as one, catch none of
			// them up, and go on from the on-time window.
			plan.Missed += len(missed) + 1
			missed = nil
			s = p.Next(now.Add(-grace))
			continue
		}
		plan.LastSlot = s
		switch {
		case p.Paused:
			plan.Paused++
		case now.Sub(s) <= grace:
			plan.Fire = append(plan.Fire, s)
		default:
			missed = append(missed, s)
			if len(missed) > p.CatchUp {
				missed = missed[1:]
				plan.Missed++
			}
		}
		s = p.Next(s)
	}
	plan.CaughtUp = len(missed)
	plan.Fire = append(missed, plan.Fire...)
	plan.Next = s
	return plan
}
