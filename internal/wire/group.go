package wire

import (
	"encoding/json"
	"time"
)

// States of a group (GroupStatus.State).
const (
	// GroupSubmitting: no total yet, so items may still be on their way
	// from Kafka.
	GroupSubmitting = "submitting"
	GroupRunning    = "running"
	// GroupCancelling: cancelled; jobs that were running may still finish.
	GroupCancelling = "cancelling"
	GroupCompleted  = "completed"
)

// States of a group's callback (GroupStatus.CallbackState), as the
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

// GroupStatus is a group's status: GET /v1/topics/{topic}/groups/{id} at
// the gate, GET /api/v1/groups/{group} and each of GET /api/v1/groups' bulk
// groups at the admin API. Times are UTC.
//
// Its JSON carries each field once under the name below and, for the
// fields the gate and the admin API named differently before they shared
// this type, once more under the other name with the same value: id
// (= group), started (= first_at), completed (= completed_at) and the
// object callback {url, state, attempts, error} (= callback_url,
// callback_state, callback_attempts, callback_error). total is null until
// the group's size is known. docs/groups.md lists them.
type GroupStatus struct {
	// Group is the group's name (within its topic).
	Group string `json:"group"`
	Topic string `json:"topic"`
	// Partition is the group's Redis partition.
	Partition int `json:"partition"`
	// State is one of GroupSubmitting, GroupRunning, GroupCancelling,
	// GroupCompleted.
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

// plainStatus is GroupStatus without its MarshalJSON.
type plainStatus GroupStatus

// wireStatus is GroupStatus as JSON: its fields, a nullable total, and the
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

func (s GroupStatus) wire() wireStatus {
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
// Decoding needs no method of its own: the synonyms carry the same values,
// and a null total decodes as 0.
func (s GroupStatus) MarshalJSON() ([]byte, error) { return json.Marshal(s.wire()) }

// GroupCancelled answers a cancel, at the gate (DELETE) and at the admin
// API (POST /api/v1/groups/{group}/cancel) alike: the group's status read
// after the cancel, and how many ready jobs it removed.
type GroupCancelled struct {
	GroupStatus
	// Removed is how many ready jobs the cancel took off the group's
	// lane; delayed ones go when due, running ones finish.
	Removed int `json:"removed"`
}

// MarshalJSON renders the status as GroupStatus does, with removed.
func (c GroupCancelled) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		wireStatus
		Removed int `json:"removed"`
	}{c.GroupStatus.wire(), c.Removed})
}
