package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/worker"
)

type greeting struct {
	To    string `json:"to"`
	Times int    `json:"times"`
}

func TestTypedHandlersGetTheDecodedPayload(t *testing.T) {
	b := newBed(t)
	var rawSeen sync.Map // job id -> the envelope's bytes, as the typed handler saw them
	b.start(t, nil, func(w *worker.Worker) {
		worker.HandleTyped(w, "greet", worker.TypedHandlerFunc[greeting](func(_ context.Context, j *worker.TypedJob[greeting]) ([]byte, error) {
			rawSeen.Store(j.ID, string(j.Job.Payload))
			return fmt.Appendf(nil, "%s x%d (attempt %d)", j.Payload.To, j.Payload.Times, j.Attempt), nil
		}))
		worker.HandleFunc(w, "greet.quiet", func(_ context.Context, j *worker.TypedJob[*greeting]) error {
			if j.Payload != nil {
				return fmt.Errorf("no payload should decode to nil, got %+v", j.Payload)
			}
			return nil
		})
	})
	b.enqueue(t,
		job.Job{ID: "g1", Type: "greet", Payload: json.RawMessage(`{"to":"<Ada> & co","times":3,"extra":true}`)},
		job.Job{ID: "g2", Type: "greet.quiet"},
		job.Job{ID: "g3", Type: "greet.quiet", Payload: json.RawMessage(`null`)},
	)
	if h := b.waitState(t, "g1", "", "done"); h["result"] != "<Ada> & co x3 (attempt 1)" {
		t.Fatalf("typed result: %v", h)
	}
	if raw, _ := rawSeen.Load("g1"); raw != `{"to":"<Ada> & co","times":3,"extra":true}` {
		t.Fatalf("the envelope's bytes under j.Job.Payload: %v", raw)
	}
	for _, id := range []string{"g2", "g3"} {
		if h := b.waitState(t, id, "", "done"); h["attempts"] != "1" {
			t.Fatalf("%s: %v", id, h)
		}
	}
}

func TestAPayloadThatDoesNotDecodeGoesDeadNamingTheType(t *testing.T) {
	b := newBed(t)
	var called atomic.Int32
	var middlewareSaw atomic.Value
	b.start(t, nil, func(w *worker.Worker) {
		worker.HandleFunc(w, "greet", func(context.Context, *worker.TypedJob[greeting]) error {
			called.Add(1)
			return nil
		})
		// Middleware wraps the decode: it sees the decode's error as the
		// handler's.
		w.Use(func(next worker.Handler) worker.Handler {
			return worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
				res, err := next.Handle(ctx, j)
				if err != nil {
					middlewareSaw.Store(err.Error())
				}
				return res, err
			})
		})
	})
	// Config.MaxAttempts is 5: a permanent error stops at the first.
	b.enqueue(t, job.Job{ID: "bad1", Type: "greet", Payload: json.RawMessage(`{"to":"x","times":"three"}`)})
	h := b.waitState(t, "bad1", "", "dead")
	if h["attempts"] != "1" {
		t.Fatalf("a payload that does not decode must not be retried: %v", h)
	}
	for _, want := range []string{"permanent", `job type "greet"`, "worker_test.greeting", "times"} {
		if !strings.Contains(h["last_error"], want) {
			t.Fatalf("last_error %q lacks %q", h["last_error"], want)
		}
	}
	if called.Load() != 0 {
		t.Fatal("the handler ran on a payload that did not decode")
	}
	if got, _ := middlewareSaw.Load().(string); got != h["last_error"] {
		t.Fatalf("middleware saw %q, the record says %q", got, h["last_error"])
	}
}

// The type's defaults apply to jobs whose envelope sets none, win over the
// Config's, and lose to the envelope's own.
func TestPerTypeTimeoutAndAttempts(t *testing.T) {
	b := newBed(t)
	type seen struct {
		timeout     time.Duration // the attempt's deadline, from its start
		maxAttempts int
	}
	var mu sync.Mutex
	seenBy := map[string]seen{}
	record := func(ctx context.Context, j *worker.Job) {
		deadline, _ := ctx.Deadline()
		mu.Lock()
		seenBy[j.ID] = seen{timeout: time.Until(deadline), maxAttempts: j.MaxAttempts}
		mu.Unlock()
	}
	b.start(t, func(c *worker.Config) {
		c.Timeout, c.MaxAttempts = time.Minute, 5
	}, func(w *worker.Worker) {
		// Waits out its deadline: the type's timeout cuts it.
		worker.HandleFunc(w, "slow", func(ctx context.Context, j *worker.TypedJob[greeting]) error {
			record(ctx, j.Job)
			<-ctx.Done()
			return ctx.Err()
		}, worker.TypeTimeout(150*time.Millisecond), worker.TypeMaxAttempts(2))
		w.Handle("flaky", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			record(ctx, j)
			return nil, errors.New("down")
		}), worker.TypeMaxAttempts(3), worker.TypeTimeout(20*time.Second))
		w.Handle("plain", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			record(ctx, j)
			return nil, errors.New("down")
		}))
	})
	start := time.Now()
	b.enqueue(t,
		job.Job{ID: "slow1", Type: "slow"},
		job.Job{ID: "flaky1", Type: "flaky"},
		job.Job{ID: "flaky2", Type: "flaky", MaxAttempts: 4, Timeout: job.Duration(5 * time.Second)},
		job.Job{ID: "plain1", Type: "plain", MaxAttempts: 2},
	)
	h := b.waitState(t, "slow1", "", "dead")
	if h["attempts"] != "2" || !strings.Contains(h["last_error"], "deadline exceeded") {
		t.Fatalf("slow: TypeMaxAttempts(2) and TypeTimeout(150ms) over Config's 5 and 1m: %v", h)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("two attempts of 150 ms took %s", took)
	}
	if h := b.waitState(t, "flaky1", "", "dead"); h["attempts"] != "3" {
		t.Fatalf("flaky1: TypeMaxAttempts(3): %v", h)
	}
	if h := b.waitState(t, "flaky2", "", "dead"); h["attempts"] != "4" {
		t.Fatalf("flaky2: the envelope's max_attempts 4 over the type's 3: %v", h)
	}
	if h := b.waitState(t, "plain1", "", "dead"); h["attempts"] != "2" {
		t.Fatalf("plain1: the envelope's max_attempts: %v", h)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, want := range map[string]seen{
		"slow1":  {150 * time.Millisecond, 2},
		"flaky1": {20 * time.Second, 3},
		"flaky2": {5 * time.Second, 4},
		"plain1": {time.Minute, 2},
	} {
		got := seenBy[id]
		// The deadline was read a moment after the attempt's context began
		// (longer on a loaded machine): a third of the way is enough to tell
		// the envelope's, the type's and the Config's apart.
		if got.maxAttempts != want.maxAttempts || got.timeout > want.timeout || got.timeout < want.timeout/3 {
			t.Errorf("%s: handler saw timeout %s and max attempts %d, want %s and %d", id, got.timeout, got.maxAttempts, want.timeout, want.maxAttempts)
		}
	}
}

func TestTypeOptionsRefuseNegatives(t *testing.T) {
	for name, f := range map[string]func(){
		"TypeTimeout":     func() { worker.TypeTimeout(-time.Second) },
		"TypeMaxAttempts": func() { worker.TypeMaxAttempts(-1) },
	} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), name) {
					t.Errorf("%s of a negative: panic %v, want one naming it", name, p)
				}
			}()
			f()
		}()
	}
}
