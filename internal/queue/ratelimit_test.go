package queue

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

func reservation(resource, job string) Reservation {
	return Reservation{
		Resource: resource, Job: job, Limit: "10/s burst 1",
		Interval: 100 * time.Millisecond, Burst: 1,
		Hold: 20 * time.Millisecond, Late: 5 * time.Millisecond,
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
	wantSlot(t, "b back", reserve(t, p, reservation("api", "b"), now.Add(90*ms)), now.Add(100*ms), 1, false)
	// c back a little late (within Late): still its slot.
	wantSlot(t, "c late", reserve(t, p, reservation("api", "c"), now.Add(203*ms)), now.Add(200*ms), 1, false)
	// A slot handed out is used up: b asking again is a new reservation.
	wantSlot(t, "b again", reserve(t, p, reservation("api", "b"), now.Add(210*ms)), now.Add(300*ms), 1, true)
}

// A recorded slot missed by more than Late is void: the job takes the next
// free slot, and its throttles keep counting.
func TestReserveMissedSlotTakesANewOne(t *testing.T) {
	p := newPool(t, 1, testenv.Redis(t).Addr(), nil)
	ms := time.Millisecond
	reserve(t, p, reservation("api", "a"), now)
	wantSlot(t, "b", reserve(t, p, reservation("api", "b"), now), now.Add(100*ms), 1, true)
	reserve(t, p, reservation("api", "c"), now) // 200 ms
	wantSlot(t, "b missed", reserve(t, p, reservation("api", "b"), now.Add(110*ms)), now.Add(300*ms), 2, true)
	// A caller that missed a slot in process says how many throttles the
	// job had; with no backlog the new slot is now.
	r := reservation("api", "d")
	r.Throttles = 1
	wantSlot(t, "d after a missed start", reserve(t, p, r, now.Add(time.Second)), now.Add(time.Second), 1, false)
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
	l := p.Layout()
	key := l.Keys(l.PartitionOf("billing-api")).Limit("billing-api")
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
