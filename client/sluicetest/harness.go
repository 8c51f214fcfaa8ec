package sluicetest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/client/internal/jobcheck"
	"github.com/sluicehq/sluice/worker"
)

// NewWorker returns a worker.Worker of worker.DefaultConfig() to register
// handlers on (Handle, HandleFunc, Use) for a Harness. It never connects
// to Redis: a Harness calls its handlers, nothing calls Run.
func NewWorker(tb testing.TB) *worker.Worker {
	tb.Helper()
	w, err := worker.New(worker.DefaultConfig(), slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatalf("sluicetest.NewWorker: %v", err)
	}
	return w
}

// Harness runs the handlers registered on Worker on jobs given as a
// producer enqueues them, one attempt at a time, the way the worker runs a
// claimed job (worker.Worker.Try): the middleware, the job's options over
// the type's defaults over the worker's Config, the attempt's timeout as
// the handler context's deadline, a panic as a failed attempt. It returns
// the worker.Outcome the worker would settle: done with a result, retried
// after a delay, or dead.
type Harness struct {
	// Worker holds the handlers: NewWorker's, or one's own from
	// worker.New (its Config's MaxAttempts, Timeout and Backoff apply).
	Worker *worker.Worker
	// Topic is the topic the jobs come from (worker.Job.Topic). Default
	// worker.DefaultTopic.
	Topic string
	// Now stamps the jobs' EnqueuedAt. Default time.Now.
	Now func() time.Time
}

// NewHarness returns a Harness over NewWorker(tb): register the handlers
// on h.Worker.
func NewHarness(tb testing.TB) *Harness {
	tb.Helper()
	return &Harness{Worker: NewWorker(tb)}
}

// Work runs the first attempt of a job of jobType ("" takes the payload's
// Kind()) with payload and opts, as Enqueue(ctx, topic, jobType, payload,
// opts...) would have sent it. The error is the one Enqueue would have
// returned before sending (no type, an option Enqueue does not take, a
// payload that does not encode); the handler's is Outcome.Err.
func (h *Harness) Work(ctx context.Context, jobType string, payload any, opts ...client.Option) (worker.Outcome, error) {
	return h.WorkAttempt(ctx, 1, jobType, payload, opts...)
}

// WorkAttempt is Work for attempt n (1 is the first): a retry's handler
// sees Job.Attempt n, and the last attempt's failure is Dead.
func (h *Harness) WorkAttempt(ctx context.Context, n int, jobType string, payload any, opts ...client.Option) (worker.Outcome, error) {
	e, err := prepare("Enqueue", jobcheck.Job, h.topic(), jobType, payload, opts)
	if err != nil {
		return worker.Outcome{}, err
	}
	return h.WorkEnqueued(ctx, n, e), nil
}

// WorkEnqueued runs attempt n of a job a Recorder took (Recorder.Jobs):
// what a producer under test enqueued, run by the worker under test. The
// job's topic, id, group, tenant, resource, payload, max attempts and
// timeout are the recorded ones.
func (h *Harness) WorkEnqueued(ctx context.Context, n int, e Enqueued) worker.Outcome {
	topic := e.Topic
	if topic == "" {
		topic = h.topic()
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	j := &worker.Job{
		ID: e.ID, Type: e.Type, Group: e.Options.Group, Tenant: e.Options.Tenant, Resource: e.Options.Resource,
		Topic: topic, Payload: e.JSON, Attempt: n, MaxAttempts: e.Options.MaxAttempts, EnqueuedAt: now().UTC(),
	}
	return h.Worker.Try(ctx, j, e.Options.Timeout)
}

func (h *Harness) topic() string {
	if h.Topic == "" {
		return worker.DefaultTopic
	}
	return h.Topic
}
