// Package groups is a bulk group's status and its cancel, as both APIs that
// show them answer: the gate's GET and DELETE /v1/topics/{topic}/groups/{id}
// (the client's) and the admin API's /api/v1/groups (the operator's). A
// group's status is one type, Status, with one JSON rendering, computed in
// one place from what Redis keeps of the group (queue.GroupStatus); Read
// finds and reads a group and Cancel is the one cancel path, which both APIs
// call. docs/groups.md describes the answer; docs/architecture.md places it
// among the parts.
//
// The package lives in internal/ because it is a contract between parts
// (the gate and the console's admin API), not the property of either.
// It is not in internal/admin: that package is the operator's surface
// (tokens, roles, the admin client) and has no Redis, while a group's
// status is first the client's, and its reads need the queue pool.
package groups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// States of a group (Status.State).
const (
	// StateSubmitting: no total yet, so items may still be on their way
	// from Kafka.
	StateSubmitting = "submitting"
	StateRunning    = "running"
	// StateCancelling: cancelled; jobs that were running may still finish.
	StateCancelling = "cancelling"
	StateCompleted  = "completed"
)

// States of a group's callback (Status.CallbackState), as the
// coordinator's watcher records them in the group's hash (callback_state)
// and both APIs show them.
const (
	// CallbackPending: no attempt yet (the state a group with a callback
	// URL shows until the watcher records another), or an attempt failed
	// and the next one waits for its time (callback_next_ms), or the
	// coordinator stopped mid-delivery.
	CallbackPending = "pending"
	// CallbackDelivering: an attempt is in flight.
	CallbackDelivering = "delivering"
	// CallbackDelivered: the receiver answered 2xx.
	CallbackDelivered = "delivered"
	// CallbackFailed: given up; callback_error holds the last error.
	CallbackFailed = "failed"
)

// Status is a group's status: GET /v1/topics/{topic}/groups/{id} at the
// gate, GET /api/v1/groups/{group} and each of GET /api/v1/groups' bulk
// groups at the admin API. Times are UTC.
//
// Its JSON carries each field once under the name below and, for the
// fields the gate and the admin API named differently before they shared
// this type, once more under the other name with the same value: id
// (= group), started (= first_at), completed (= completed_at) and the
// object callback {url, state, attempts, error} (= callback_url,
// callback_state, callback_attempts, callback_error). total is null until
// the group's size is known. docs/groups.md lists them.
type Status struct {
	// Group is the group's name (within its topic).
	Group string `json:"group"`
	Topic string `json:"topic"`
	// Partition is the group's Redis partition.
	Partition int `json:"partition"`
	// State is one of the State constants.
	State string `json:"state"`
	// Total is a bulk group's size: 0 until its close record has been
	// relayed (null on the wire).
	Total   int64 `json:"total"`
	Relayed int64 `json:"relayed"`
	// Queued are ready or delayed (retries, rate-limit slots).
	Queued  int64 `json:"queued"`
	Running int64 `json:"running"`
	Done    int64 `json:"done"`
	// Failed counts failed attempts, retried or not.
	Failed int64 `json:"failed"`
	// Dead counts jobs that used up their attempts.
	Dead      int64 `json:"dead"`
	Cancelled int64 `json:"cancelled"`
	// Progress is (done + dead + cancelled) / total, at most 1; nil
	// without a total.
	Progress *float64 `json:"progress"`
	// Rate is jobs ended per second since the first was relayed (until
	// the group completed).
	Rate float64 `json:"rate"`
	// EstimatedFinish assumes Rate holds; nil when there is no telling
	// (no total, no rate yet, or completed). Whole seconds.
	EstimatedFinish *time.Time `json:"estimated_finish,omitempty"`
	FirstAt         *time.Time `json:"first_at"`
	ClosedAt        *time.Time `json:"closed_at"`
	CancelledAt     *time.Time `json:"cancelled_at"`
	CompletedAt     *time.Time `json:"completed_at"`
	// CallbackURL is empty for a group without a callback; the other
	// Callback fields are then empty too.
	CallbackURL string `json:"callback_url,omitempty"`
	// CallbackState is CallbackPending until the watcher's first attempt,
	// then what the watcher recorded (delivering, delivered, failed).
	CallbackState    string `json:"callback_state,omitempty"`
	CallbackAttempts int64  `json:"callback_attempts,omitempty"`
	CallbackError    string `json:"callback_error,omitempty"`
}

