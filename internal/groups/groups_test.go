package groups_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/groups"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

var (
	first = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now   = first.Add(10 * time.Second)
	q     = queue.Queue{Topic: "jobs", Part: 3}
)

func fields(t *testing.T, v any) map[string]json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Both APIs' field names are in the one rendering, each synonym with the
// same value as the field it repeats.
func TestStatusJSONCarriesBothAPIsNames(t *testing.T) {
	st := queue.GroupStatus{Found: true, Topic: "jobs", Total: 100, Relayed: 100, Queued: 70, Running: 5, Done: 20, Dead: 3, Cancelled: 2,
		Failed: 4, FirstAt: first.Local(), ClosedAt: first.Add(time.Second), CallbackURL: "http://cb/x"}
	m := fields(t, groups.View("g", q, st, now))
	want := map[string]string{
		"group": `"g"`, "id": `"g"`, "topic": `"jobs"`, "partition": "3", "state": `"running"`, "total": "100",
		"relayed": "100", "queued": "70", "running": "5", "done": "20", "failed": "4", "dead": "3", "cancelled": "2",
		"progress": "0.25", "rate": "2.5",
		// 75 left at 2.5 a second: 30 s from now, in whole seconds.
		"estimated_finish": `"2025-03-01T12:00:40Z"`,
		"first_at":         `"2025-03-01T12:00:00Z"`, "started": `"2025-03-01T12:00:00Z"`,
		"closed_at": `"2025-03-01T12:00:01Z"`, "cancelled_at": "null", "completed_at": "null",
		"callback_url": `"http://cb/x"`, "callback_state": `"pending"`,
		"callback": `{"url":"http://cb/x","state":"pending","attempts":0}`,
	}
	got := map[string]string{}
	for k, v := range m {
		got[k] = string(v)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JSON fields:\n got %v\nwant %v", got, want)
	}
}

func TestStatusStatesAndNullTotal(t *testing.T) {
	m := fields(t, groups.View("g", q, queue.GroupStatus{Found: true, Relayed: 3, Done: 1, FirstAt: first}, now))
	if string(m["state"]) != `"submitting"` || string(m["total"]) != "null" || string(m["progress"]) != "null" || m["estimated_finish"] != nil || m["callback"] != nil || m["callback_url"] != nil {
		t.Errorf("before the close: %s", mustJSON(t, m))
	}
	done := queue.GroupStatus{Found: true, Total: 4, Relayed: 4, Done: 4, FirstAt: first, CompletedAt: first.Add(2 * time.Second),
		CallbackURL: "http://cb/x", CallbackState: "delivered", CallbackAttempts: 1}
	s := groups.View("g", q, done, now)
	m = fields(t, s)
	// The rate of a completed group is over its run, not until now.
	if s.State != groups.StateCompleted || s.Rate != 2 || s.EstimatedFinish != nil || string(m["completed"]) != `"2025-03-01T12:00:02Z"` || string(m["completed"]) != string(m["completed_at"]) ||
		string(m["callback"]) != `{"url":"http://cb/x","state":"delivered","attempts":1}` || string(m["callback_state"]) != `"delivered"` {
		t.Errorf("completed: %s", mustJSON(t, m))
	}
	cancelled := queue.GroupStatus{Found: true, Total: 4, Relayed: 4, Running: 1, Cancelled: 3, FirstAt: first, CancelledAt: first.Add(time.Second)}
	if s := groups.View("g", q, cancelled, now); s.State != groups.StateCancelling {
		t.Errorf("cancelled with a job running: %+v", s)
	}
}

// A Go client of either API decodes the answer into the type, synonyms
// and nullable total included.
func TestStatusRoundTrip(t *testing.T) {
	in := groups.Cancelled{GroupStatus: groups.View("g", q, queue.GroupStatus{Found: true, Total: 10, Relayed: 10, Done: 2, Cancelled: 8,
		FirstAt: first, CancelledAt: first.Add(time.Second), CallbackURL: "http://cb/x"}, now), Removed: 8}
	m := fields(t, in)
	if string(m["removed"]) != "8" || string(m["group"]) != `"g"` || string(m["total"]) != "10" {
		t.Fatalf("a cancel's answer: %s", mustJSON(t, m))
	}
	b, _ := json.Marshal(in)
	var out groups.Cancelled
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
	var none groups.Status
	if err := json.Unmarshal([]byte(`{"group":"g","total":null}`), &none); err != nil || none.Total != 0 {
		t.Errorf("a null total: %+v %v", none, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The one cancel path: an unknown group is not cancelled (no group is left
// behind by a typo), a name two topics have is cancelled in neither, and a
// found group loses its ready jobs and answers its status after.
func TestCancel(t *testing.T) {
	r := testenv.Redis(t)
	layout := queue.Keyspace{Stage: "test", Partitions: 4}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	if err := p.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue := func(topic string, n int) {
		t.Helper()
		items := make([]queue.Item, 0, n)
		for i := range n {
			id := job.BulkID("g", int64(i))
			items = append(items, queue.Item{ID: id, Group: "g", Topic: topic, Weight: 1, Envelope: []byte(`{"id":"` + id + `","type":"t"}`)})
		}
		items = append(items, queue.Item{Close: true, Group: "g", Topic: topic, GroupTotal: int64(n)})
		if _, err := p.Enqueue(ctx, 1, items, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("jobs", 5)
	enqueue("mail", 2)

	if _, err := groups.Cancel(ctx, p, []string{"jobs", "mail"}, "typo", time.Now()); !errors.Is(err, groups.ErrNotFound) {
		t.Fatalf("an unknown group: %v, want ErrNotFound", err)
	}
	if st, err := p.GroupStatus(ctx, "jobs", "typo"); err != nil || st.Found {
		t.Fatalf("cancelling an unknown group left one behind: %+v %v", st, err)
	}
	var ambiguous *groups.AmbiguousError
	if _, err := groups.Cancel(ctx, p, []string{"mail", "jobs"}, "g", time.Now()); !errors.As(err, &ambiguous) || !reflect.DeepEqual(ambiguous.Topics, []string{"jobs", "mail"}) {
		t.Fatalf("a name in two topics: %v", err)
	}
	for _, topic := range []string{"jobs", "mail"} {
		if st, err := p.GroupStatus(ctx, topic, "g"); err != nil || !st.CancelledAt.IsZero() || st.Cancelled != 0 {
			t.Fatalf("topic %s's group after an ambiguous cancel: %+v %v", topic, st, err)
		}
	}
	c, err := groups.Cancel(ctx, p, []string{"jobs"}, "g", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c.Removed != 5 || c.Cancelled != 5 || c.Queued != 0 || c.State != groups.StateCompleted || c.Topic != "jobs" || c.Partition != layout.PartitionOf("g") || c.CancelledAt == nil {
		t.Fatalf("cancel: %+v", c)
	}
	s, err := groups.Read(ctx, p, []string{"jobs", "mail"}, "g", time.Now())
	if !errors.As(err, &ambiguous) {
		t.Fatalf("a read of a name in two topics: %+v %v", s, err)
	}
	if s, err = groups.Read(ctx, p, []string{"mail"}, "g", time.Now()); err != nil || s.Cancelled != 0 || s.Queued != 2 || s.State != groups.StateRunning {
		t.Fatalf("the other topic's group: %+v %v", s, err)
	}
}
