// Package client enqueues jobs into Sluice over the gate's HTTP API: one job
// (Enqueue), a batch (EnqueueBatch), or a bulk group with a callback
// (EnqueueGroup), reads or cancels a group (GroupStatus, CancelGroup), and
// tells where a job is (LookupJob).
//
// A Client does the retries a careful caller would write:
//
//   - It gives every job an id when the caller gives none (a ULID), so the
//     gate marks it client-chosen (id_given) and a resend is deduplicated by
//     the relay for its --id-dedupe-ttl (24 h by default).
//   - After a 504 (Kafka did not acknowledge in time: the job may or may not
//     be stored) it resends the same jobs with the same ids.
//   - A 503 (Kafka unreachable) and a connection error are retried with a
//     doubling, jittered backoff that honours Retry-After, at most
//     RetryPolicy.MaxAttempts sends in all.
//   - A 4xx is returned at once as an *Error carrying the gate's message (and
//     the field, line and column of a decode error): errors.As(err, &e).
//
// Code that enqueues can take an Enqueuer, which *Client satisfies, and
// tests pass client/sluicetest's Recorder, a fake that records each job;
// sluicetest's Harness runs a worker's handlers on a job. A payload type
// with a Kind() string method (JobArgs) names its job type: give the type
// "" to Enqueue, and to worker.HandleFunc.
//
// Every call takes a context: it bounds the whole call, retries and
// backoffs included. docs/client.md maps each option to the envelope field
// and the gate's API, and states what the retries guarantee.
package client
