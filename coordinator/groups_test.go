package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// jobsP0 is partition 0 of topic jobs, the queue of the one-partition
// beds' groups.
var jobsP0 = queue.Queue{Topic: "jobs", Part: 0}

// callbackBody is the default reducer's JSON.
type callbackBody struct {
	Group       string `json:"group"`
	Topic       string `json:"topic"`
	Total       int64  `json:"total"`
	Done        int64  `json:"done"`
	Dead        int64  `json:"dead"`
	Cancelled   int64  `json:"cancelled"`
	CompletedAt string `json:"completed_at"`
	Items       []struct {
		Index        int64           `json:"index"`
		ID           string          `json:"id"`
		State        string          `json:"state"`
		Result       json.RawMessage `json:"result"`
		ResultBase64 string          `json:"result_base64"`
		Error        string          `json:"error"`
		Attempts     int             `json:"attempts"`
	} `json:"items"`
}

// One callback per group, with the counts and each item's result or error;
// a group without a callback URL is finished without one.
func TestCallbackCarriesCountsAndEveryItem(t *testing.T) {
	b := newBed(t, 2)
	rc := newReceiver(t, nil)
	r := b.start(t, "c", nil)
	r.waitHolding(t)

	items := []outcome{
		{result: []byte(`{"sent":true,"to":"<a@b> & co"}`)},
		{result: []byte(`plain text, not JSON: <&>`)},
		{dead: "smtp: 550 no such mailbox"},
		{}, // done without a result
		{result: []byte{0xff, 0xfe, 'x'}},
		{retry: "smtp: 421 try later", result: []byte(`{"sent":true}`)},
		{retry: "smtp: 421 try later", dead: "smtp: 554 rejected"},
	}
	b.completeGroup(t, "mail", rc.URL+"/hook", items)
	b.completeGroup(t, "quiet", "", allDone(3))

	st := b.finished(t, "mail")
	if st.CallbackState != coordinator.CallbackDelivered || st.CallbackAttempts != 1 || st.CallbackError != "" {
		t.Fatalf("status after delivery: %+v", st)
	}
	calls := rc.callsFor("mail")
	if len(calls) != 1 {
		t.Fatalf("%d callbacks for the group, want 1", len(calls))
	}
	c := calls[0]
	if c.contentType != "application/json" || c.attempt != "1" {
		t.Fatalf("headers: %+v", c)
	}
	var body callbackBody
	if err := json.Unmarshal(c.body, &body); err != nil {
		t.Fatalf("body %s: %v", c.body, err)
	}
	if body.Group != "mail" || body.Topic != "jobs" || body.Total != 7 || body.Done != 5 || body.Dead != 2 || body.Cancelled != 0 || body.CompletedAt == "" {
		t.Fatalf("summary: %s", c.body)
	}
	if len(body.Items) != 7 {
		t.Fatalf("%d items: %s", len(body.Items), c.body)
	}
	for i, it := range body.Items {
		if it.Index != int64(i) || it.ID != "mail."+string(rune('0'+i)) {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	// JSON is embedded byte for byte, without HTML escaping.
	if !strings.Contains(string(c.body), `"result":{"sent":true,"to":"<a@b> & co"}`) {
		t.Errorf("a JSON result is not embedded as it was: %s", c.body)
	}
	if got := string(body.Items[1].Result); got != `"plain text, not JSON: <&>"` {
		t.Errorf("a text result became %s", got)
	}
	if it := body.Items[2]; it.State != "dead" || it.Error != "smtp: 550 no such mailbox" || it.Attempts != 1 || it.Result != nil {
		t.Errorf("dead item: %+v", it)
	}
	if it := body.Items[0]; it.State != "done" || it.Attempts != 1 || it.Error != "" {
		t.Errorf("done item with a result: %+v", it)
	}
	// The group's results name only the items that returned something or
	// did not complete: one done without a result has no attempts to show.
	if it := body.Items[3]; it.State != "done" || string(it.Result) != "null" || it.Attempts != 0 {
		t.Errorf("done item without a result: %+v", it)
	}
	if it := body.Items[4]; string(it.Result) != "null" || it.ResultBase64 != "//54" {
		t.Errorf("binary result: %+v", it)
	}
	// A failed attempt's error does not follow an item that succeeded on
	// its retry.
	if it := body.Items[5]; it.State != "done" || string(it.Result) != `{"sent":true}` || it.Attempts != 2 || it.Error != "" {
		t.Errorf("item done on its second attempt: %+v", it)
	}
	if it := body.Items[6]; it.State != "dead" || it.Error != "smtp: 554 rejected" || it.Attempts != 2 {
		t.Errorf("item dead on its second attempt: %+v", it)
	}
	if strings.Contains(r.logs.String(), "disagree") {
		t.Errorf("the watcher found the results at odds with the counters:\n%s", r.logs)
	}

	quiet := b.finished(t, "quiet")
	if quiet.CallbackState != "" || len(rc.callsFor("quiet")) != 0 {
		t.Fatalf("a group without a callback: %+v, %d calls", quiet, len(rc.callsFor("quiet")))
	}
	reg := r.c.Registry()
	if got := testenv.Metric(t, reg, "sluice_coordinator_groups_completed_total"); got != 2 {
		t.Errorf("groups completed: %v", got)
	}
	waitCallbacks(t, reg, "delivered", 1)
	if got := testenv.Metric(t, reg, "sluice_coordinator_callback_attempts_total", "result", "2xx"); got != 1 {
		t.Errorf("2xx attempts: %v", got)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + r.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
}

// A receiver that fails three times (5xx, then a redirect, which is not
// followed) gets the callback on the fourth attempt, after growing waits.
func TestCallbackIsRetriedWithBackoffUntilItSucceeds(t *testing.T) {
	b := newBed(t, 1)
	answers := []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusFound}
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		if n <= len(answers) {
			return answers[n-1]
		}
		return http.StatusNoContent
	})
	waits := &delays{}
	r := b.start(t, "c", func(c *coordinator.Config) {
		c.Sleep = waits.sleep
		c.CallbackBackoff = time.Second
		c.CallbackMaxBackoff = 3 * time.Second
	})
	r.waitHolding(t)
	b.completeGroup(t, "g", rc.URL, allDone(3))

	st := b.finished(t, "g")
	if st.CallbackState != coordinator.CallbackDelivered || st.CallbackAttempts != 4 || st.CallbackError != "" {
		t.Fatalf("status: %+v", st)
	}
	calls := rc.callsFor("g")
	if len(calls) != 4 {
		t.Fatalf("%d calls, want 4", len(calls))
	}
	for i, c := range calls {
		if c.attempt != string(rune('1'+i)) || string(c.body) != string(calls[0].body) {
			t.Fatalf("attempt %d: header %q, body %s (first %s)", i+1, c.attempt, c.body, calls[0].body)
		}
	}
	// 1s, 2s, then capped at 3s; each ±20%.
	got := waits.all()
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("waits %v, want about %v", got, want)
	}
	for i := range want {
		if lo, hi := want[i]*8/10, want[i]*12/10; got[i] < lo || got[i] > hi {
			t.Fatalf("wait %d: %v, want %v ±20%% (all: %v)", i+1, got[i], want[i], got)
		}
	}
	reg := r.c.Registry()
	for result, n := range map[string]float64{"5xx": 2, "3xx": 1, "2xx": 1} {
		if got := testenv.Metric(t, reg, "sluice_coordinator_callback_attempts_total", "result", result); got != n {
			t.Errorf("%s attempts: %v, want %v", result, got, n)
		}
	}
}

