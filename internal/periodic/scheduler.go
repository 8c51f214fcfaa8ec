package periodic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/job"
)

// Clock is the time a Scheduler reads and waits on; tests drive a fake.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

func (SystemClock) Now() time.Time                         { return time.Now() }
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Poster posts a job to its topic through the gate. A nil error means the
// gate accepted it; the job's id is client-chosen, so posting a slot twice
// queues it once.
type Poster interface {
	Post(ctx context.Context, topic string, j job.Job) error
}

// RefusedError is a post the gate refused for good: a 4xx that no retry
// mends (an unknown topic, a job it cannot accept). The scheduler does not
// try that slot again; it skips it and says so in the log and the state.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// refusedNote heads a refused post's State.LastError.
const refusedNote = "refused for good, the slot skipped (not retried): "

// StateStore keeps each schedule's State (in Consul KV).
type StateStore interface {
	Load(ctx context.Context) (map[string]State, error)
	Save(ctx context.Context, name string, s State) error
}

// SchedulerConfig is what a Scheduler needs.
type SchedulerConfig struct {
	Poster Poster
	Store  StateStore
	// Clock defaults to SystemClock.
	Clock Clock
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Metrics, if set, counts fires, skips, catch-ups and errors.
	Metrics *Metrics
	// RetryAfter is the wait before a failed post or state load is tried
	// again. Default 1s.
	RetryAfter time.Duration
}

// Scheduler fires the schedules it is given (Update) on their slots while
// Run runs: the coordinator runs it while it holds its lock.
type Scheduler struct {
	cfg     SchedulerConfig
	updates chan map[string][]byte
	// The schedules in force and the refused values, kept from one Run
	// to the next (Runs never overlap): a leader that loses its lock and
	// takes it again keeps the last good schedule of a name whose value
	// turned bad meanwhile.
	schedules map[string]*Parsed
	bad       map[string]string // name -> the refused value, logged once
}

// NewScheduler builds a Scheduler; call Update with the schedules' values.
func NewScheduler(cfg SchedulerConfig) *Scheduler {
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	return &Scheduler{cfg: cfg, updates: make(chan map[string][]byte, 1), schedules: map[string]*Parsed{}, bad: map[string]string{}}
}

// Update hands the scheduler every schedule's raw value by name (as the
// Consul watch of sluice/<stage>/periodic/ delivers them). The latest call
// wins; it never blocks.
func (s *Scheduler) Update(values map[string][]byte) {
	for {
		select {
		case s.updates <- values:
			return
		default:
		}
		select {
		case <-s.updates: // drop the unread older one
		default:
		}
	}
}

// run is one Run's state.
type run struct {
	*Scheduler
	states map[string]State
	dirty  map[string]bool // states not yet saved
}

// Run fires due slots until ctx ends. It loads the states first (retrying
// while the store fails), so a new leader carries on where the last one
// stopped.
func (s *Scheduler) Run(ctx context.Context) error {
	r := &run{Scheduler: s, dirty: map[string]bool{}}
	for {
		states, err := s.cfg.Store.Load(ctx)
		if err == nil {
			r.states = states
			break
		}
		s.cfg.Log.Warn("periodic: reading the schedules' state failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.cfg.Clock.After(s.cfg.RetryAfter):
		}
	}
	if r.states == nil {
		r.states = map[string]State{}
	}
	for {
		wake := r.round(ctx)
		var timer <-chan time.Time
		if !wake.IsZero() {
			timer = s.cfg.Clock.After(max(wake.Sub(s.cfg.Clock.Now()), 0))
		}
		select {
		case <-ctx.Done():
			r.saveDirty(context.WithoutCancel(ctx))
			// A coordinator that stopped leading says nothing of when the
			// slots are due: the next leader's gauges do.
			for name := range r.schedules {
				r.cfg.Metrics.forget(name)
			}
			return ctx.Err()
		case values := <-s.updates:
			r.apply(values)
		case <-timer:
		}
	}
}

// apply parses the schedules' values. A value that does not parse is
// logged once and the last good schedule of that name stays in force.
func (r *run) apply(values map[string][]byte) {
	for name := range r.schedules {
		if _, ok := values[name]; !ok {
			delete(r.schedules, name)
			r.cfg.Metrics.forget(name)
		}
	}
	for name, v := range values {
		p, err := Parse(name, v)
		if err != nil {
			if r.bad[name] != string(v) {
				r.bad[name] = string(v)
				_, kept := r.schedules[name]
				r.cfg.Log.Error("periodic: refused a schedule's new value", "schedule", name, "err", err, "last_good_kept", kept)
				r.cfg.Metrics.errored(name, "schedule")
			}
			continue
		}
		delete(r.bad, name)
		r.schedules[name] = p
	}
}

// round fires what is due and returns when to look again (zero: never,
// until an update).
func (r *run) round(ctx context.Context) time.Time {
	var wake time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.schedules)) {
		earliest(r.fireDue(ctx, r.schedules[name]))
	}
	if len(r.dirty) > 0 && !r.saveDirty(ctx) {
		earliest(r.cfg.Clock.Now().Add(r.cfg.RetryAfter))
	}
	return wake
}

