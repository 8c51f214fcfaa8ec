package client

import (
	"context"
	"time"
)

// Enqueuer is what code that enqueues needs of a Client: take one, and a
// test passes client/sluicetest's Recorder instead of a Client and a gate.
// *Client satisfies it.
type Enqueuer interface {
	Enqueue(ctx context.Context, topic, jobType string, payload any, opts ...Option) (*Result, error)
	EnqueueBatch(ctx context.Context, topic string, jobs []Job, opts ...Option) (*BatchResult, error)
	EnqueueGroup(ctx context.Context, topic, jobType string, items []any, opts ...Option) (*GroupResult, error)
}

var _ Enqueuer = (*Client)(nil)

// JobArgs is a payload type that names its job type (River's JobArgs):
// Enqueue, EnqueueBatch and EnqueueGroup given the job type "" take the
// payload's Kind(), and worker.HandleFunc and worker.HandleTyped given ""
// take T's, so producer and worker share one Go type and no string.
// Kind is called on the value sent (on the worker, on T's zero value):
// return a constant. An explicit job type wins over Kind.
type JobArgs interface{ Kind() string }

// JobOptions are a job's options read back (ReadOptions): the values the
// options given set, zero for those not given (the option's default
// applies). Wrappers of an Enqueuer and fakes (client/sluicetest) use it to
// see what a caller asked for.
type JobOptions struct {
	ID, Group, Tenant, Resource string
	Priority                    int
	// RunAt is RunAt's time; Delay is Delay's duration (only one is set:
	// the last given wins).
	RunAt          time.Time
	Delay          time.Duration
	MaxAttempts    int
	Timeout        time.Duration
	IdempotencyKey string
	Retain         time.Duration
	Acks           AckLevel
	Callback       string
	// Given names the options given, in order ("Group", "Timeout", ...).
	Given []string
}

// ReadOptions reads opts back into a JobOptions. It checks nothing: a
// call checks which of its options apply.
func ReadOptions(opts ...Option) JobOptions {
	s := newSettings(opts)
	return JobOptions{
		ID: s.env.ID, Group: s.env.Group, Tenant: s.env.Tenant, Resource: s.env.Resource,
		Priority: s.env.Priority, RunAt: s.env.RunAt, Delay: s.delay, MaxAttempts: s.env.MaxAttempts,
		Timeout: time.Duration(s.env.Timeout), IdempotencyKey: s.env.IdempotencyKey, Retain: time.Duration(s.env.Retain),
		Acks: s.acks, Callback: s.callback, Given: s.set,
	}
}
