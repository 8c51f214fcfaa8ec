package relay

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/queue"
)

// Batches that wait while a call runs go together in the next call, and
// each gets back its own results, in order.
func TestCoalescerMergesWaitingBatches(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var calls [][]string
	c := newCoalescer(100, func(_ context.Context, items []queue.Item) ([]queue.Result, error) {
		ids := make([]string, len(items))
		res := make([]queue.Result, len(items))
		for i, it := range items {
			ids[i] = it.ID
			res[i] = queue.Result{Outcome: queue.Queued}
			if it.ID[0] == 'd' {
				res[i].Outcome = queue.Duplicate
			}
		}
		mu.Lock()
		calls = append(calls, ids)
		first := len(calls) == 1
		mu.Unlock()
		if first {
			close(started)
			<-release // hold the first call while others queue up
		}
		return res, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.run(ctx)

	batch := func(prefix string, n int) []queue.Item {
		items := make([]queue.Item, n)
		for i := range items {
			items[i] = queue.Item{ID: prefix + strconv.Itoa(i)}
		}
		return items
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if res, err := c.Enqueue(ctx, batch("a", 2)); err != nil || len(res) != 2 {
			t.Errorf("a: %v %v", res, err)
		}
	})
	<-started
	results := make([][]queue.Result, 3)
	var queued sync.WaitGroup
	for i, p := range []string{"b", "d", "e"} {
		queued.Add(1)
		wg.Go(func() {
			queued.Done()
			res, err := c.Enqueue(ctx, batch(p, i+1))
			if err != nil {
				t.Errorf("%s: %v", p, err)
			}
			results[i] = res
		})
	}
	queued.Wait()
	// The three are blocked on the unbuffered channel until the first call
	// ends; the coalescer then takes one and finds the others waiting, or
	// takes them one by one: either way nobody is lost or mixed up.
	close(release)
	wg.Wait()
	for i, want := range []int{1, 2, 3} {
		if len(results[i]) != want {
			t.Fatalf("batch %d got %d results, want %d", i, len(results[i]), want)
		}
	}
	for _, r := range results[1] {
		if r.Outcome != queue.Duplicate {
			t.Errorf("batch d got %v, want its own results", r.Outcome)
		}
	}
	total := 0
	for _, ids := range calls {
		total += len(ids)
	}
	if total != 8 {
		t.Errorf("calls %v carried %d items, want 8", calls, total)
	}
}

// A failed call fails every batch in it.
func TestCoalescerErrorReachesEveryBatch(t *testing.T) {
	boom := errors.New("lease lost")
	c := newCoalescer(100, func(context.Context, []queue.Item) ([]queue.Result, error) { return nil, boom })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.run(ctx)
	if _, err := c.Enqueue(ctx, []queue.Item{{ID: "x"}}); !errors.Is(err, boom) {
		t.Fatalf("err %v, want %v", err, boom)
	}
	cancel()
	// Once the context ends, a batch fails one way or the other, never
	// waits forever.
	if _, err := c.Enqueue(ctx, []queue.Item{{ID: "y"}}); !errors.Is(err, context.Canceled) && !errors.Is(err, boom) {
		t.Fatalf("after the end: %v", err)
	}
}
