package periodic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
)

func mustParse(t *testing.T, name, value string) *Parsed {
	t.Helper()
	p, err := Parse(name, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var quiet = slog.New(slog.DiscardHandler)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func TestPlanFiresOnTimeSlotsAndCatchesUpTheLatestMissed(t *testing.T) {
	p := mustParse(t, "every-minute", `{"every":"1m","topic":"jobs","type":"t","catch_up":2}`)
	// Down from 12:00 to 12:10:30: slots 12:01..12:10; 12:10 is within
	// the minute of grace, 12:01..12:09 are missed and the latest two of
	// those are caught up.
	plan := p.Plan(t0, t0.Add(10*time.Minute+30*time.Second))
	want := []time.Time{t0.Add(8 * time.Minute), t0.Add(9 * time.Minute), t0.Add(10 * time.Minute)}
	if fmt.Sprint(plan.Fire) != fmt.Sprint(want) || plan.CaughtUp != 2 || plan.Missed != 7 {
		t.Fatalf("plan: %s, want fire %v, caught up 2, missed 7", plan, want)
	}
	if !plan.LastSlot.Equal(t0.Add(10*time.Minute)) || !plan.Next.Equal(t0.Add(11*time.Minute)) {
		t.Fatalf("plan: %s", plan)
	}
	skip := mustParse(t, "skip", `{"every":"1m","topic":"jobs","type":"t"}`)
	if plan := skip.Plan(t0, t0.Add(10*time.Minute+30*time.Second)); len(plan.Fire) != 1 || plan.Missed != 9 {
		t.Fatalf("catch_up 0 fires only the on-time slot: %s", plan)
	}
	paused := mustParse(t, "paused", `{"every":"1m","topic":"jobs","type":"t","paused":true,"catch_up":5}`)
	if plan := paused.Plan(t0, t0.Add(3*time.Minute)); len(plan.Fire) != 0 || plan.Paused != 3 || !plan.LastSlot.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("paused: %s", plan)
	}
	if plan := p.Plan(time.Time{}, t0); len(plan.Fire) != 0 || !plan.Next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("a schedule seen for the first time fires nothing from before: %s", plan)
	}
}

func TestCronWithSecondsAndATimeZone(t *testing.T) {
	p := mustParse(t, "berlin", `{"cron":"15 30 9 * * MON-FRI","timezone":"Europe/Berlin","topic":"jobs","type":"t"}`)
	// 2026-11-25 is a Wednesday; Berlin is UTC+1 in November.
	if got, want := p.Next(t0), time.Date(2026, 11, 26, 8, 30, 15, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("next after %s: %s, want %s", t0, got.UTC(), want)
	}
	five := mustParse(t, "five", `{"cron":"*/15 * * * *","topic":"jobs","type":"t"}`)
	if got := five.Next(t0); !got.Equal(t0.Add(15 * time.Minute)) {
		t.Fatalf("a five-field cron: next %s", got)
	}
	if got := mustParse(t, "hourly", `{"cron":"@hourly","topic":"jobs","type":"t"}`).Next(t0); !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("@hourly: next %s", got)
	}
}

func TestBadSchedulesAreRefusedNamingTheField(t *testing.T) {
	for value, field := range map[string]string{
		`{"cron":"61 * * * * *","topic":"jobs","type":"t"}`:          "cron",
		`{"every":"1m","cron":"@daily","topic":"jobs","type":"t"}`:   "cron",
		`{"every":"100ms","topic":"jobs","type":"t"}`:                "every",
		`{"topic":"jobs","type":"t"}`:                                "cron",
		`{"every":"1m","type":"t"}`:                                  "topic",
		`{"every":"1m","topic":"jobs"}`:                              "type",
		`{"every":"1m","topic":"jobs","type":"t","timezone":"Mars"}`: "timezone",
		`{"every":"1m","topic":"jobs","type":"t","catch_up":-1}`:     "catch_up",
		`{"every":"1m","topic":"jobs","type":"t","priority":99}`:     "priority",
		`{"every":"1m","topic":"jobs","type":"t","run_now":"a b"}`:   "run_now",
		`{"every":"1m","topic":"jobs","type":"t","payload":}`:        "invalid character",
	} {
		if _, err := Parse("s", []byte(value)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", value, err, field)
		}
	}
	if err := CheckName("a/b"); err == nil {
		t.Error("a name with '/' was accepted")
	}
}

