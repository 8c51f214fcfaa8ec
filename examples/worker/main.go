// Command worker is a Sluice worker of one's own: two job types, each with
// a Go type for its payload, run as sluice worker runs (the same flags and
// SLUICE_* variables, /healthz, /readyz and /metrics on --listen, a
// graceful drain on SIGINT or SIGTERM).
//
// Against the pipeline on this machine, without its built-in worker:
//
//	sluice dev --worker=false    # prints the variables below for its addresses
//	SLUICE_WORKER_REDIS_ADDR=127.0.0.1:6390 SLUICE_WORKER_LISTEN=127.0.0.1:8082 \
//	SLUICE_WORKER_CONSUL_ADDR=127.0.0.1:8500 go run ./examples/worker
//
// then post jobs to the gate:
//
//	curl -sS -X POST http://127.0.0.1:8080/v1/topics/jobs/jobs -H 'Content-Type: application/json' \
//	  -d '{"type":"email.send","payload":{"to":"ada@example.com","subject":"Welcome"}}'
//	curl -sS -X POST http://127.0.0.1:8080/v1/topics/jobs/jobs -H 'Content-Type: application/json' \
//	  -d '{"type":"image.resize","retain":"1h","payload":{"url":"https://example.com/a.png","width":320}}'
//
// A payload that does not decode into its type (say "width":"wide") goes
// to the dead set at once, with an error that names the job type and the Go
// type: `sluice dlq ls` shows it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/worker"
)

// Email is the payload of "email.send" jobs.
type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// Resize is the payload of "image.resize" jobs.
type Resize struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

func main() {
	cfg := worker.DefaultConfig()
	log, err := cfg.ParseFlags(nil, os.Args[1:]) // sluice worker's flags and SLUICE_WORKER_* / SLUICE_* variables
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0) // -h: the usage is printed
		}
		// A bad flag or variable: say which (a bad flag's usage is
		// printed too), then exit 2, as sluice worker does.
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	w, err := worker.New(cfg, log)
	if err != nil {
		log.Error("worker", "err", err)
		os.Exit(1)
	}

	// No result: HandleFunc. Sending mail can hang, so the type bounds an
	// attempt at 10 s and gives up after 8, unless a job says otherwise.
	worker.HandleFunc(w, "email.send", func(ctx context.Context, j *worker.TypedJob[Email]) error {
		if !strings.Contains(j.Payload.To, "@") {
			return worker.Permanent(fmt.Errorf("recipient %q is no address", j.Payload.To)) // no retry would help
		}
		log.Info("email sent", "job", j.ID, "to", j.Payload.To, "subject", j.Payload.Subject, "attempt", j.Attempt)
		return nil
	}, worker.TypeTimeout(10*time.Second), worker.TypeMaxAttempts(8))

	// A result: kept with the job if it asked for retain, gathered by its
	// bulk group for the callback.
	worker.HandleTyped(w, "image.resize", worker.TypedHandlerFunc[Resize](func(ctx context.Context, j *worker.TypedJob[Resize]) ([]byte, error) {
		if j.Payload.Width <= 0 || j.Payload.Width > 4096 {
			return nil, worker.Permanent(errors.New("width must be 1..4096"))
		}
		log.Info("image resized", "job", j.ID, "url", j.Payload.URL, "width", j.Payload.Width)
		return json.Marshal(map[string]any{"thumbnail": fmt.Sprintf("%s?w=%d", j.Payload.URL, j.Payload.Width), "width": j.Payload.Width})
	}), worker.TypeTimeout(time.Minute))

	if err := w.ListenAndServe(context.Background()); err != nil {
		log.Error("worker", "err", err)
		os.Exit(1)
	}
}
