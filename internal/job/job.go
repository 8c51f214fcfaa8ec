// Package job defines the job envelope: the JSON document a client posts to the
// gate, the gate writes to Kafka, the relay copies into Redis and a worker hands
// to its handler.
//
// The payload travels as raw bytes from the HTTP body to the handler. It is
// never decoded and re-encoded: encoding/json would escape <, > and & and drop
// insignificant whitespace, and byte equality would be lost (Slack lost it that
// way). Decode keeps the payload's bytes as sent and AppendJSON writes them back
// unchanged.
package job

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/oklog/ulid/v2"
)

// Job is one unit of work: the envelope every part agrees on. Its fields
// and their limits are documented in docs/envelope.md.
type Job struct {
	// ID identifies the job everywhere. The gate assigns a ULID
	// (time-sortable) when the client sends none.
	ID string `json:"id,omitempty"`
	// IDGiven is set by the gate, never taken from the client: true when
	// the client chose ID (or, for a bulk group's item, the group's id), so
	// the client's resends of that id can be deduped. Gate-assigned ULIDs
	// are unique and are never resent.
	IDGiven bool `json:"id_given,omitempty"`
	// Topic is the Kafka topic the job was posted to; the gate sets it from
	// the URL.
	Topic string `json:"topic,omitempty"`
	// Type selects the handler. Required.
	Type string `json:"type"`
	// Group is the fairness and fan-in unit, and the Kafka key (KafkaKey).
	// It has no default: a job without one joins the shared lane of its
	// Redis partition (per tenant, else per topic).
	Group    string `json:"group,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	Resource string `json:"resource,omitempty"`
	// Priority is the job's class, 0 (default) to MaxPriority; workers turn
	// classes into fair-share weights.
	Priority int `json:"priority,omitempty"`
	// Payload is any JSON value, kept byte for byte as the client sent it.
	Payload        json.RawMessage `json:"payload,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// MaxAttempts bounds executions; 0 means the worker's default.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Timeout bounds one execution; 0 means the worker's default.
	Timeout Duration `json:"timeout,omitzero"`
	// Retain is how long the job's record and result are kept after it
	// ends; 0 means not kept (the worker's per-topic default may apply).
	Retain Duration `json:"retain,omitzero"`
	// RunAt delays the job until then; zero means now.
	RunAt time.Time `json:"run_at,omitzero"`
	// EnqueuedAt is when the gate accepted the job.
	EnqueuedAt time.Time `json:"enqueued_at,omitzero"`
	// GroupTotal is the number of jobs in the job's bulk group (bulk
	// submissions only).
	GroupTotal  int64  `json:"group_total,omitempty"`
	CallbackURL string `json:"callback_url,omitempty"`
	// Traceparent is the W3C trace context of the gate's produce span
	// (docs/tracing.md). Like IDGiven it belongs to the gate: Defaults
	// clears what a client sent, and the gate writes it only when tracing
	// is on. The client's own context comes in its traceparent header.
	Traceparent string `json:"traceparent,omitempty"`
}

// Limits on envelope fields. They keep Redis keys and Kafka messages bounded.
const (
	MaxIDLen       = 128
	MaxTypeLen     = 128
	MaxNameLen     = 256 // group, tenant, resource, idempotency key
	MaxURLLen      = 2048
	MaxPriority    = 9
	MaxMaxAttempts = 100
	MaxTimeout     = 24 * time.Hour
	MaxRetain      = 30 * 24 * time.Hour
	MaxRunAtAhead  = 366 * 24 * time.Hour
)

// NewID returns a new job id: a ULID, so ids sort by creation time.
func NewID() string { return ulid.Make().String() }

// Defaults fills what the gate assigns: id (when the client left it out),
// id_given (always: whatever the client sent in it is overwritten), topic
// and enqueue time. It leaves an absent group absent. A client-supplied
// topic must match the URL's; the caller checks that through Validate
// first.
func (j *Job) Defaults(topic string, now time.Time) {
	j.IDGiven = j.ID != ""
	j.Traceparent = ""
	if j.ID == "" {
		j.ID = NewID()
	}
	j.Topic = topic
	if j.EnqueuedAt.IsZero() {
		j.EnqueuedAt = now.UTC()
	}
}

// KafkaKey is the job's Kafka message key: its group when it has one, else
// its id. The producer hashes it (murmur2) to pick the partition unless the
// caller names a partition explicitly.
func (j *Job) KafkaKey() string {
	if j.Group != "" {
		return j.Group
	}
	return j.ID
}

// Duration is a time.Duration that reads either a Go duration string ("30s",
// "1m30s") or a number of seconds, and writes the string form.
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return AppendString(nil, time.Duration(d).String()), nil
}

// UnmarshalJSON reads a Go duration string or a number of seconds. Its
// errors name no field: the same type reads timeout and retain, and the
// decoder adds the field's name.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("not a duration like \"30s\": " + s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return errors.New("want a duration string like \"30s\" or a number of seconds")
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}