func TestJobIDsAreDeterministicPerSlot(t *testing.T) {
	p := mustParse(t, "nightly", `{"every":"24h","topic":"jobs","type":"report","group":"g","payload":{"a":1}}`)
	j := p.Job(t0)
	if j.ID != "periodic:nightly:"+fmt.Sprint(t0.Unix()) || j.Type != "report" || j.Group != "g" || string(j.Payload) != `{"a":1}` {
		t.Fatalf("slot job: %+v", j)
	}
	if p.Job(t0).ID != j.ID || p.Job(t0.Add(time.Second)).ID == j.ID {
		t.Fatal("a slot's id is not its own")
	}
}

// fakeClock moves only when the test says so; After's channels fire then.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	waiting chan struct{} // a signal per After call
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, waiting: make(chan struct{}, 1000)}
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	c.waiting <- struct{}{}
	return ch
}

// nextWake is the earliest time a waiter waits for (zero: none).
func (c *fakeClock) nextWake() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var at time.Time
	for _, w := range c.waiters {
		if at.IsZero() || w.at.Before(at) {
			at = w.at
		}
	}
	return at
}

// Advance moves the clock and fires the waiters due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
}

// recorder is a Poster and a StateStore in memory.
type recorder struct {
	mu     sync.Mutex
	posted []string
	fail   error
	states map[string]State
}

func (r *recorder) Post(_ context.Context, topic string, j job.Job) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.posted = append(r.posted, topic+"/"+j.ID)
	return nil
}

func (r *recorder) Posted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.posted...)
}

func (r *recorder) Load(context.Context) (map[string]State, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]State{}
	for k, v := range r.states {
		out[k] = v
	}
	return out, nil
}

func (r *recorder) Save(_ context.Context, name string, s State) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.states == nil {
		r.states = map[string]State{}
	}
	r.states[name] = s
	return nil
}

// step advances the clock by d once the scheduler waits, and waits until
// it waits again (its round is done).
func step(t *testing.T, c *fakeClock, d time.Duration) {
	t.Helper()
	select {
	case <-c.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler never waited")
	}
	c.Advance(d)
}

