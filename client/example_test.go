package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/worker"
)

// The examples talk to the gate of `sluice dev` (make run); they are
// compiled, not run, by go test. The tests in this package run the same
// calls against a real gate.

func ExampleNew() {
	c, err := client.New(client.Config{
		URL:   "http://127.0.0.1:8080", // sluice dev's gate
		Token: "",                      // a gate with --tokens wants one
		Retry: client.RetryPolicy{MaxAttempts: 5, MaxBackoff: 2 * time.Second},
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = c
}

func ExampleClient_Enqueue() {
	c, _ := client.New(client.Config{URL: "http://127.0.0.1:8080"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Enqueue(ctx, "jobs", "email", map[string]string{"to": "ada@example.com"},
		client.Tenant("acme"),
		client.Resource("smtp"),      // rate-limited with `sluice limits set smtp 10`
		client.Delay(10*time.Second), // run_at: ten seconds from now
		client.MaxAttempts(3),        // else the worker's 5
		client.Retain(time.Hour),     // keep its result an hour
		client.Acks(client.AcksAll),  // every in-sync replica holds it
		client.IdempotencyKey("welcome-ada"),
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("job %s is in Kafka at %s/%d@%d\n", res.ID, res.Topic, res.Partition, res.Offset)
}

func ExampleClient_EnqueueBatch() {
	c, _ := client.New(client.Config{URL: "http://127.0.0.1:8080"})
	jobs := []client.Job{
		{Type: "resize", Payload: map[string]string{"image": "a.png"}},
		{Type: "resize", Payload: map[string]string{"image": "b.png"}, Options: []client.Option{client.Priority(5)}},
	}
	res, err := c.EnqueueBatch(context.Background(), "jobs", jobs)
	var be *client.BatchError
	switch {
	case errors.As(err, &be):
		// The others are stored; these were refused, each with its reason.
		for _, r := range be.Rejected {
			fmt.Printf("job %d: %v\n", r.Index, r.Err)
		}
	case err != nil:
		log.Fatal(err) // the whole request was refused, or retries ran out
	}
	fmt.Println(res.Accepted, "accepted")
}

func ExampleClient_EnqueueGroup() {
	c, _ := client.New(client.Config{URL: "http://127.0.0.1:8080"})
	items := []any{
		map[string]string{"to": "a@example.com"},
		map[string]string{"to": "b@example.com"},
	}
	g, err := c.EnqueueGroup(context.Background(), "jobs", "email", items,
		client.ID("newsletter-42"),
		client.Callback("http://127.0.0.1:9000/done"), // POSTed the results once every job ended
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("group %s: %d jobs, status at %s\n", g.Group, g.Count, g.Status)
}

func ExampleClient_GroupStatus() {
	c, _ := client.New(client.Config{URL: "http://127.0.0.1:8080"})
	st, err := c.GroupStatus(context.Background(), "jobs", "newsletter-42")
	var e *client.Error
	if errors.As(err, &e) && e.Status == http.StatusNotFound {
		fmt.Println("not in Redis yet (or expired)")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d of %d done, %d dead\n", st.State, st.Done, st.Total, st.Dead)
}

func ExampleClient_CancelGroup() {
	c, _ := client.New(client.Config{URL: "http://127.0.0.1:8080"})
	st, err := c.CancelGroup(context.Background(), "jobs", "newsletter-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d ready jobs removed\n", st.State, st.Removed)
}

func ExampleError() {
	c, _ := client.New(client.Config{URL: "http://127.0.0.1:8080"})
	_, err := c.Enqueue(context.Background(), "jobs", "email", nil, client.Priority(42))
	var e *client.Error
	if errors.As(err, &e) {
		// 400, field "priority", and the gate's message saying what to fix.
		fmt.Println(e.Status, e.Field, e.Message)
	}
}

func ExampleClient_LookupJob() {
	c, _ := client.New(client.Config{URL: "http://127.0.0.1:8080"})
	ctx := context.Background()
	res, err := c.Enqueue(ctx, "jobs", "email", nil)
	if err != nil {
		log.Fatal(err)
	}
	// The position tells a job still in Kafka from one done without a record.
	info, err := c.LookupJob(ctx, "jobs", res.ID, client.AtPosition(res.Partition, res.Offset))
	if err != nil {
		log.Fatal(err)
	}
	switch info.State {
	case client.JobDelayed:
		fmt.Printf("waiting until %s (%s); attempts %d, last error %q\n", info.Until, info.Why, info.Attempts, info.LastError)
	case client.JobDead:
		fmt.Printf("dead after %d attempts: %s\n", info.Attempts, info.LastError)
	default:
		fmt.Println(info.State, info.Note)
	}
}

// A handler enqueues follow-up jobs with the same client (fan-out from
// inside a job). The children's ids derive from the parent's, so a retried
// parent resends the same children and each is queued once.
func ExampleClient_Enqueue_fanOut() {
	c, _ := client.New(client.Config{URL: "http://127.0.0.1:8080"})
	split := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) ([]byte, error) {
		for i, page := range []string{"a", "b", "c"} {
			_, err := c.Enqueue(ctx, job.Topic, "render", map[string]string{"page": page},
				client.ID(job.ID+".render-"+strconv.Itoa(i)), // stable across the parent's attempts
				client.Group(job.ID))                         // the children share a lane and a Kafka partition
			if err != nil {
				return nil, err // the parent is retried; children already sent are deduplicated
			}
		}
		return nil, nil
	})
	_ = split // w.Handle("split", split) on a *worker.Worker
}
