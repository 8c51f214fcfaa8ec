package sluicetest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/client/sluicetest"
	"github.com/sluicehq/sluice/worker"
)

// Email names its job type: producer and worker share the Go type.
type Email struct {
	To string `json:"to"`
}

func (Email) Kind() string { return "email.send" }

// notify is code that enqueues: it takes a client.Enqueuer, a
// *client.Client in production.
func notify(ctx context.Context, e client.Enqueuer, to string) error {
	_, err := e.Enqueue(ctx, "mail", "", Email{To: to}, client.MaxAttempts(3))
	return err
}

// A producer's test: what was enqueued, with which options.
func ExampleRecorder() {
	var r sluicetest.Recorder
	if err := notify(context.Background(), &r, "ada@example.com"); err != nil {
		fmt.Println(err)
		return
	}
	j := r.ByType("email.send")[0]
	fmt.Println(j.Topic, j.Type, string(j.JSON), j.Options.MaxAttempts)

	r.FailWith(errors.New("gate down"))
	fmt.Println(notify(context.Background(), &r, "bob@example.com"))
	// Output:
	// mail email.send {"to":"ada@example.com"} 3
	// gate down
}

// A handler's test: one attempt, run as the worker runs it, and how the
// worker would settle it.
func ExampleHarness() {
	// In a test: h := sluicetest.NewHarness(t). Here, a worker of one's
	// own (its Config's limits and backoff apply); it never reaches Redis.
	w, err := worker.New(worker.DefaultConfig(), slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := &sluicetest.Harness{Worker: w}
	worker.HandleFunc(h.Worker, "", func(ctx context.Context, j *worker.TypedJob[Email]) error {
		if j.Payload.To == "" {
			return worker.Permanent(errors.New("no recipient"))
		}
		return nil
	})
	ctx := context.Background()
	out, err := h.Work(ctx, "", Email{To: "ada@example.com"})
	fmt.Println(out.Err, out.Retry, out.Dead, err)
	out, _ = h.Work(ctx, "", Email{})
	fmt.Println(out.Err, out.Retry, out.Dead)
	// Output:
	// <nil> false false <nil>
	// permanent: no recipient false true
}