// fireDue fires p's due slots and its run-now, and returns when p next
// needs a look.
func (r *run) fireDue(ctx context.Context, p *Parsed) time.Time {
	now := r.cfg.Clock.Now()
	st, seen := r.states[p.Name]
	if !seen || st.LastSlot.IsZero() {
		// First sight: slots count from now, and the state says so at once
		// so that a leader taking over does not count from its own now.
		st.LastSlot = now
		r.setState(p.Name, st)
	}
	retry := now.Add(r.cfg.RetryAfter)
	if p.RunNow != "" && p.RunNow != st.RunNow {
		if err := r.post(ctx, p, p.RunNowJob(), now, &st); err != nil && !isRefused(err) {
			return retry
		}
		st.RunNow = p.RunNow
		r.setState(p.Name, st)
	}
	plan := p.Plan(st.LastSlot, now)
	m := r.cfg.Metrics
	m.skipped(p.Name, "missed", plan.Missed)
	m.skipped(p.Name, "paused", plan.Paused)
	for i, slot := range plan.Fire {
		err := r.post(ctx, p, p.Job(slot), now, &st)
		if isRefused(err) {
			// Posting it again would be refused again: the slot is
			// dealt with, skipped; the next slot is tried as usual.
			m.skipped(p.Name, "refused", 1)
			st.LastSlot = slot
			r.setState(p.Name, st)
			continue
		}
		if err != nil {
			// The slot stays due: tried again after RetryAfter, on time
			// while within Grace, later by the catch-up rule.
			if slot.After(st.LastSlot) {
				st.LastSlot = slot.Add(-time.Nanosecond)
			}
			r.setState(p.Name, st)
			return retry
		}
		if i < plan.CaughtUp {
			m.caughtUp(p.Name)
		}
		st.LastSlot = slot
		r.setState(p.Name, st)
	}
	if plan.LastSlot.After(st.LastSlot) {
		st.LastSlot = plan.LastSlot
		r.setState(p.Name, st)
	}
	m.next(p.Name, plan.Next)
	if plan.Next.IsZero() && !p.Paused {
		r.cfg.Log.Warn("periodic: the schedule never fires again", "schedule", p.Name, "cron", p.Cron)
	}
	return plan.Next
}

// post sends one job and records the outcome in st.
func (r *run) post(ctx context.Context, p *Parsed, j job.Job, now time.Time, st *State) error {
	err := r.cfg.Poster.Post(ctx, p.Topic, j)
	was := st.LastError
	st.LastFire, st.LastJob, st.LastTopic, st.LastError = now, j.ID, p.Topic, ""
	if isRefused(err) {
		st.LastError = refusedNote + err.Error()
		r.cfg.Metrics.errored(p.Name, "refused")
		// Said once for as long as the gate refuses the same way, not on
		// every slot of a 1 s schedule.
		log := r.cfg.Log.Debug
		if st.LastError != was {
			log = r.cfg.Log.Error
		}
		log("periodic: the gate refused a slot's job for good; the slot is skipped, not retried, and each later slot tried once: fix the schedule (sluice periodic set) or the topic", "schedule", p.Name, "job", j.ID, "topic", p.Topic, "err", err)
		return err
	}
	if err != nil {
		st.LastError = err.Error()
		r.cfg.Metrics.errored(p.Name, "post")
		if ctx.Err() == nil {
			r.cfg.Log.Warn("periodic: posting a slot's job failed; retrying", "schedule", p.Name, "job", j.ID, "topic", p.Topic, "err", err)
		}
		return err
	}
	r.cfg.Metrics.fired(p.Name, now)
	r.cfg.Log.Info("periodic: fired", "schedule", p.Name, "job", j.ID, "topic", p.Topic)
	return nil
}

func isRefused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}

func (r *run) setState(name string, st State) {
	r.states[name] = st
	r.dirty[name] = true
}

// saveDirty writes the changed states; false if any failed (kept dirty).
func (r *run) saveDirty(ctx context.Context) bool {
	ok := true
	for _, name := range slices.Sorted(maps.Keys(r.dirty)) {
		if err := r.cfg.Store.Save(ctx, name, r.states[name]); err != nil {
			if ok && !errors.Is(err, context.Canceled) {
				r.cfg.Log.Warn("periodic: saving a schedule's state failed; kept to retry", "schedule", name, "err", err)
			}
			ok = false
			continue
		}
		delete(r.dirty, name)
	}
	return ok
}

// String names a plan for logs and test failures.
func (p Plan) String() string {
	return fmt.Sprintf("fire %v (caught up %d), missed %d, paused %d, last %s, next %s", p.Fire, p.CaughtUp, p.Missed, p.Paused, p.LastSlot.Format(time.RFC3339), p.Next.Format(time.RFC3339))
}
