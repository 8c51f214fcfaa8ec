package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// TestTypeRetryDelayChoosesTheWait: a type's TypeRetryDelay sets how long
// its failed jobs wait in delayed (an hour here, against the bed's 20 ms
// backoff), called with the attempt and its error; a negative answer
// leaves it to the backoff, so that type's job retries at once and
// completes; a handler's RetryAfter wins over the policy.
func TestTypeRetryDelayChoosesTheWait(t *testing.T) {
	b := newBed(t)
	var asked atomic.Value
	b.start(t, nil, func(w *worker.Worker) {
		w.Handle("slow", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
			return nil, errors.New("quota exhausted")
		}), worker.TypeRetryDelay(func(attempt int, err error) time.Duration {
			asked.Store(err.Error())
			return time.Duration(attempt) * time.Hour
		}))
		w.Handle("asks", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
			return nil, worker.RetryAfter(2*time.Hour, errors.New("429"))
		}), worker.TypeRetryDelay(func(int, error) time.Duration { return time.Hour }))
		w.Handle("default", worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
			if j.Attempt == 1 {
				return nil, errors.New("once")
			}
			return nil, nil
		}), worker.TypeRetryDelay(func(int, error) time.Duration { return -1 }))
	})
	b.enqueue(t, job.Job{ID: "s1", Type: "slow"}, job.Job{ID: "a1", Type: "asks"}, job.Job{ID: "d1", Type: "default"})
	if h := b.waitState(t, "d1", "", "done"); h["attempts"] != "2" {
		t.Fatalf("default: %v, want done at attempt 2 after the backoff", h)
	}
	for id, want := range map[string]time.Duration{"s1": time.Hour, "a1": 2 * time.Hour} {
		var at queue.JobWhereabouts
		testenv.WaitFor(t, 15*time.Second, id+" delayed", func() bool {
			var err error
			at, err = b.pool.FindJob(context.Background(), queue.JobLookup{Topic: "jobs", ID: id})
			return err == nil && at.Where == queue.WhereDelayed
		})
		if in := time.Until(at.Until); in < want-time.Minute || in > want {
			t.Fatalf("%s: delayed until %s (in %s), want in about %s", id, at.Until, in, want)
		}
	}
	if got, _ := asked.Load().(string); got != "quota exhausted" {
		t.Fatalf("the policy was asked with %q, want the handler's error", got)
	}
}
