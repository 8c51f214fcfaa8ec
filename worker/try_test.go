package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/worker"
)

// offline is a worker whose handlers Try calls; it never reaches Redis.
func offline(t *testing.T, mutate func(*worker.Config)) *worker.Worker {
	t.Helper()
	cfg := worker.DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// welcome names its job type, as client.JobArgs does.
type welcome struct {
	To string `json:"to"`
}

func (welcome) Kind() string { return "welcome.send" }

// ptrKind has Kind on its pointer only.
type ptrKind struct{}

func (*ptrKind) Kind() string { return "ptr.kind" }

// TestHandleFuncTakesTheKindOfItsType: registered with the type "", a
// typed handler serves its payload type's Kind(), whether the method is on
// T or on *T, and a T without one panics at registration, naming T.
func TestHandleFuncTakesTheKindOfItsType(t *testing.T) {
	w := offline(t, nil)
	var got welcome
	worker.HandleFunc(w, "", func(_ context.Context, j *worker.TypedJob[welcome]) error {
		got = j.Payload
		return nil
	})
	worker.HandleFunc(w, "", func(context.Context, *worker.TypedJob[ptrKind]) error { return nil })
	worker.HandleFunc(w, "", func(context.Context, *worker.TypedJob[*ptrKind]) error { return errors.New("the pointer's") })
	ctx := context.Background()
	if out := w.Try(ctx, &worker.Job{Type: "welcome.send", Payload: []byte(`{"to":"ada"}`)}, 0); out.Err != nil || got.To != "ada" {
		t.Fatalf("welcome.send: %+v, payload %+v: want the handler registered by Kind", out, got)
	}
	// *ptrKind registered last, under the same Kind: its handler runs.
	if out := w.Try(ctx, &worker.Job{Type: "ptr.kind"}, 0); out.Err == nil || out.Err.Error() != "the pointer's" {
		t.Fatalf("ptr.kind: %+v, want the *ptrKind handler's error", out)
	}
	defer func() {
		p := recover()
		if s, _ := p.(string); !strings.Contains(s, "HandleFunc") || !strings.Contains(s, "worker_test.greeting") || !strings.Contains(s, "Kind()") {
			t.Fatalf("panic %v: want one naming HandleFunc, the type and Kind()", p)
		}
	}()
	worker.HandleFunc(w, "", func(context.Context, *worker.TypedJob[greeting]) error { return nil })
	t.Fatal("registering a type without Kind() under \"\" did not panic")
}

// TestTrySettlesAsTheWorkerDoes: Try's outcome follows the worker's
// rules: a result kept on success; the backoff, or RetryAfter's delay,
// before a retry; dead on Permanent or the last attempt; the envelope's
// limits over the type's over Config's; the timeout as the handler's
// deadline; a panic a failed attempt; middleware around the handler.
func TestTrySettlesAsTheWorkerDoes(t *testing.T) {
	w := offline(t, func(c *worker.Config) {
		c.Backoff, c.MaxBackoff, c.MaxAttempts, c.Timeout = 2*time.Second, time.Minute, 3, 40*time.Second
	})
	var seen []string
	w.Use(func(next worker.Handler) worker.Handler {
		return worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			seen = append(seen, j.Type)
			return next.Handle(ctx, j)
		})
	})
	var deadline time.Duration
	var maxSeen int
	w.Handle("ok", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		d, _ := ctx.Deadline()
		deadline, maxSeen = time.Until(d), j.MaxAttempts
		return []byte("done:" + string(j.Payload)), nil
	}), worker.TypeTimeout(5*time.Second), worker.TypeMaxAttempts(4))
	w.Handle("fail", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
		return []byte("not kept"), errors.New("smtp down")
	}))
	w.Handle("later", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
		return nil, worker.RetryAfter(7*time.Second, errors.New("429"))
	}))
	w.Handle("never", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
		return nil, worker.Permanent(errors.New("bad address"))
	}))
	w.Handle("boom", worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) { panic("oops") }))
	ctx := context.Background()

	out := w.Try(ctx, &worker.Job{Type: "ok", Payload: []byte(`1`)}, 0)
	if out.Err != nil || string(out.Result) != "done:1" || out.Retry || out.Dead {
		t.Fatalf("ok: %+v", out)
	}
	if out.Timeout != 5*time.Second || deadline <= 4*time.Second || deadline > 5*time.Second || out.MaxAttempts != 4 || maxSeen != 4 {
		t.Fatalf("ok: timeout %s (deadline in %s), max attempts %d (handler saw %d): want the type's 5s and 4", out.Timeout, deadline, out.MaxAttempts, maxSeen)
	}
	// The envelope's own limits win over the type's.
	out = w.Try(ctx, &worker.Job{Type: "ok", MaxAttempts: 9}, 2*time.Second)
	if out.Timeout != 2*time.Second || deadline > 2*time.Second || out.MaxAttempts != 9 || maxSeen != 9 {
		t.Fatalf("ok with the envelope's limits: %+v (deadline in %s, handler saw %d attempts)", out, deadline, maxSeen)
	}

	out = w.Try(ctx, &worker.Job{Type: "fail", Attempt: 2}, 0)
	// Attempt 2 waits Backoff × 2 = 4s, ±20%.
	if !out.Retry || out.Dead || out.RetryIn < 3200*time.Millisecond || out.RetryIn > 4800*time.Millisecond || out.Result != nil || out.Timeout != 40*time.Second {
		t.Fatalf("fail, attempt 2 of 3: %+v, want a retry in 4s±20%%, no result, Config's timeout", out)
	}
	if out = w.Try(ctx, &worker.Job{Type: "fail", Attempt: 3}, 0); out.Retry || !out.Dead {
		t.Fatalf("fail, attempt 3 of 3: %+v, want dead", out)
	}
	if out = w.Try(ctx, &worker.Job{Type: "later"}, 0); !out.Retry || out.RetryIn != 7*time.Second {
		t.Fatalf("later: %+v, want a retry in RetryAfter's 7s", out)
	}
	if out = w.Try(ctx, &worker.Job{Type: "never"}, 0); !out.Dead || !worker.IsPermanent(out.Err) {
		t.Fatalf("never: %+v, want dead at the first attempt", out)
	}
	if out = w.Try(ctx, &worker.Job{Type: "boom"}, 0); !out.Retry || out.Err == nil || !strings.Contains(out.Err.Error(), "panicked: oops") {
		t.Fatalf("boom: %+v, want a failed attempt naming the panic", out)
	}
	if out = w.Try(ctx, &worker.Job{Type: "unknown"}, 0); !out.Retry || out.Err == nil || !strings.Contains(out.Err.Error(), `no handler for job type "unknown"`) {
		t.Fatalf("unknown: %+v, want a retried failure naming the type", out)
	}
	if want := "ok ok fail fail later never boom"; strings.Join(seen, " ") != want {
		t.Fatalf("middleware saw %q, want %q", strings.Join(seen, " "), want)
	}
}

// TestTryFollowsTheTypesRetryDelay: Try's RetryIn is the type's
// TypeRetryDelay, and a panicking policy leaves it to the backoff.
func TestTryFollowsTheTypesRetryDelay(t *testing.T) {
	w := offline(t, func(c *worker.Config) { c.Backoff = time.Second })
	fail := worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) { return nil, errors.New("no") })
	w.Handle("policy", fail, worker.TypeRetryDelay(func(n int, _ error) time.Duration { return time.Duration(n) * time.Minute }))
	w.Handle("broken", fail, worker.TypeRetryDelay(func(int, error) time.Duration { panic("bug") }))
	ctx := context.Background()
	if out := w.Try(ctx, &worker.Job{Type: "policy", Attempt: 3}, 0); !out.Retry || out.RetryIn != 3*time.Minute {
		t.Fatalf("policy, attempt 3: %+v, want a retry in 3m", out)
	}
	if out := w.Try(ctx, &worker.Job{Type: "broken"}, 0); !out.Retry || out.RetryIn < 800*time.Millisecond || out.RetryIn > 1200*time.Millisecond {
		t.Fatalf("broken policy: %+v, want the backoff's 1s±20%%", out)
	}
}
