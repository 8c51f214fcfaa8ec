// Package sluicetest helps test code that uses Sluice without a gate,
// Kafka or Redis (River's rivertest):
//
//   - Recorder is a fake client.Enqueuer for code that enqueues: it
//     records every job with its options, refuses what the Client refuses
//     before sending, and fails when told to.
//   - Harness runs a worker's handlers on a job given as a producer
//     enqueues it (type, payload, options, attempt), as the worker runs
//     it, and returns how the worker would settle the attempt.
//
// docs/client.md#testing-with-sluicetest shows both.
package sluicetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/client/internal/jobcheck"
	"github.com/sluicehq/sluice/internal/job"
)

// Enqueued is one job a Recorder took.
type Enqueued struct {
	// Call is the method that enqueued it: "Enqueue", "EnqueueBatch" or
	// "EnqueueGroup".
	Call  string
	Topic string
	// Type is the job type: the one given, else the payload's Kind().
	Type string
	// ID is the job's id: the ID option's, else one assigned as the
	// Client assigns it; a group item's is "<group>.<index>".
	ID string
	// Payload is the value given; JSON is it encoded as the Client sends
	// it, and as the handler gets it (worker.Job.Payload).
	Payload any
	JSON    json.RawMessage
	// Options are the job's options read back: a batch job's own with the
	// batch's Acks, a group item's are the group's (with Group set to the
	// group's id).
	Options client.JobOptions
	// Index is the job's place in its batch or group; 0 for Enqueue.
	Index int
}

// Recorder is a fake client.Enqueuer: give it to code that takes one,
// then assert on what it recorded (Jobs, ByType, Payloads). It refuses
// what the Client refuses before sending (a job without a type, an option
// the call does not take, a payload that does not encode), with the same
// errors; it does not check what only the gate checks (a priority out of
// range, say). Its zero value is ready to use and safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	jobs   []Enqueued
	offset int64
	fail   func(Enqueued) error
}

var _ client.Enqueuer = (*Recorder)(nil)

// FailWith makes every later job fail with err: Enqueue and EnqueueGroup
// return it, EnqueueBatch rejects each job with it when it is a
// *client.Error (the others are taken, as the gate does) and fails the
// whole batch otherwise (as a connection error would). nil ends it.
// A job that failed is not recorded.
func (r *Recorder) FailWith(err error) {
	if err == nil {
		r.FailWhen(nil)
		return
	}
	r.FailWhen(func(Enqueued) error { return err })
}

// FailWhen makes the jobs for which fail returns an error fail with it,
// as FailWith describes; nil ends it.
func (r *Recorder) FailWhen(fail func(Enqueued) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = fail
}

// Jobs returns every job recorded, in the order taken.
func (r *Recorder) Jobs() []Enqueued {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Enqueued(nil), r.jobs...)
}

// ByType returns the jobs recorded of jobType, in the order taken.
func (r *Recorder) ByType(jobType string) []Enqueued {
	var out []Enqueued
	for _, e := range r.Jobs() {
		if e.Type == jobType {
			out = append(out, e)
		}
	}
	return out
}

// Reset forgets the jobs recorded (not FailWith).
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs = nil
}

