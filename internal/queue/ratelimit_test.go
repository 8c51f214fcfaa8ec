package queue

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

func reservation(resource, job string) Reservation {
	return Reservation{
		Resource: resource, Job: job, Limit: "10/s burst 1",
		Interval: 100 * time.Millisecond, Burst: 1,
		Hold: 20 * time.Millisecond,
	}
}

func reserve(t *testing.T, p *Pool, r Reservation, at time.Time) Slot {
	t.Helper()
	s, err := p.Reserve(context.Background(), r, at)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantSlot(t *testing.T, what string, got Slot, at time.Time, throttles int, deferred bool) {
	t.Helper()
	if !got.At.Equal(at) || got.Throttles != throttles || got.Deferred != deferred {
		t.Errorf("%s: got slot at %+dµs throttles %d deferred %v, want %+dµs %d %v", what,
			got.At.Sub(now).Microseconds(), got.Throttles, got.Deferred, at.Sub(now).Microseconds(), throttles, deferred)
	}
}

// Slots are spaced by the interval; a job whose slot is beyond the hold
// horizon is deferred with one throttle, and coming back (early, in time,
// or a little late) it gets the same slot without another.
func TestReserveSpacesSlotsAndThrottlesOnce(t *testing.T) {
	p := newPool(t, 4, testenv.Redis(t).Addr(), nil)
	ms := time.Millisecond
	wantSlot(t, "a", reserve(t, p, reservation("api", "a"), now), now, 0, false)
	wantSlot(t, "b", reserve(t, p, reservation("api", "b"), now), now.Add(100*ms), 1, true)
	wantSlot(t, "c", reserve(t, p, reservation("api", "c"), now.Add(ms)), now.Add(200*ms), 1, true)
	// Another resource has a schedule of its own.
	wantSlot(t, "other resource", reserve(t, p, reservation("mail", "x"), now), now, 0, false)

	// b comes back far too early (say its lease expired and the reaper
	// returned it): deferred again to the same slot, still one throttle.
	wantSlot(t, "b early", reserve(t, p, reservation("api", "b"), now.Add(50*ms)), now.Add(100*ms), 1, true)
	// b back within the hold horizon: its slot, to wait for in process.
	back := reserve(t, p, reservation("api", "b"), now.Add(90*ms))
	wantSlot(t, "b back", back, now.Add(100*ms), 1, false)
	if !back.Recorded {
		t.Error("b back: its slot should come from the record")
	}
	// c back late: still its slot (the window log decides when it starts).
	wantSlot(t, "c late", reserve(t, p, reservation("api", "c"), now.Add(230*ms)), now.Add(200*ms), 1, false)
	// A slot handed out is used up: b asking again is a new reservation.
	again := reserve(t, p, reservation("api", "b"), now.Add(210*ms))
	wantSlot(t, "b again", again, now.Add(300*ms), 1, true)
	if again.Recorded {
		t.Error("b again: a new slot, not a recorded one")
	}
}

// A job the window log would hold back too long reserves again with
// NotBefore: a new slot no earlier (the schedule moves past it), and its
// throttles keep counting.
func TestReserveNotBefore(t *testing.T) {
	p := newPool(t, 1, testenv.Redis(t).Addr(), nil)
	ms := time.Millisecond
	reserve(t, p, reservation("api", "a"), now)
	wantSlot(t, "b", reserve(t, p, reservation("api", "b"), now), now.Add(100*ms), 1, true)
	wantSlot(t, "b back", reserve(t, p, reservation("api", "b"), now.Add(95*ms)), now.Add(100*ms), 1, false)
	r := reservation("api", "b")
	r.NotBefore, r.Throttles = now.Add(1500*ms), 1
	wantSlot(t, "b again", reserve(t, p, r, now.Add(100*ms)), now.Add(1500*ms), 2, true)
	wantSlot(t, "c after it", reserve(t, p, reservation("api", "c"), now.Add(100*ms)), now.Add(1600*ms), 1, true)
	// With no backlog and NotBefore within the hold horizon: wait in process.
	r = reservation("api", "d")
	r.NotBefore, r.Throttles = now.Add(5*time.Second+10*ms), 1
	wantSlot(t, "d", reserve(t, p, r, now.Add(5*time.Second)), now.Add(5*time.Second+10*ms), 1, false)
}

func TestReserveBurst(t *testing.T) {
	p := newPool(t, 1, testenv.Redis(t).Addr(), nil)
	ms := time.Millisecond
	r := func(job string) Reservation {
		x := reservation("api", job)
		x.Burst, x.Limit = 3, "10/s burst 3"
		return x
	}
	for _, j := range []string{"a", "b", "c"} {
		wantSlot(t, j, reserve(t, p, r(j), now), now, 0, false)
	}
	wantSlot(t, "d", reserve(t, p, r("d"), now), now.Add(100*ms), 1, true)
	// After a quiet spell the burst is back.
	later := now.Add(10 * time.Second)
	for _, j := range []string{"e", "f", "g"} {
		wantSlot(t, j, reserve(t, p, r(j), later), later, 0, false)
	}
}

// A changed limit voids the slots recorded under the old one: their jobs
// reserve again under the new one when they come back, and the new
// schedule starts one new interval after the last slot already handed to a
// job within the hold horizon.
func TestReserveLimitChangeVoidsRecordedSlots(t *testing.T) {
	p := newPool(t, 1, testenv.Redis(t).Addr(), nil)
	ms := time.Millisecond
	for i, j := range []string{"a", "b", "c", "d"} {
		wantSlot(t, j, reserve(t, p, reservation("api", j), now), now.Add(time.Duration(i)*100*ms), min(i, 1), i > 0)
	}
	slow := func(job string) Reservation {
		r := reservation("api", job)
		r.Limit, r.Interval = "2/s burst 1", 500*time.Millisecond
		return r
	}
	// At 90 ms, slots up to the hold horizon (110 ms) may have gone to jobs
	// about to start: the new schedule starts at 110+500 ms.
	wantSlot(t, "new job", reserve(t, p, slow("e"), now.Add(90*ms)), now.Add(610*ms), 1, true)
	// b, c and d come back for slots made under 10/s: void, reserved anew.
	wantSlot(t, "b", reserve(t, p, slow("b"), now.Add(85*ms)), now.Add(1110*ms), 2, true)
	wantSlot(t, "c", reserve(t, p, slow("c"), now.Add(185*ms)), now.Add(1610*ms), 2, true)
	// The jobs reserved under the new limit keep their slots.
	wantSlot(t, "e back", reserve(t, p, slow("e"), now.Add(600*ms)), now.Add(610*ms), 1, false)
}

// The schedule of a resource lives on the partition fnv1a32(resource)
// picks, whatever partition its jobs come from, and expires when unused.
func TestReserveKeyLivesOnTheResourcesPartition(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 8, r.Addr(), nil)
	reserve(t, p, reservation("billing-api", "a"), now)
	reserve(t, p, reservation("billing-api", "b"), now)
	l := p.Keyspace()
	key := l.PartKeys(l.PartitionOf("billing-api")).Limit("billing-api")
	ctx := context.Background()
	fields, err := r.Client().HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if fields["limit"] != "10/s burst 1" || fields["r:b"] == "" || fields["r:a"] != "" {
		t.Errorf("%s holds %v; want the limit in force and b's recorded slot only", key, fields)
	}
	ttl := r.Client().PTTL(ctx, key).Val()
	if ttl < LimitKeep-time.Minute || ttl > LimitKeep+time.Minute {
		t.Errorf("%s expires in %s, want about %s after its schedule", key, ttl, LimitKeep)
	}
}

