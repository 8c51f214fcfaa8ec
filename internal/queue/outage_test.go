package queue

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// countedSide is a pool whose closes are counted.
type countedSide struct {
	*Pool
	closes *atomic.Int32
}

func (s countedSide) Close() error { s.closes.Add(1); return s.Pool.Close() }

// A write that Redis refuses for a while (MISCONF: it cannot persist) is
// retried until Redis takes it, through fresh pools that are all closed
// again, and the wait is one outage: waiting while it lasts, over and
// counted after. An error of another kind returns at once; the caller's
// context ending returns the last error.
func TestUntilTakenWaitsOutARedisThatCannotWrite(t *testing.T) {
	r := testenv.Redis(t)
	var opened, closes atomic.Int32
	side := countedSide{newPool(t, 1, r.Addr(), nil), &closes}
	ctx := context.Background()
	o := NewOutage(slog.New(slog.DiscardHandler), nil)
	fresh := func() (countedSide, error) {
		f, err := side.Fresh()
		if err != nil {
			return countedSide{}, err
		}
		opened.Add(1)
		return countedSide{f, &closes}, nil
	}
	write := func(s countedSide) error { return s.Client(0).Set(ctx, "taken", "yes", 0).Err() }

	persistAgain := r.RefusePersisting(t)
	done := make(chan error, 1)
	go func() { done <- UntilTaken(ctx, o, "a test write", side, fresh, write) }()
	testenv.WaitFor(t, 5*time.Second, "the write to wait in an outage, through fresh pools", func() bool { return o.Waiting() && opened.Load() >= 2 })
	persistAgain()
	if err := <-done; err != nil {
		t.Fatalf("UntilTaken once Redis persists again: %v", err)
	}
	if o.Waiting() || o.Seconds() <= 0 {
		t.Fatalf("the outage: waiting %v, %v s; want over, and counted", o.Waiting(), o.Seconds())
	}
	if closes.Load() != opened.Load() {
		t.Fatalf("%d fresh pools opened, %d closed", opened.Load(), closes.Load())
	}
	if v, err := r.Client().Get(ctx, "taken").Result(); err != nil || v != "yes" {
		t.Fatalf("the write: %q %v", v, err)
	}

	// Not an outage: the error at once, and no fresh pool.
	before := opened.Load()
	err := UntilTaken(ctx, o, "a wrong write", side, fresh, func(s countedSide) error {
		return s.Client(0).HSet(ctx, "taken", "f", "v").Err() // WRONGTYPE
	})
	if err == nil || Transient(err) || opened.Load() != before {
		t.Fatalf("a write Redis refuses for itself: %v (Transient %v), %d fresh pools; want its error at once", err, Transient(err), opened.Load()-before)
	}

	// The caller's context ends the wait, with the last error.
	persistAgain = r.RefusePersisting(t)
	defer persistAgain()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := UntilTaken(cctx, o, "a cut-short write", side, fresh, write); !Transient(err) {
		t.Fatalf("a wait cut short: %v, want the last Transient error", err)
	}
	if o.Waiting() || closes.Load() != opened.Load() {
		t.Fatalf("a wait cut short: waiting %v; %d fresh pools opened, %d closed", o.Waiting(), opened.Load(), closes.Load())
	}
}
