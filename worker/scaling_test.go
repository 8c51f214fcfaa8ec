package worker_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// Two worker processes serve partition 0. Each publishes a heartbeat (pool
// size, busy time); a command reaches one of them, and the other follows
// the checkpoint it wrote; a stopping worker takes its heartbeat away.
func TestHeartbeatsAndTheCheckpointReachEveryConsumer(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	var running atomic.Int32
	release := make(chan struct{})
	hold := worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
		running.Add(1)
		defer running.Add(-1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	var w1, w2 *worker.Worker
	stop1 := b.start(t, func(c *worker.Config) { c.Workers = 2; c.Serve = []int{0} }, func(w *worker.Worker) { w1 = w; w.Handle("hold", hold) })
	b.start(t, func(c *worker.Config) { c.Workers = 3; c.Serve = []int{0} }, func(w *worker.Worker) { w2 = w; w.Handle("hold", hold) })

	load := func() queue.PartitionLoad {
		l, err := b.pool.Load(ctx, 0, []string{"jobs"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	testenv.WaitFor(t, 10*time.Second, "two heartbeats of 2 and 3 workers", func() bool {
		l := load()
		sum := 0
		for _, c := range l.Consumers {
			sum += c.Workers
		}
		return len(l.Consumers) == 2 && sum == 5
	})

	// Busy time grows with the slots held: 5 jobs keep all 5 slots busy.
	var groups []string
	for i := 0; len(groups) < 5; i++ {
		if g := "g" + strconv.Itoa(i); b.layout.PartitionOf(g) == 0 {
			groups = append(groups, g)
		}
	}
	for i, g := range groups {
		b.enqueue(t, job.Job{ID: "h" + strconv.Itoa(i), Type: "hold", Group: g})
	}
	testenv.WaitFor(t, 10*time.Second, "5 jobs running", func() bool { return running.Load() == 5 })
	before := load()
	testenv.WaitFor(t, 10*time.Second, "each consumer's busy time to grow as fast as its slots", func() bool {
		after := load()
		for id, c := range after.Consumers {
			was := before.Consumers[id]
			span := c.At.Sub(was.At)
			if span < 300*time.Millisecond || float64(c.Busy-was.Busy) < 0.9*float64(c.Workers)*float64(span) {
				return false
			}
		}
		return true
	})
	close(release)

	if err := b.redis.Client().RPush(ctx, b.layout.PartKeys(0).Cmd(),
		`{"type":"SCALE_UP","partition":0,"targetWorkers":6,"reason":"test"}`).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "both consumers at 6", func() bool { return w1.Workers(0) == 6 && w2.Workers(0) == 6 })
	testenv.WaitFor(t, 10*time.Second, "heartbeats of 6 and 6", func() bool {
		sum := 0
		for _, c := range load().Consumers {
			sum += c.Workers
		}
		return sum == 12
	})
	stop1()
	if l := load(); len(l.Consumers) != 1 {
		t.Fatalf("after one worker stopped: heartbeats %v", l.Consumers)
	}
}
