// Command producer enqueues jobs with the Go client (package client): one
// job with options, then a batch. Against `sluice dev` (make run):
//
//	go run ./examples/producer
//	go run ./examples/producer --gate http://127.0.0.1:8080 --topic jobs --n 20
//
// It prints where each job went. The client resends after a 504 with the
// same ids and retries 503s, so a job printed is queued exactly once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/examples/internal/example"
)

func main() { example.Main("producer", run) }

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("producer", flag.ContinueOnError)
	gate := example.GateFlags(fs)
	topic := fs.String("topic", "jobs", "topic to enqueue to")
	n := fs.Int("n", 10, "jobs in the batch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := gate.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	// One job, with a few of the envelope's options.
	res, err := c.Enqueue(ctx, *topic, "email", map[string]string{"to": "ada@example.com", "subject": "<welcome> & hello"},
		client.Tenant("acme"),
		client.Resource("smtp"),
		client.MaxAttempts(3),
		client.Timeout(30*time.Second),
		client.Retain(time.Hour), // its record and result stay an hour after it ran
	)
	if err != nil {
		var e *client.Error
		if errors.As(err, &e) {
			return fmt.Errorf("the gate refused the job (%d): %s", e.Status, e.Message)
		}
		return err
	}
	fmt.Fprintf(out, "job %s: %s partition %d offset %d\n", res.ID, res.Topic, res.Partition, res.Offset)

	// A batch: one request, one result per job.
	jobs := make([]client.Job, *n)
	for i := range jobs {
		jobs[i] = client.Job{
			Type:    "resize",
			Payload: map[string]any{"image": "img-" + strconv.Itoa(i) + ".png", "width": 640},
			Options: []client.Option{client.Group("album-7"), client.Retain(time.Hour)},
		}
	}
	br, err := c.EnqueueBatch(ctx, *topic, jobs)
	if err != nil {
		return err // a *BatchError names each job refused; the others are stored
	}
	for _, r := range br.Results {
		fmt.Fprintf(out, "job %s: %s partition %d offset %d\n", r.ID, br.Topic, r.Partition, r.Offset)
	}
	fmt.Fprintf(out, "%d jobs enqueued\n", 1+br.Accepted)
	return nil
}
