package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sluicehq/sluice/internal/wire"
)

// Job states (JobInfo.State), as the gate's lookup tells them.
const (
	// JobInKafka: its Kafka offset is above what the relay applied to
	// Redis (known only when the lookup gave its position).
	JobInKafka = wire.JobInKafka
	// JobReady: on its lane, waiting its turn.
	JobReady = wire.JobReady
	// JobRunning: claimed by a worker; Until is the lease deadline.
	JobRunning = wire.JobRunning
	// JobDelayed: waiting until Until; Why is "retry", "run_at" or
	// "deferred" (a rate-limit slot, or an idempotency key another job
	// holds).
	JobDelayed = wire.JobDelayed
	// JobDead: used up its attempts; LastError and Attempts say how.
	JobDead = wire.JobDead
	// JobDone: done and its record kept (Retain, or an earlier failed
	// attempt); Result is what the handler returned.
	JobDone = wire.JobDone
	// JobCancelled: cancelled by an operator before it ended (sluice
	// jobs cancel); Until is when.
	JobCancelled = wire.JobCancelled
	// JobRatePaused: Redis does not hold it and its topic's relay rate is
	// paused: waiting in Kafka, held by the pause; Until is since when.
	JobRatePaused = wire.JobRatePaused
	// JobNotFound: Redis holds nothing of it. With its position given,
	// Relayed tells a job done without a record (or cancelled) from an
	// unknown one.
	JobNotFound = wire.JobNotFound
)

// JobInfo is where a job is, from what Redis holds (GET
// /v1/topics/{topic}/jobs/{id}, docs/gate.md). It is the very type the
// gate answers with (an alias): Topic, ID, RedisPartition (the queue
// partition looked in), State (a Job* constant), Relayed (a job Redis no
// longer holds was relayed), Attempts, LastError, Result, Worker (who holds
// a running job) and Since (when its batch was claimed), Batch (a running
// job's batch), Until (a running job's lease deadline, a delayed job's due
// time, when a dead or done job ended), Why (a delayed job's reason, a
// ready job's lane) and Note (what the state means, in words).
type JobInfo = wire.JobView

// LookupOption tells LookupJob more about the job than its id.
type LookupOption interface{ applyLookup(url.Values) }

type lookupFunc func(url.Values)

func (f lookupFunc) applyLookup(q url.Values) { f(q) }

// InGroup gives the job's group, which places it in its Redis partition.
// Default: the partition comes from the id, as for a job without a group.
func InGroup(group string) LookupOption {
	return lookupFunc(func(q url.Values) { q.Set("group", group) })
}

// AtPosition gives the job's Kafka position as Enqueue answered it
// (Result.Partition and Result.Offset): a job not yet relayed is then
// JobInKafka, and a relayed one Redis no longer holds says Relayed.
// Default: no position; such a job is JobNotFound.
func AtPosition(partition int32, offset int64) LookupOption {
	return lookupFunc(func(q url.Values) {
		q.Set("partition", strconv.FormatInt(int64(partition), 10))
		q.Set("offset", strconv.FormatInt(offset, 10))
	})
}

// LookupJob tells where job id of topic is: in Kafka, ready, running,
// delayed and why, dead with its last error, done with its result, or not
// found, which is an answer (State JobNotFound), not an error. The gate
// needs --redis-addr (else an *Error with Status 501). 503s and connection
// errors are retried.
func (c *Client) LookupJob(ctx context.Context, topic, id string, opts ...LookupOption) (*JobInfo, error) {
	q := url.Values{}
	for _, o := range opts {
		if o != nil {
			o.applyLookup(q)
		}
	}
	path := topicPath(topic) + "/jobs/" + url.PathEscape(id)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	a, err := c.do(ctx, &exchange{
		method: http.MethodGet, path: path,
		retryable:      func(status int, _ *errorBody) bool { return status == http.StatusServiceUnavailable },
		retryTransport: true,
	})
	var info JobInfo
	if err != nil {
		// A 404 with the lookup's answer is "not found", not a failure.
		if a.status == http.StatusNotFound && json.Unmarshal(a.body, &info) == nil && info.State == JobNotFound {
			return &info, nil
		}
		return nil, err
	}
	if err := json.Unmarshal(a.body, &info); err != nil {
		return nil, fmt.Errorf("client: reading the gate's answer %d %q: %v", a.status, a.body, err)
	}
	return &info, nil
}