// plainStatus is Status without its MarshalJSON.
type plainStatus Status

// wireStatus is Status as JSON: its fields, a nullable total, and the
// gate's names of the fields the admin API names otherwise.
type wireStatus struct {
	plainStatus
	ID        string        `json:"id"`
	Total     *int64        `json:"total"`
	Started   *time.Time    `json:"started,omitempty"`
	Completed *time.Time    `json:"completed,omitempty"`
	Callback  *wireCallback `json:"callback,omitempty"`
}

type wireCallback struct {
	URL      string `json:"url"`
	State    string `json:"state"`
	Attempts int64  `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

func (s Status) wire() wireStatus {
	w := wireStatus{plainStatus: plainStatus(s), ID: s.Group, Started: s.FirstAt, Completed: s.CompletedAt}
	if s.Total > 0 {
		total := s.Total
		w.Total = &total
	}
	if s.CallbackURL != "" {
		w.Callback = &wireCallback{URL: s.CallbackURL, State: s.CallbackState, Attempts: s.CallbackAttempts, Error: s.CallbackError}
	}
	return w
}

// MarshalJSON renders the status with the synonyms the type's doc lists.
func (s Status) MarshalJSON() ([]byte, error) { return json.Marshal(s.wire()) }

// Cancelled answers a cancel, at the gate (DELETE) and at the admin API
// (POST /api/v1/groups/{group}/cancel) alike: the group's status read after
// the cancel, and how many ready jobs it removed.
type Cancelled struct {
	Status
	// Removed is how many ready jobs the cancel took off the group's
	// lane; delayed ones go when due, running ones finish.
	Removed int `json:"removed"`
}

// MarshalJSON renders the status as Status does, with removed.
func (c Cancelled) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		wireStatus
		Removed int `json:"removed"`
	}{c.Status.wire(), c.Removed})
}

// View is the status of group name in queue partition q, from what Redis
// keeps of it, as of now (Rate and EstimatedFinish depend on it).
func View(name string, q queue.Queue, st queue.GroupStatus, now time.Time) Status {
	s := Status{
		Group: name, Topic: q.Topic, Partition: q.Part, Total: st.Total, Relayed: st.Relayed, Queued: st.Queued,
		Running: st.Running, Done: st.Done, Failed: st.Failed, Dead: st.Dead, Cancelled: st.Cancelled,
		FirstAt: utc(st.FirstAt), ClosedAt: utc(st.ClosedAt), CancelledAt: utc(st.CancelledAt), CompletedAt: utc(st.CompletedAt),
	}
	switch {
	case !st.CompletedAt.IsZero():
		s.State = StateCompleted
	case !st.CancelledAt.IsZero():
		s.State = StateCancelling
	case st.Total <= 0:
		s.State = StateSubmitting
	default:
		s.State = StateRunning
	}
	if p, ok := st.Progress(); ok {
		s.Progress = &p
	}
	if !st.FirstAt.IsZero() {
		end := now
		if !st.CompletedAt.IsZero() {
			end = st.CompletedAt
		}
		if secs := end.Sub(st.FirstAt).Seconds(); secs > 0 {
			s.Rate = float64(st.Ended()) / secs
		}
		if st.Total > 0 && st.CompletedAt.IsZero() && s.Rate > 0 {
			left := float64(st.Total - st.Ended())
			s.EstimatedFinish = utc(now.Add(time.Duration(left / s.Rate * float64(time.Second))).Truncate(time.Second))
		}
	}
	if st.CallbackURL != "" {
		s.CallbackURL, s.CallbackState, s.CallbackAttempts, s.CallbackError = st.CallbackURL, st.CallbackState, st.CallbackAttempts, st.CallbackError
		if s.CallbackState == "" {
			s.CallbackState = CallbackPending
		}
	}
	return s
}

func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// ErrNotFound: no topic looked in has the group in Redis. Its jobs may
// still be in Kafka (a group appears once the relay moved its first job),
// or it ended and expired.
var ErrNotFound = errors.New("group not found in Redis")

// AmbiguousError: a group named without a topic exists in more than one
// topic's queues (a group is named within its topic). Nothing was done.
type AmbiguousError struct {
	Group  string
	Topics []string // sorted
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("group %q exists in topics %s", e.Group, strings.Join(e.Topics, ", "))
}

// Find looks group name up in each of topics' queues, one read per topic:
// its queue partition and what Redis keeps of it. ErrNotFound when none
// has it (or topics is empty), an *AmbiguousError when more than one has.
// Other errors are Redis's.
func Find(ctx context.Context, pool *queue.Pool, topics []string, name string) (queue.Queue, queue.GroupStatus, error) {
	var (
		found []string
		q     queue.Queue
		st    queue.GroupStatus
	)
	for _, t := range topics {
		s, err := pool.GroupStatus(ctx, t, name)
		if err != nil {
			return q, st, fmt.Errorf("reading group %q of topic %s: %w", name, t, err)
		}
		if s.Found {
			found = append(found, t)
			q, st = pool.Layout().QueueOf(t, name, ""), s
		}
	}
	switch len(found) {
	case 0:
		return q, st, ErrNotFound
	case 1:
		return q, st, nil
	}
	slices.Sort(found)
	return q, st, &AmbiguousError{Group: name, Topics: found}
}

// Read is the status of group name, found among topics as Find does.
func Read(ctx context.Context, pool *queue.Pool, topics []string, name string, now time.Time) (Status, error) {
	q, st, err := Find(ctx, pool, topics, name)
	if err != nil {
		return Status{}, err
	}
	return View(name, q, st, now), nil
}

// Cancel is the one way a group is cancelled, whichever API is asked:
// group name is found among topics as Find does (a group Redis does not
// know is ErrNotFound, never a cancelled group left behind by a typo; a
// name two topics have is an *AmbiguousError, and nothing is cancelled),
// then queue.Pool.CancelGroup cancels what of it has not run: its ready
// jobs now, its delayed ones when due, its jobs still in Kafka when the
// relay brings them. Running jobs finish. The answer is the status read
// after the cancel.
func Cancel(ctx context.Context, pool *queue.Pool, topics []string, name string, now time.Time) (Cancelled, error) {
	q, _, err := Find(ctx, pool, topics, name)
	if err != nil {
		return Cancelled{}, err
	}
	n, err := pool.CancelGroup(ctx, q.Topic, name, now)
	if err != nil {
		return Cancelled{}, fmt.Errorf("cancelling group %q of topic %s (%d ready jobs removed so far; cancelling again is harmless): %w", name, q.Topic, n, err)
	}
	st, err := pool.GroupStatus(ctx, q.Topic, name)
	if err != nil {
		return Cancelled{}, fmt.Errorf("group %q of topic %s is cancelled (%d ready jobs removed), but reading its status afterwards failed: %w", name, q.Topic, n, err)
	}
	return Cancelled{Status: View(name, q, st, now), Removed: n}, nil
}

// Path is where the gate answers a group's status (GET) and cancels it
// (DELETE): a group lives in its topic's queue.
func Path(topic, group string) string {
	return "/v1/topics/" + url.PathEscape(topic) + "/groups/" + url.PathEscape(group)
}
