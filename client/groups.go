package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicehq/sluice/client/internal/jobcheck"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/wire"
)

// GroupResult is the gate's answer to a bulk group: every item and the
// group's close record are in Kafka.
type GroupResult struct {
	// Group is the group's id (assigned by the client when not given).
	Group string `json:"group"`
	Topic string `json:"topic"`
	// Count is the number of items, each now job "<Group>.<index>".
	Count int64 `json:"count"`
	// Status is the gate's path of the group's status and cancel.
	Status string `json:"status"`
}

// groupOptions are the fields the gate takes for a bulk group.
var groupOptions = jobcheck.Group

// EnqueueGroup submits a bulk group of jobType to topic (POST
// /v1/topics/{topic}/groups): item i becomes job "<group>.<i>" with items[i]
// as its payload (any value encoding/json encodes; json.RawMessage is sent
// as it is). With Callback, the coordinator POSTs the group's results
// there once every job ended. Options: ID (the group's), Tenant, Resource,
// Priority, MaxAttempts, Timeout, Acks and Callback; another is an error.
//
// The group's id is the client's (a ULID when ID is not given), so its
// items are deduplicated if a submission is repeated. Retried: a 503
// before the gate wrote anything (Kafka known unreachable) and a
// connection that was never made. Not retried: a 504 or a 503 halfway
// through, after which the gate cancels the items it wrote and the id
// takes no more jobs; the *Error says so, and the group must be submitted
// under a new id. All items are encoded in memory before the first send.
// jobType "" takes the items' Kind() (JobArgs), which must be one.
func (c *Client) EnqueueGroup(ctx context.Context, topic, jobType string, items []any, opts ...Option) (*GroupResult, error) {
	s := newSettings(opts)
	if err := s.only("EnqueueGroup", groupOptions); err != nil {
		return nil, err
	}
	jobType, err := jobcheck.GroupType(jobType, items)
	if err != nil {
		return nil, err
	}
	if s.env.ID == "" {
		s.env.ID = job.NewID()
	}
	fields := job.GroupFields{ID: s.env.ID, Type: jobType, Tenant: s.env.Tenant, Resource: s.env.Resource, Priority: s.env.Priority, CallbackURL: s.callback, MaxAttempts: s.env.MaxAttempts}
	if s.env.Timeout != 0 {
		fields.Timeout = &s.env.Timeout
	}
	// NDJSON: the fields on the first line, then one payload per line.
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return nil, err
	}
	for i, item := range items {
		p, err := encodePayload(item)
		if err != nil {
			return nil, fmt.Errorf("client: item %d: %w", i, err)
		}
		if p == nil {
			p = json.RawMessage("null")
		}
		body.Write(p)
		body.WriteByte('\n')
	}
	h := s.header()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/x-ndjson")
	a, err := c.do(ctx, &exchange{
		method: http.MethodPost, path: topicPath(topic) + "/groups", header: h, body: body.Bytes(),
		// A 503 with ids came after items were written (and cancelled);
		// without ids it came before any.
		retryable: func(status int, eb *errorBody) bool {
			return status == http.StatusServiceUnavailable && eb != nil && len(eb.IDs) == 0
		},
	})
	if err != nil {
		return nil, err
	}
	var r GroupResult
	if err := json.Unmarshal(a.body, &r); err != nil {
		return nil, fmt.Errorf("client: reading the gate's answer %d %q: %v", a.status, a.body, err)
	}
	return &r, nil
}

// Group states (GroupStatus.State).
const (
	// GroupSubmitting: the close record has not been relayed; items may
	// still be on their way from Kafka.
	GroupSubmitting = wire.GroupSubmitting
	GroupRunning    = wire.GroupRunning
	// GroupCancelling: cancelled; jobs that were running may still finish.
	GroupCancelling = wire.GroupCancelling
	GroupCompleted  = wire.GroupCompleted
)

