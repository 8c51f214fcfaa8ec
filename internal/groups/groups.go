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
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/wire"
)

// The status of a group and its cancel's answer are wire types (defined
// once in internal/wire, which the Go client aliases too).
type (
	Status    = wire.GroupStatus
	Cancelled = wire.GroupCancelled
)

// States of a group (Status.State).
const (
	StateSubmitting = wire.GroupSubmitting
	StateRunning    = wire.GroupRunning
	StateCancelling = wire.GroupCancelling
	StateCompleted  = wire.GroupCompleted
)

// States of a group's callback (Status.CallbackState); internal/wire says
// what each means.
const (
	CallbackPending    = wire.CallbackPending
	CallbackDelivering = wire.CallbackDelivering
	CallbackDelivered  = wire.CallbackDelivered
	CallbackFailed     = wire.CallbackFailed
)

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

// Redis is what Find, Read and Cancel do in Redis (a *queue.Pool has it):
// a caller lists it in its own Redis surface.
type Redis interface {
	Keyspace() queue.Keyspace
	GroupStatus(ctx context.Context, topic, group string) (queue.GroupStatus, error)
	CancelGroup(ctx context.Context, topic, group string, now time.Time) (int, error)
}

// Find looks group name up in each of topics' queues, one read per topic:
// its queue partition and what Redis keeps of it. ErrNotFound when none
// has it (or topics is empty), an *AmbiguousError when more than one has.
// Other errors are Redis's.
func Find(ctx context.Context, pool Redis, topics []string, name string) (queue.Queue, queue.GroupStatus, error) {
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
			q, st = pool.Keyspace().QueueOf(t, name, ""), s
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
func Read(ctx context.Context, pool Redis, topics []string, name string, now time.Time) (Status, error) {
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
func Cancel(ctx context.Context, pool Redis, topics []string, name string, now time.Time) (Cancelled, error) {
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
	return Cancelled{GroupStatus: View(name, q, st, now), Removed: n}, nil
}

// Path is where the gate answers a group's status (GET) and cancels it
// (DELETE): a group lives in its topic's queue.
func Path(topic, group string) string {
	return "/v1/topics/" + url.PathEscape(topic) + "/groups/" + url.PathEscape(group)
}