// After its last attempt the watcher gives up: the group's status says
// failed, with the receiver's last answer.
func TestCallbackGivesUpIntoAVisibleFailedState(t *testing.T) {
	b := newBed(t, 1)
	rc := newReceiver(t, func(int, *http.Request) int { return http.StatusBadGateway })
	r := b.start(t, "c", func(c *coordinator.Config) { c.CallbackMaxAttempts = 3 })
	r.waitHolding(t)
	b.completeGroup(t, "doomed", rc.URL+"/hook", allDone(2))

	st := b.finished(t, "doomed")
	if st.CallbackState != coordinator.CallbackFailed || st.CallbackAttempts != 3 {
		t.Fatalf("status: %+v", st)
	}
	// The submitter reads the status class, not the receiver's bytes
	// (TestCallbackErrorHidesWhatTheReceiverSaid).
	if !strings.Contains(st.CallbackError, "HTTP 5xx") || strings.Contains(st.CallbackError, "answer 502") {
		t.Fatalf("callback_error %q: want the last answer's class only", st.CallbackError)
	}
	if n := len(rc.callsFor("doomed")); n != 3 {
		t.Fatalf("%d calls, want 3", n)
	}
	waitCallbacks(t, r.c.Registry(), "failed", 1)
	// Kept for Keep, like a delivered group.
	ttl, _ := b.redis.Client().TTL(context.Background(), b.layout.Keys(jobsP0).Group("doomed")).Result()
	if ttl < 6*24*time.Hour {
		t.Errorf("the failed group is kept for %v", ttl)
	}
}