func TestSchedulerFiresSlotsTakesLiveChangesAndKeepsTheLastGoodSchedule(t *testing.T) {
	clock := newFakeClock(t0)
	rec := &recorder{}
	s := NewScheduler(SchedulerConfig{Poster: rec, Store: rec, Clock: clock, Log: quiet})
	s.Update(map[string][]byte{"tick": []byte(`{"every":"10s","topic":"jobs","type":"t"}`)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	step(t, clock, 10*time.Second) // 12:00:10
	step(t, clock, 10*time.Second) // 12:00:20
	waitPosted(t, rec, "jobs/"+JobID("tick", t0.Add(10*time.Second)), "jobs/"+JobID("tick", t0.Add(20*time.Second)))

	// A bad value is refused; the last good schedule goes on firing.
	s.Update(map[string][]byte{"tick": []byte(`{"every":"1ms","topic":"jobs","type":"t"}`)})
	step(t, clock, 10*time.Second) // 12:00:30
	waitPosted(t, rec, "jobs/"+JobID("tick", t0.Add(10*time.Second)), "jobs/"+JobID("tick", t0.Add(20*time.Second)), "jobs/"+JobID("tick", t0.Add(30*time.Second)))

	// A live change: now every 20s to another topic, and a run-now.
	s.Update(map[string][]byte{"tick": []byte(`{"every":"20s","topic":"other","type":"t","run_now":"n1"}`)})
	step(t, clock, 10*time.Second) // 12:00:40
	waitPosted(t, rec, "jobs/"+JobID("tick", t0.Add(10*time.Second)), "jobs/"+JobID("tick", t0.Add(20*time.Second)), "jobs/"+JobID("tick", t0.Add(30*time.Second)),
		"other/"+RunNowID("tick", "n1"), "other/"+JobID("tick", t0.Add(40*time.Second)))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if st := rec.states["tick"]; !st.LastSlot.Equal(t0.Add(40*time.Second)) || st.RunNow != "n1" {
		t.Fatalf("saved state: %+v", st)
	}

	// The lock lost, the value turns bad, the lock taken again: the last
	// good schedule is still in force.
	s.Update(map[string][]byte{"tick": []byte(`{"every":"0s","topic":"other","type":"t"}`)})
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- s.Run(ctx) }()
	step(t, clock, 20*time.Second) // 12:01:00
	waitPosted(t, rec, "jobs/"+JobID("tick", t0.Add(10*time.Second)), "jobs/"+JobID("tick", t0.Add(20*time.Second)), "jobs/"+JobID("tick", t0.Add(30*time.Second)),
		"other/"+RunNowID("tick", "n1"), "other/"+JobID("tick", t0.Add(40*time.Second)), "other/"+JobID("tick", t0.Add(60*time.Second)))
}

func TestAFailedPostIsRetriedWithinGraceAndANewLeaderCarriesOn(t *testing.T) {
	clock := newFakeClock(t0)
	rec := &recorder{fail: errors.New("gate down")}
	value := map[string][]byte{"tick": []byte(`{"every":"1m","topic":"jobs","type":"t","grace":"30s"}`)}
	s := NewScheduler(SchedulerConfig{Poster: rec, Store: rec, Clock: clock, RetryAfter: 5 * time.Second, Log: quiet})
	s.Update(value)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	step(t, clock, time.Minute)   // 12:01: the post fails
	step(t, clock, 5*time.Second) // 12:01:05: fails again
	rec.mu.Lock()
	rec.fail = nil
	rec.mu.Unlock()
	step(t, clock, 5*time.Second) // 12:01:10: the gate is back, the slot is still on time
	waitPosted(t, rec, "jobs/"+JobID("tick", t0.Add(time.Minute)))
	cancel()
	<-done

	// A new leader takes over from the saved state at 12:04:35: the
	// slots it missed are skipped (catch_up 0), the next one fires.
	clock.Advance(3*time.Minute + 25*time.Second) // 12:04:35
	s2 := NewScheduler(SchedulerConfig{Poster: rec, Store: rec, Clock: clock, Log: quiet})
	s2.Update(value)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- s2.Run(ctx) }()
	step(t, clock, 25*time.Second) // 12:05:00
	waitPosted(t, rec, "jobs/"+JobID("tick", t0.Add(time.Minute)), "jobs/"+JobID("tick", t0.Add(5*time.Minute)))
}

// A post the gate refuses for good (a 404 for an unknown topic) is not
// tried again every RetryAfter: the slot is skipped, the state says so,
// and the scheduler waits for the next slot (issue 32).
func TestARefusedPostIsNotRetried(t *testing.T) {
	clock := newFakeClock(t0)
	refused := &RefusedError{Err: errors.New("POST http://gate/v1/topics/jbos/jobs: 404 Not Found: unknown topic")}
	rec := &recorder{fail: refused}
	s := NewScheduler(SchedulerConfig{Poster: rec, Store: rec, Clock: clock, RetryAfter: 5 * time.Second, Log: quiet})
	s.Update(map[string][]byte{"tick": []byte(`{"every":"1m","topic":"jbos","type":"t","grace":"30s"}`)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	step(t, clock, time.Minute) // 12:01: the post is refused
	select {
	case <-clock.waiting: // the round is done and saved
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler never waited")
	}
	if next := clock.nextWake(); !next.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("after a refused post the scheduler wakes at %s, want the next slot %s, not a retry", next.Format(time.TimeOnly), t0.Add(2*time.Minute).Format(time.TimeOnly))
	}
	rec.mu.Lock()
	st := rec.states["tick"]
	rec.mu.Unlock()
	if !strings.HasPrefix(st.LastError, "refused for good, the slot skipped (not retried): ") || !strings.Contains(st.LastError, "unknown topic") || !st.LastSlot.Equal(t0.Add(time.Minute)) {
		t.Errorf("state after a refused post: %+v", st)
	}
}

func waitPosted(t *testing.T, rec *recorder, want ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fmt.Sprint(rec.Posted()) != fmt.Sprint(want) {
		if time.Now().After(deadline) {
			t.Fatalf("posted %v, want %v", rec.Posted(), want)
		}
		time.Sleep(time.Millisecond)
	}
}
