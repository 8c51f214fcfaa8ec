package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/client/internal/jobcheck"
	"github.com/sluicehq/sluice/internal/job"
)

// Result is where the gate stored an accepted job: its Kafka partition and
// offset. The job is durable in Kafka once a Result is returned.
type Result struct {
	ID        string `json:"id"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Job is one job of a batch: its type, its payload and its options.
type Job struct {
	// Type selects the handler. Required, unless Payload's type has a
	// Kind() method (JobArgs), whose answer "" takes.
	Type string
	// Payload is any value encoding/json encodes (a json.RawMessage or
	// []byte is sent as it is, and must be JSON), or nil for none.
	Payload any
	// Options set the job's envelope fields (Acks is the batch's: give it
	// to EnqueueBatch).
	Options []Option
}

// Enqueue sends one job of jobType to topic (POST /v1/topics/{topic}/jobs)
// and returns once Kafka holds it. payload is any value encoding/json
// encodes (a json.RawMessage or []byte is sent byte for byte, and must be
// JSON), or nil for none. jobType "" takes the payload's Kind() (its type
// is a JobArgs); without one the job is refused.
//
// A 504 or 503 answer, or a connection error, is retried with the same id
// (the client assigns one when ID is not given), so the job is queued once
// whatever happened to the earlier sends. A 4xx is returned as an *Error.
func (c *Client) Enqueue(ctx context.Context, topic, jobType string, payload any, opts ...Option) (*Result, error) {
	s := newSettings(opts)
	if err := s.only("Enqueue", jobOptions); err != nil {
		return nil, err
	}
	body, err := s.envelope(jobType, payload, time.Now())
	if err != nil {
		return nil, err
	}
	a, err := c.do(ctx, &exchange{
		method: http.MethodPost, path: topicPath(topic) + "/jobs", header: s.header(), body: body,
		retryable: retryableStatus, retryTransport: true,
	})
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(a.body, &r); err != nil {
		return nil, fmt.Errorf("client: reading the gate's answer %d %q: %v", a.status, a.body, err)
	}
	return &r, nil
}

// BatchResult is the gate's answer to a batch, one result per job in
// batch order, whatever number of sends it took.
type BatchResult struct {
	Topic    string
	Accepted int
	Rejected int
	Results  []ItemResult
}

// ItemResult is one job's outcome in a batch.
type ItemResult struct {
	// Index is the job's position in the batch.
	Index int
	// Status is 202 when the gate accepted the job, else the item's error
	// status.
	Status int
	// ID is the job's id (assigned by the client when not given).
	ID        string
	Partition int32
	Offset    int64
	// Err is the reason the job was not accepted; nil when it was.
	Err *Error
}

// EnqueueBatch sends jobs to topic in one request (POST
// /v1/topics/{topic}/jobs:batch, at most the gate's --max-batch-jobs, 1000
// by default). The gate accepts each valid job and rejects each invalid one
// on its own; EnqueueBatch resends the jobs answered 503 or 504 (and the
// whole batch after a connection error or a 503 or 504 for all), with
// their ids, until each is accepted, rejected or out of attempts.
//
// The result always has one item per job when the gate answered per job.
// The error is a *BatchError when some jobs were not accepted (the others
// are stored), or an *Error when the gate refused the whole request (an
// auth error, an unknown topic, a body it could not read).
func (c *Client) EnqueueBatch(ctx context.Context, topic string, jobs []Job, opts ...Option) (*BatchResult, error) {
	if len(jobs) == 0 {
		return nil, errors.New("client: EnqueueBatch: no jobs")
	}
	s := newSettings(opts)
	if err := s.only("EnqueueBatch", jobcheck.Batch); err != nil {
		return nil, err
	}
	now := time.Now()
	envs := make([][]byte, len(jobs))
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		js := newSettings(j.Options)
		if err := js.only("a batch's Job", jobOptions); err != nil {
			return nil, err
		}
		if js.acks != "" {
			return nil, fmt.Errorf("client: job %d: Acks applies to the whole batch: pass it to EnqueueBatch", i)
		}
		env, err := js.envelope(j.Type, j.Payload, now)
		if err != nil {
			return nil, fmt.Errorf("client: job %d: %w", i, err)
		}
		envs[i], ids[i] = env, js.env.ID
	}
	out := &BatchResult{Topic: topic, Results: make([]ItemResult, len(jobs))}
	pending := make([]int, len(jobs)) // indexes still to send
	for i := range pending {
		pending[i] = i
	}
	// Every send counts against RetryPolicy.MaxAttempts, whether do
	// resent the whole request or this loop the jobs answered 503 or 504.
	for sent := 0; len(pending) > 0; {
		var body bytes.Buffer
		body.WriteByte('[')
		for k, i := range pending {
			if k > 0 {
				body.WriteByte(',')
			}
			body.Write(envs[i])
		}
		body.WriteByte(']')
		// Retries of the whole request (503 or 504 for every job, a
		// connection error) happen in do; per-job 503s and 504s in a
		// 207 are resent here, alone.
		a, err := c.do(ctx, &exchange{
			method: http.MethodPost, path: topicPath(topic) + "/jobs:batch", header: s.header(), body: body.Bytes(),
			retryable: func(status int, eb *errorBody) bool { return retryableStatus(status, eb) && !hasResults(eb) }, retryTransport: true,
			maxAttempts: c.retry.MaxAttempts - sent,
		})
		sent += a.attempts
		var ge *Error
		if err != nil && !(errors.As(err, &ge) && len(a.body) > 0 && bytes.Contains(a.body, []byte(`"results"`))) {
			return nil, err
		}
		var ans struct {
			Topic   string `json:"topic"`
			Results []struct {
				Index     int    `json:"index"`
				Status    int    `json:"status"`
				ID        string `json:"id"`
				Partition int32  `json:"partition"`
				Offset    int64  `json:"offset"`
				Error     string `json:"error"`
				Field     string `json:"field"`
			} `json:"results"`
		}
		if err := json.Unmarshal(a.body, &ans); err != nil || len(ans.Results) != len(pending) {
			return nil, fmt.Errorf("client: reading the gate's batch answer %d %q: %v (want %d results)", a.status, a.body, err, len(pending))
		}
		var again []int
		for k, r := range ans.Results {
			i := pending[k]
			item := ItemResult{Index: i, Status: r.Status, ID: r.ID, Partition: r.Partition, Offset: r.Offset}
			if item.ID == "" {
				item.ID = ids[i]
			}
			if r.Status != http.StatusAccepted {
				item.Err = &Error{Status: r.Status, Message: r.Error, Field: r.Field, Attempts: sent}
				if item.Err.Temporary() && sent < c.retry.MaxAttempts {
					again = append(again, i)
				}
			}
			out.Results[i] = item
		}
		pending = again
		if len(pending) > 0 {
			if err := sleep(ctx, retryBackoff(c.retry, sent, a.retryAfter)); err != nil {
				return nil, err
			}
		}
	}
	var rejected []ItemResult
	for _, r := range out.Results {
		if r.Err == nil {
			out.Accepted++
		} else {
			out.Rejected++
			rejected = append(rejected, r)
		}
	}
	if len(rejected) > 0 {
		return out, &BatchError{Rejected: rejected, Total: len(jobs)}
	}
	return out, nil
}

// hasResults tells a batch answered per job (every job 503, say) from an
// error for the whole request: the former's body has no "error".
func hasResults(eb *errorBody) bool { return eb != nil && eb.Error == "" }

var jobOptions = jobcheck.Job

// only fails when an option outside allowed was given.
func (s *settings) only(call string, allowed []string) error {
	return jobcheck.Only(call, s.set, allowed)
}

// envelope encodes the job as the gate reads it, with an id.
func (s *settings) envelope(jobType string, payload any, now time.Time) ([]byte, error) {
	jobType, err := jobcheck.Type(jobType, payload)
	if err != nil {
		return nil, err
	}
	s.env.Type = jobType
	if s.env.ID == "" {
		s.env.ID = job.NewID()
	}
	if s.delay > 0 {
		s.env.RunAt = now.Add(s.delay).UTC()
	}
	p, err := encodePayload(payload)
	if err != nil {
		return nil, err
	}
	s.env.Payload = p
	return s.env.AppendJSON(nil), nil
}

func (s *settings) header() http.Header {
	if s.acks == "" {
		return nil
	}
	return http.Header{"Sluice-Acks": {string(s.acks)}}
}

func encodePayload(v any) (json.RawMessage, error) { return jobcheck.Payload(v) }
