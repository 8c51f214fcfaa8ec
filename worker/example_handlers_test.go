package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sluicehq/sluice/worker"
)

// Email is the payload of the "email.send" jobs in these examples: what a
// producer posts as the envelope's "payload".
type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func send(ctx context.Context, to, subject string) error { return nil }

// A handler for a job type whose payload is a Go type: the worker decodes
// it once per attempt, and a payload that does not decode goes to the dead
// set with an error naming the type. The type's defaults apply to jobs whose
// envelope sets no timeout or max_attempts.
func ExampleHandleFunc() {
	w, err := worker.New(worker.DefaultConfig(), slog.Default())
	if err != nil {
		panic(err)
	}
	worker.HandleFunc(w, "email.send", func(ctx context.Context, j *worker.TypedJob[Email]) error {
		if j.Payload.To == "" {
			return worker.Permanent(errors.New("no recipient")) // to the dead set now
		}
		return send(ctx, j.Payload.To, j.Payload.Subject) // an error: retried with backoff
	}, worker.TypeTimeout(10*time.Second), worker.TypeMaxAttempts(8))
}

// Resize is the payload of the "image.resize" jobs below.
type Resize struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

// resizer is a typed handler with a result: kept with the job if it asked
// for retain, and gathered by a bulk group for its callback.
type resizer struct{ maxWidth int }

func (r resizer) Handle(ctx context.Context, j *worker.TypedJob[Resize]) ([]byte, error) {
	if j.Payload.Width > r.maxWidth {
		return nil, worker.Permanent(fmt.Errorf("width %d over %d", j.Payload.Width, r.maxWidth))
	}
	return json.Marshal(map[string]string{"thumbnail": j.Payload.URL + "?w=" + fmt.Sprint(j.Payload.Width)})
}

// A typed handler that returns a result, registered with the type's own
// timeout.
func ExampleHandleTyped() {
	w, err := worker.New(worker.DefaultConfig(), slog.Default())
	if err != nil {
		panic(err)
	}
	worker.HandleTyped[Resize](w, "image.resize", resizer{maxWidth: 4096}, worker.TypeTimeout(2*time.Minute))
}

// The raw handler gets the payload's bytes as the client sent them; it takes
// the same per-type defaults.
func ExampleWorker_Handle() {
	w, err := worker.New(worker.DefaultConfig(), slog.Default())
	if err != nil {
		panic(err)
	}
	w.Handle("webhook.forward", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		fmt.Printf("%s attempt %d of %d: %s\n", j.ID, j.Attempt, j.MaxAttempts, j.Payload)
		return nil, nil
	}), worker.TypeMaxAttempts(3))
}

// A program of its own that runs a worker as sluice worker does: the same
// flags and SLUICE_* variables from one call, then ListenAndServe until
// SIGINT or SIGTERM, with a graceful drain.
func ExampleWorker_ListenAndServe() {
	cfg := worker.DefaultConfig()
	cfg.Topics = worker.TopicWeights{{Topic: "emails", Weight: 1}} // a default of this program's; --topics still wins
	log, err := cfg.ParseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	w, err := worker.New(cfg, log)
	if err != nil {
		log.Error("worker", "err", err)
		os.Exit(1)
	}
	worker.HandleFunc(w, "email.send", func(ctx context.Context, j *worker.TypedJob[Email]) error {
		return send(ctx, j.Payload.To, j.Payload.Subject)
	})
	if err := w.ListenAndServe(context.Background()); err != nil {
		log.Error("worker", "err", err)
		os.Exit(1)
	}
}