// A coordinator stopped while its POST is in flight leaves the group on the
// completing list, its attempt counted; the next coordinator delivers it.
func TestTheNextCoordinatorDeliversWhatAStoppedOneLeft(t *testing.T) {
	b := newBed(t, 1)
	inFlight := make(chan struct{})
	rc := newReceiver(t, func(n int, r *http.Request) int {
		if n == 1 {
			close(inFlight)
			<-r.Context().Done() // hangs until the coordinator gives up on it
			return http.StatusOK
		}
		return http.StatusOK
	})
	first := b.start(t, "first", nil)
	first.waitHolding(t)
	b.completeGroup(t, "g", rc.URL, allDone(4))
	select {
	case <-inFlight:
	case <-time.After(10 * time.Second):
		t.Fatal("no callback came")
	}
	first.stop(t)

	ctx := context.Background()
	st, _ := b.pool.GroupStatus(ctx, "jobs", "g")
	left, _ := b.pool.Completing(ctx, jobsP0)
	if st.CallbackState != coordinator.CallbackPending || st.CallbackAttempts != 1 || len(left) != 1 || left[0] != "g" {
		t.Fatalf("after the stop: %+v, completing %v", st, left)
	}

	second := b.start(t, "second", nil)
	st = b.finished(t, "g")
	if st.CallbackState != coordinator.CallbackDelivered || st.CallbackAttempts != 2 {
		t.Fatalf("status: %+v", st)
	}
	calls := rc.callsFor("g")
	if len(calls) != 2 || calls[1].attempt != "2" || string(calls[1].body) != string(calls[0].body) {
		t.Fatalf("calls: %+v", calls)
	}
	waitCallbacks(t, second.c.Registry(), "delivered", 1)
}

// Two coordinators: only the lock holder delivers, each group once; when it
// stops, the other takes over.
func TestOnlyTheLockHolderDelivers(t *testing.T) {
	b := newBed(t, 4)
	rc := newReceiver(t, nil)
	a := b.start(t, "a", nil)
	c := b.start(t, "b", nil)
	testenv.WaitFor(t, 15*time.Second, "one coordinator to hold the lock", func() bool { return a.c.Holds() || c.c.Holds() })
	holder, standby := a, c
	if c.c.Holds() {
		holder, standby = c, a
	}
	if standby.c.Holds() {
		t.Fatal("both hold the lock")
	}
	groups := []string{"g1", "g2", "g3", "g4", "g5", "g6"}
	for _, g := range groups {
		b.completeGroup(t, g, rc.URL, allDone(2))
	}
	for _, g := range groups {
		b.finished(t, g)
	}
	for _, g := range groups {
		if n := len(rc.callsFor(g)); n != 1 {
			t.Errorf("group %s: %d callbacks", g, n)
		}
	}
	if got := testenv.Metric(t, standby.c.Registry(), "sluice_coordinator_callback_attempts_total", "result", "2xx"); got != 0 {
		t.Errorf("the standby sent %v callbacks", got)
	}
	waitCallbacks(t, holder.c.Registry(), "delivered", len(groups))

	holder.stop(t)
	standby.waitHolding(t)
	b.completeGroup(t, "after", rc.URL, allDone(2))
	b.finished(t, "after")
	if n := len(rc.callsFor("after")); n != 1 {
		t.Fatalf("%d callbacks after the failover", n)
	}
}