// GroupStatus is a bulk group's status, as the gate's group routes answer
// it (docs/groups.md). It is the very type the gate and the admin API
// answer with (an alias), so the client decodes every field they send:
// Group, Topic, Partition (its Redis partition), State (a Group*
// constant), Total (0 until the group's close record was relayed),
// Relayed, Queued (ready or delayed), Running, Done, Failed (failed
// attempts, retried or not), Dead, Cancelled, Progress ((done + dead +
// cancelled) / total; nil without a total), Rate (jobs ended per second),
// EstimatedFinish, FirstAt, ClosedAt, CancelledAt, CompletedAt, and for a
// group with a callback CallbackURL, CallbackState (pending, delivering,
// delivered or failed), CallbackAttempts and CallbackError.
type GroupStatus = wire.GroupStatus

// GroupCancelled is CancelGroup's answer: the group's status after the
// cancel, and Removed, how many ready jobs the cancel took off the queue
// (delayed ones go when due, running ones finish).
type GroupCancelled = wire.GroupCancelled

func groupPath(topic, group string) string {
	return topicPath(topic) + "/groups/" + url.PathEscape(group)
}

// GroupStatus reads a bulk group's status (GET
// /v1/topics/{topic}/groups/{id}; the gate needs --redis-addr). A group
// Redis does not know yet (all its items still in Kafka) or no longer
// (expired), or one the token may not see, is an *Error with Status 404.
// 503s and connection errors are retried.
func (c *Client) GroupStatus(ctx context.Context, topic, group string) (*GroupStatus, error) {
	var st GroupStatus
	if err := c.group(ctx, http.MethodGet, topic, group, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// CancelGroup cancels what of a bulk group has not run (DELETE
// /v1/topics/{topic}/groups/{id}): ready jobs at once, delayed ones when
// due, items still in Kafka when relayed; running jobs finish. It answers
// the status after the cancel, with Removed. A second cancel is harmless,
// so 503s and connection errors are retried. A group Redis does not know
// is a 404 and is not cancelled.
func (c *Client) CancelGroup(ctx context.Context, topic, group string) (*GroupCancelled, error) {
	var cs GroupCancelled
	if err := c.group(ctx, http.MethodDelete, topic, group, &cs); err != nil {
		return nil, err
	}
	return &cs, nil
}

// group sends method to a group's path and decodes the answer into into.
func (c *Client) group(ctx context.Context, method, topic, group string, into any) error {
	a, err := c.do(ctx, &exchange{
		method: method, path: groupPath(topic, group),
		retryable:      func(status int, _ *errorBody) bool { return status == http.StatusServiceUnavailable },
		retryTransport: true,
	})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(a.body, into); err != nil {
		return fmt.Errorf("client: reading the gate's answer %d %q: %v", a.status, a.body, err)
	}
	return nil
}

// GroupCallback is the body the coordinator POSTs to a bulk group's
// Callback URL once every job of the group ended (docs/coordinator.md#the-callback),
// with the default reducer. Decode it with encoding/json.
type GroupCallback struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	Total int64  `json:"total"`
	Done  int64  `json:"done"`
	Dead  int64  `json:"dead"`
	// Cancelled counts the items a cancel removed or dropped.
	Cancelled   int64      `json:"cancelled"`
	CompletedAt time.Time  `json:"completed_at"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
	// Items lists every item, in index order.
	Items []CallbackItem `json:"items"`
}

// CallbackItem is one item's outcome in a GroupCallback.
type CallbackItem struct {
	Index int64  `json:"index"`
	ID    string `json:"id"`
	// State is "done", "dead" or "cancelled".
	State string `json:"state"`
	// Result is what the handler returned: its JSON byte for byte, text
	// as a JSON string, null when it returned nothing or bytes that are
	// not UTF-8 (then in ResultBase64).
	Result       json.RawMessage `json:"result,omitempty"`
	ResultBase64 []byte          `json:"result_base64,omitempty"`
	// Error is a dead item's last error.
	Error    string `json:"error,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
}