func TestReserveRejectsABadLimit(t *testing.T) {
	p := newPool(t, 1, testenv.Redis(t).Addr(), nil)
	r := reservation("api", "a")
	r.Interval = 0
	if _, err := p.Reserve(context.Background(), r, now); err == nil {
		t.Error("Reserve with no interval: want an error")
	}
}

// The window log admits at most max starts in any window [t, t+W), and
// says how long to wait otherwise; a start recorded as later (its handler
// began late) holds the window longer.
func TestAdmitHoldsEveryWindowToTheLimit(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 4, r.Addr(), nil)
	ctx := context.Background()
	ms := time.Millisecond
	admit := func(member string, at time.Duration) time.Duration {
		t.Helper()
		wait, err := p.Admit(ctx, "api", member, 3, time.Second, now.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return wait
	}
	for i, at := range []time.Duration{0, 10 * ms, 20 * ms} {
		if w := admit("s"+strconv.Itoa(i), at); w != 0 {
			t.Fatalf("start %d at %s: told to wait %s, want admitted", i, at, w)
		}
	}
	if w := admit("s3", 500*ms); w != 500*ms {
		t.Errorf("a fourth start within the second: wait %s, want 500ms (until s0 leaves)", w)
	}
	// s0's handler began 30 ms late: its start holds the window longer, so
	// at 1005 ms the fourth waits for s1 to leave, at 1010 ms.
	if err := p.Started(ctx, "api", "s0", now.Add(30*ms)); err != nil {
		t.Fatal(err)
	}
	if w := admit("s3", 1005*ms); w != 5*ms {
		t.Errorf("after a late start: wait %s, want 5ms", w)
	}
	if w := admit("s3", 1010*ms); w != 0 {
		t.Errorf("at 1010 ms: wait %s, want admitted ([1010ms, 2010ms) holds s2, s0 and it)", w)
	}
	// Started never moves a start earlier.
	p.Started(ctx, "api", "s2", now)
	if w := admit("s4", 1015*ms); w != 5*ms {
		t.Errorf("at 1015 ms: wait %s, want 5ms (until s2 leaves at 1020 ms)", w)
	}
	l := p.Keyspace()
	key := l.PartKeys(l.PartitionOf("api")).LimitStarts("api")
	if n := r.Client().ZCard(ctx, key).Val(); n != 3 {
		t.Errorf("%s holds %d starts, want the last second's 3", key, n)
	}
	if ttl := r.Client().PTTL(ctx, key).Val(); ttl <= 0 || ttl > 2*time.Second {
		t.Errorf("%s expires in %s, want within two windows", key, ttl)
	}
}