// Bodies larger than SpillAbove are built in a file, sent whole on every
// attempt, and the file is removed once the group is delivered.
func TestALargeBodyIsSpilledToDiskAndRemoved(t *testing.T) {
	b := newBed(t, 1)
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	dir := t.TempDir()
	r := b.start(t, "c", func(c *coordinator.Config) { c.SpillAbove = 1024; c.SpillDir = dir; c.ReadChunk = 7 })
	r.waitHolding(t)
	b.completeGroup(t, "big", rc.URL, allDone(500))
	b.finished(t, "big")
	calls := rc.callsFor("big")
	if len(calls) != 2 || string(calls[0].body) != string(calls[1].body) {
		t.Fatalf("%d calls", len(calls))
	}
	var body callbackBody
	if err := json.Unmarshal(calls[1].body, &body); err != nil || len(body.Items) != 500 || body.Done != 500 {
		t.Fatalf("body: %d items, %v", len(body.Items), err)
	}
	for i, it := range body.Items {
		if it.Index != int64(i) || string(it.Result) != `{"n":`+strconv.Itoa(i)+`}` {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	testenv.WaitFor(t, 5*time.Second, "the spill file to be removed", func() bool {
		entries, _ := os.ReadDir(dir)
		return len(entries) == 0
	})
}

// A cancelled group completes once its running jobs end; its callback says
// which items were cancelled.
func TestACancelledGroupsCallbackListsItsCancelledItems(t *testing.T) {
	b := newBed(t, 1)
	rc := newReceiver(t, nil)
	r := b.start(t, "c", nil)
	r.waitHolding(t)
	ctx := context.Background()
	now := time.Now()
	var batch []queue.Item
	for i := range 3 {
		id := job.BulkID("c", int64(i))
		batch = append(batch, queue.Item{ID: id, Group: "c", Topic: "jobs", Weight: 1, Envelope: []byte(`{}`)})
	}
	batch = append(batch, queue.Item{Close: true, Group: "c", Topic: "jobs", GroupTotal: 3, CallbackURL: rc.URL})
	if _, err := b.pool.Enqueue(ctx, 1, batch, now); err != nil {
		t.Fatal(err)
	}
	jobs, err := b.pool.Claim(ctx, jobsP0, 1, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].ID != "c.0" {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	if n, err := b.pool.CancelGroup(ctx, "jobs", "c", now); n != 2 || err != nil {
		t.Fatalf("cancel: %d %v", n, err)
	}
	if ok, err := b.pool.Ack(ctx, jobsP0, queue.Done{Job: jobs[0], Result: []byte(`"ran"`)}, now, time.Hour); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	b.finished(t, "c")
	calls := rc.callsFor("c")
	if len(calls) != 1 {
		t.Fatalf("%d calls", len(calls))
	}
	var body callbackBody
	if err := json.Unmarshal(calls[0].body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Done != 1 || body.Cancelled != 2 || body.Items[0].State != "done" || string(body.Items[0].Result) != `"ran"` ||
		body.Items[1].State != "cancelled" || body.Items[2].State != "cancelled" || !strings.Contains(string(calls[0].body), `"cancelled_at":"`) {
		t.Fatalf("body: %s", calls[0].body)
	}
}

// The callback is built from the group's results and counters alone: an
// item's job record is not needed, so a dead item whose record is gone
// (purged from the dead set, or past --dead-ttl) still shows dead with its
// error, and items that succeeded leave no record at all.
func TestCallbackNeedsNoJobRecords(t *testing.T) {
	b := newBed(t, 1)
	rc := newReceiver(t, nil)
	ctx := context.Background()
	b.completeGroup(t, "rec", rc.URL, []outcome{{result: []byte(`1`)}, {dead: "boom"}, {}})
	if ok, err := b.pool.PurgeDead(ctx, jobsP0, "rec.1"); !ok || err != nil {
		t.Fatalf("purge: %v %v", ok, err)
	}
	if keys, err := b.redis.Client().Keys(ctx, b.layout.Keys(jobsP0).Job("*")).Result(); err != nil || len(keys) != 0 {
		t.Fatalf("job records left before the watcher runs: %v %v", keys, err)
	}
	r := b.start(t, "c", nil)
	b.finished(t, "rec")
	calls := rc.callsFor("rec")
	if len(calls) != 1 {
		t.Fatalf("%d calls", len(calls))
	}
	var body callbackBody
	if err := json.Unmarshal(calls[0].body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Items) != 3 || body.Done != 2 || body.Dead != 1 {
		t.Fatalf("body: %s", calls[0].body)
	}
	if it := body.Items[0]; it.State != "done" || string(it.Result) != "1" || it.Attempts != 1 {
		t.Errorf("item 0: %+v", it)
	}
	if it := body.Items[1]; it.State != "dead" || it.Error != "boom" || it.Attempts != 1 {
		t.Errorf("the purged dead item: %+v", it)
	}
	if it := body.Items[2]; it.State != "done" || string(it.Result) != "null" {
		t.Errorf("item 2: %+v", it)
	}
	if strings.Contains(r.logs.String(), "disagree") {
		t.Errorf("the watcher found the results at odds with the counters:\n%s", r.logs)
	}
}

// An item the group's results do not name reads as done; when that leaves
// fewer dead (or cancelled) items than the group's counters hold, the
// watcher still delivers, with the counters' counts, and says in its log
// that the items disagree.
func TestCallbackWithResultsAtOddsWithTheCountersIsDeliveredAndLogged(t *testing.T) {
	b := newBed(t, 1)
	rc := newReceiver(t, nil)
	ctx := context.Background()
	b.completeGroup(t, "odd", rc.URL, []outcome{{result: []byte(`1`)}, {dead: "boom"}})
	// The dead item's entry lost, as if the results never had it.
	if n, err := b.redis.Client().HDel(ctx, b.layout.Keys(jobsP0).Results("odd"), "odd.1").Result(); n != 1 || err != nil {
		t.Fatalf("hdel: %d %v", n, err)
	}
	r := b.start(t, "c", nil)
	st := b.finished(t, "odd")
	if st.CallbackState != coordinator.CallbackDelivered {
		t.Fatalf("status: %+v", st)
	}
	calls := rc.callsFor("odd")
	if len(calls) != 1 {
		t.Fatalf("%d calls", len(calls))
	}
	var body callbackBody
	if err := json.Unmarshal(calls[0].body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Done != 1 || body.Dead != 1 || len(body.Items) != 2 || body.Items[1].State != "done" {
		t.Fatalf("body: %s", calls[0].body)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "disagree") || !strings.Contains(logs, "group=odd") || !strings.Contains(logs, "dead_items=0 dead=1") {
		t.Errorf("no warning naming the group and the counts:\n%s", logs)
	}
}

// waitCallbacks waits for the coordinator to count n callbacks of outcome:
// the watcher counts one after it finished the group in Redis, which the
// tests wait on, so the count may come a moment later.
func waitCallbacks(t *testing.T, reg prometheus.Gatherer, outcome string, n int) {
	t.Helper()
	testenv.WaitFor(t, 5*time.Second, fmt.Sprintf("%d callbacks %s", n, outcome), func() bool {
		return testenv.Metric(t, reg, "sluice_coordinator_callbacks_total", "outcome", outcome) == float64(n)
	})
}

// A stop does not wait out the watchers' blocked BLMOVEs: the term's wait
// clients are closed as it ends (go-redis cannot interrupt a blocked call
// on its context). With a 30 s --group-wait, the stop and the standby's
// delivery of a group completed meanwhile each take a fraction of it;
// before, the stop waited out the BLMOVE.
func TestAStopEndsTheWatchersBlockedWaits(t *testing.T) {
	b := newBed(t, 4)
	rc := newReceiver(t, nil)
	long := func(c *coordinator.Config) { c.GroupWait = 30 * time.Second }
	first := b.start(t, "first", long)
	first.waitHolding(t)
	rdb := b.redis.Client()
	testenv.WaitFor(t, 15*time.Second, "the 4 watchers to block", func() bool {
		info, err := rdb.Info(context.Background(), "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:4\r")
	})
	second := b.start(t, "second", long)
	began := time.Now()
	first.stop(t)
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("the stop took %v with watchers blocked for up to 30 s; want it not to wait them out", took)
	}
	second.waitHolding(t)
	b.completeGroup(t, "g", rc.URL, allDone(2))
	if st := b.finished(t, "g"); st.CallbackState != coordinator.CallbackDelivered || len(rc.callsFor("g")) != 1 {
		t.Fatalf("after the handover: %+v, %d calls", st, len(rc.callsFor("g")))
	}
}