// Payloads decodes the JSON of the jobs recorded of jobType into Ts, as a
// worker.HandleFunc of T would: jobType "" takes T's Kind() (JobArgs). An
// error names the job that does not decode.
func Payloads[T any](r *Recorder, jobType string) ([]T, error) {
	if jobType == "" {
		var zero T
		k, err := jobcheck.Type("", zero)
		if err != nil {
			if k, err = jobcheck.Type("", &zero); err != nil {
				return nil, fmt.Errorf("sluicetest.Payloads: job type \"\" and %T has no Kind() string method: pass the job type", zero)
			}
		}
		jobType = k
	}
	var out []T
	for _, e := range r.ByType(jobType) {
		var v T
		if len(e.JSON) > 0 {
			if err := json.Unmarshal(e.JSON, &v); err != nil {
				return nil, fmt.Errorf("sluicetest.Payloads: job %s (%s): payload does not decode into %T: %w", e.ID, jobType, v, err)
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// prepare checks one job as the Client does before sending it.
func prepare(call string, allowed []string, topic, jobType string, payload any, opts []client.Option) (Enqueued, error) {
	o := client.ReadOptions(opts...)
	if err := jobcheck.Only(call, o.Given, allowed); err != nil {
		return Enqueued{}, err
	}
	typ, err := jobcheck.Type(jobType, payload)
	if err != nil {
		return Enqueued{}, err
	}
	js, err := jobcheck.Payload(payload)
	if err != nil {
		return Enqueued{}, err
	}
	e := Enqueued{Call: call, Topic: topic, Type: typ, ID: o.ID, Payload: payload, JSON: js, Options: o}
	if e.ID == "" {
		e.ID = job.NewID()
	}
	return e, nil
}

// failure is what r's FailWhen says of e.
func (r *Recorder) failure(e Enqueued) error {
	r.mu.Lock()
	fail := r.fail
	r.mu.Unlock()
	if fail == nil {
		return nil
	}
	return fail(e)
}

// record keeps es, and returns the offset of the first.
func (r *Recorder) record(es ...Enqueued) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := r.offset
	r.jobs = append(r.jobs, es...)
	r.offset += int64(len(es))
	return first
}

// Enqueue records one job, or returns the error the Client would, or
// FailWith's. Its Result has partition 0 and the next offset.
func (r *Recorder) Enqueue(ctx context.Context, topic, jobType string, payload any, opts ...client.Option) (*client.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e, err := prepare("Enqueue", jobcheck.Job, topic, jobType, payload, opts)
	if err != nil {
		return nil, err
	}
	if err := r.failure(e); err != nil {
		return nil, err
	}
	return &client.Result{ID: e.ID, Topic: topic, Offset: r.record(e)}, nil
}

// EnqueueBatch records the jobs FailWith lets through, and answers as the
// gate does: a *client.BatchError lists the others.
func (r *Recorder) EnqueueBatch(ctx context.Context, topic string, jobs []client.Job, opts ...client.Option) (*client.BatchResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, errors.New("client: EnqueueBatch: no jobs")
	}
	batch := client.ReadOptions(opts...)
	if err := jobcheck.Only("EnqueueBatch", batch.Given, jobcheck.Batch); err != nil {
		return nil, err
	}
	es := make([]Enqueued, len(jobs))
	for i, j := range jobs {
		e, err := prepare("a batch's Job", jobcheck.Job, topic, j.Type, j.Payload, j.Options)
		if err != nil {
			return nil, fmt.Errorf("client: job %d: %w", i, err)
		}
		if e.Options.Acks != "" {
			return nil, fmt.Errorf("client: job %d: Acks applies to the whole batch: pass it to EnqueueBatch", i)
		}
		e.Call, e.Index, e.Options.Acks = "EnqueueBatch", i, batch.Acks
		es[i] = e
	}
	out := &client.BatchResult{Topic: topic, Results: make([]client.ItemResult, len(jobs))}
	var taken []Enqueued
	var rejected []client.ItemResult
	for i, e := range es {
		out.Results[i] = client.ItemResult{Index: i, Status: http.StatusAccepted, ID: e.ID}
		err := r.failure(e)
		var ce *client.Error
		switch {
		case err == nil:
			taken = append(taken, e)
		case errors.As(err, &ce):
			out.Results[i].Status, out.Results[i].Err = ce.Status, ce
			rejected = append(rejected, out.Results[i])
		default:
			return nil, err
		}
	}
	first := r.record(taken...)
	k := int64(0)
	for i := range out.Results {
		if out.Results[i].Err == nil {
			out.Results[i].Offset = first + k
			k++
		}
	}
	out.Accepted, out.Rejected = len(taken), len(rejected)
	if len(rejected) > 0 {
		return out, &client.BatchError{Rejected: rejected, Total: len(jobs)}
	}
	return out, nil
}

// EnqueueGroup records a bulk group's items as jobs "<group>.<index>" of
// one type (jobType, else the items' Kind()), each with the group's
// options, or none of them if FailWith fails one.
func (r *Recorder) EnqueueGroup(ctx context.Context, topic, jobType string, items []any, opts ...client.Option) (*client.GroupResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := client.ReadOptions(opts...)
	if err := jobcheck.Only("EnqueueGroup", o.Given, jobcheck.Group); err != nil {
		return nil, err
	}
	typ, err := jobcheck.GroupType(jobType, items)
	if err != nil {
		return nil, err
	}
	group := o.ID
	if group == "" {
		group = job.NewID()
	}
	es := make([]Enqueued, len(items))
	for i, item := range items {
		e, err := prepare("EnqueueGroup", jobcheck.Group, topic, typ, item, opts)
		if err != nil {
			return nil, fmt.Errorf("client: item %d: %w", i, err)
		}
		if e.JSON == nil {
			e.JSON = json.RawMessage("null")
		}
		e.Call, e.Index, e.ID = "EnqueueGroup", i, fmt.Sprintf("%s.%d", group, i)
		e.Options.ID, e.Options.Group = group, group
		if err := r.failure(e); err != nil {
			return nil, err
		}
		es[i] = e
	}
	r.record(es...)
	return &client.GroupResult{Group: group, Topic: topic, Count: int64(len(items)),
		Status: "/v1/topics/" + url.PathEscape(topic) + "/groups/" + url.PathEscape(group)}, nil
}
