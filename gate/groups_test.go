package gate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/groups"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

type groupAnswer struct {
	Group  string `json:"group"`
	Topic  string `json:"topic"`
	Count  int64  `json:"count"`
	Status string `json:"status"`
}

// groupRecords reads what a bulk group wrote to its Kafka partition: n
// records from the partition's start (the group is the only writer).
func groupRecords(t *testing.T, k *testenv.KafkaCluster, group string, n int) (items []*job.Job, control []job.GroupClose) {
	t.Helper()
	for _, m := range testenv.ReadRecords(t, k.Brokers(), "jobs", javaPartition(group, partitions), 0, n) {
		if len(m.Headers) == 1 && string(m.Headers[0].Key) == job.ControlHeader {
			c, err := job.DecodeGroupClose(m.Value)
			if err != nil || string(m.Headers[0].Value) != job.GroupCloseControl {
				t.Fatalf("control record %q %s: %v", m.Headers[0].Value, m.Value, err)
			}
			control = append(control, c)
			continue
		}
		j, err := job.Decode(m.Value)
		if err != nil {
			t.Fatalf("record %s: %v", m.Value, err)
		}
		items = append(items, j)
	}
	return items, control
}

func TestBulkGroupJSONAndNDJSON(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	for _, form := range []string{"json", "ndjson"} {
		group := "bulk-" + form
		var body strings.Builder
		ctype := "application/json"
		if form == "json" {
			body.WriteString(`{"id":"` + group + `","type":"email","resource":"smtp","priority":2,"callback_url":"http://cb.example/done","items":[`)
			for i := range 2500 {
				if i > 0 {
					body.WriteString(",")
				}
				fmt.Fprintf(&body, `{"to":"u%d@x","html":"<b>&</b>"}`, i)
			}
			body.WriteString("]}")
		} else {
			ctype = "application/x-ndjson"
			body.WriteString(`{"id":"` + group + `","type":"email","resource":"smtp","priority":2,"callback_url":"http://cb.example/done"}` + "\n")
			for i := range 2500 {
				fmt.Fprintf(&body, `{"to":"u%d@x","html":"<b>&</b>"}`+"\n\n", i)
			}
		}
		a := post(t, g.url+"/v1/topics/jobs/groups", body.String(), "Content-Type", ctype)
		if a.status != http.StatusAccepted {
			t.Fatalf("%s: %d %s", form, a.status, a.body)
		}
		var ga groupAnswer
		a.decode(t, &ga)
		if ga.Group != group || ga.Count != 2500 || ga.Topic != "jobs" || ga.Status != "/v1/topics/jobs/groups/"+group {
			t.Fatalf("%s: %+v", form, ga)
		}
		items, control := groupRecords(t, k, group, 2501)
		if len(items) != 2500 || len(control) != 1 {
			t.Fatalf("%s: %d items, %d control records", form, len(items), len(control))
		}
		for i, j := range items {
			want := fmt.Sprintf(`{"to":"u%d@x","html":"<b>&</b>"}`, i)
			// The client chose the group's id, so every item's id is
			// its choice too: id_given, for resends of the group.
			if j.ID != job.BulkID(group, int64(i)) || j.Group != group || !j.IDGiven || j.Type != "email" || j.Resource != "smtp" || j.Priority != 2 || string(j.Payload) != want {
				t.Fatalf("%s item %d: %+v payload %s", form, i, j, j.Payload)
			}
		}
		// The close comes last, on the same partition: the relay sees it
		// after every item.
		if c := control[0]; c.Group != group || c.Total != 2500 || c.CallbackURL != "http://cb.example/done" || c.Cancel {
			t.Fatalf("%s close: %+v", form, c)
		}
	}
}

// A group without an id gets a ULID from the gate: its items are not
// id_given, and the client cannot claim they are.
func TestBulkGroupWithoutIDIsNotIDGiven(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	a := post(t, g.url+"/v1/topics/jobs/groups", `{"type":"t","items":[1,2,3]}`, "Content-Type", "application/json")
	var ga groupAnswer
	a.decode(t, &ga)
	if a.status != http.StatusAccepted || len(ga.Group) != 26 || ga.Count != 3 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	items, control := groupRecords(t, k, ga.Group, 4)
	if len(items) != 3 || len(control) != 1 {
		t.Fatalf("%d items, %d control records", len(items), len(control))
	}
	for i, j := range items {
		if j.ID != job.BulkID(ga.Group, int64(i)) || j.Group != ga.Group || j.IDGiven {
			t.Fatalf("item %d: %+v", i, j)
		}
	}
	a = post(t, g.url+"/v1/topics/jobs/groups", `{"type":"t","id_given":true,"items":[1]}`, "Content-Type", "application/json")
	if a.status != http.StatusBadRequest || !bytes.Contains(a.body, []byte("id_given")) {
		t.Fatalf("a group claiming id_given: %d %s, want 400 naming the field", a.status, a.body)
	}
}

func TestBulkGroupBadInput(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	for _, c := range []struct{ name, ctype, body, want string }{
		{"no type", "application/json", `{"id":"b1","items":[1]}`, "type"},
		{"unknown field", "application/json", `{"type":"t","colour":"red","items":[1]}`, "colour"},
		{"fields after items", "application/json", `{"items":[1],"type":"t"}`, "type"},
		{"not an object", "application/json", `[1,2]`, "JSON object"},
		{"no items", "application/json", `{"type":"t"}`, "items"},
		{"bad callback", "application/json", `{"type":"t","callback_url":"ftp://x","items":[1]}`, "callback_url"},
		{"callback to the admin API", "application/json", `{"type":"t","callback_url":"http://127.0.0.1:8083/api/v1/dlq/purge","items":[1]}`, "127.0.0.1 resolves to 127.0.0.1, a loopback address"},
		{"callback to cloud metadata", "application/json", `{"type":"t","callback_url":"http://169.254.169.254/latest/meta-data/","items":[1]}`, "link-local"},
		{"callback to a name inside", "application/json", `{"type":"t","callback_url":"https://inside.test/hook","items":[1]}`, "10.0.0.5, a private address"},
		{"callback to an unknown name", "application/json", `{"type":"t","callback_url":"https://nowhere.test/hook","items":[1]}`, "no such host"},
		{"long id", "application/json", `{"id":"` + strings.Repeat("x", 200) + `","type":"t","items":[1]}`, "id"},
		{"bad content type", "text/plain", `{"type":"t","items":[1]}`, "Content-Type"},
		{"ndjson empty", "application/x-ndjson", ``, "first line"},
	} {
		a := post(t, g.url+"/v1/topics/jobs/groups", c.body, "Content-Type", c.ctype)
		if a.status != http.StatusBadRequest || !bytes.Contains(a.body, []byte(c.want)) {
			t.Errorf("%s: %d %s, want 400 naming %q", c.name, a.status, a.body, c.want)
		}
	}
}

// A bad item after a thousand written ones: the written ones are cancelled
// by a record after them, and the answer says so.
func TestBulkGroupBadItemHalfwayCancelsWhatWasWritten(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	var body strings.Builder
	body.WriteString(`{"id":"half","type":"t"}` + "\n")
	for i := range 1200 {
		if i == 1100 {
			body.WriteString("{not json\n")
			continue
		}
		fmt.Fprintf(&body, "%d\n", i)
	}
	a := post(t, g.url+"/v1/topics/jobs/groups", body.String(), "Content-Type", "application/x-ndjson")
	if a.status != http.StatusBadRequest || !bytes.Contains(a.body, []byte("item 1100")) || !bytes.Contains(a.body, []byte("1000 items written (or sent) before it are cancelled")) {
		t.Fatalf("%d %s", a.status, a.body)
	}
	items, control := groupRecords(t, k, "half", 1001)
	if len(items) != 1000 || len(control) != 1 || !control[0].Cancel || control[0].Group != "half" {
		t.Fatalf("%d items, control %+v", len(items), control)
	}
}

func TestGroupStatusAndCancel(t *testing.T) {
	k := newKafka(t)
	noRedis := startGate(t, k, nil)
	if a := do(t, http.MethodGet, noRedis.url+"/v1/groups/x", nil); a.status != http.StatusNotImplemented {
		t.Fatalf("without Redis: %d %s", a.status, a.body)
	}
	r := testenv.Redis(t)
	layout := queue.Keyspace{Stage: "dev", Partitions: 8}
	g := startGate(t, k, func(c *gate.Config) { c.RedisAddr = r.Addr() })
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	p.LoadScripts(ctx)
	p.RegisterTopics(ctx, []string{"jobs", "emails"}, time.Now()) // as the relays do
	if a := do(t, http.MethodGet, g.url+"/v1/groups/nope", nil); a.status != http.StatusNotFound {
		t.Fatalf("unknown group: %d %s", a.status, a.body)
	}
	// What the relay writes for a 10-item group: the items, then the close.
	items := make([]queue.Item, 0, 11)
	for i := range 10 {
		id := job.BulkID("grp", int64(i))
		items = append(items, queue.Item{ID: id, Group: "grp", Topic: "jobs", Weight: 1, Envelope: []byte(`{"id":"` + id + `","type":"t"}`)})
	}
	items = append(items, queue.Item{Close: true, Group: "grp", Topic: "jobs", GroupTotal: 10, CallbackURL: "http://cb/x"})
	if _, err := p.Enqueue(ctx, 1, items, time.Now()); err != nil {
		t.Fatal(err)
	}
	part := layout.QueueOf("jobs", "grp", "")
	claimed, err := p.Claim(ctx, part, 3, time.Minute)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	if _, err := p.AckMany(ctx, part, []queue.Done{{Job: claimed[0]}, {Job: claimed[1]}}, time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	var v struct {
		State     string   `json:"state"`
		Total     *int64   `json:"total"`
		Relayed   int64    `json:"relayed"`
		Queued    int64    `json:"queued"`
		Running   int64    `json:"running"`
		Done      int64    `json:"done"`
		Cancelled int64    `json:"cancelled"`
		Progress  *float64 `json:"progress"`
		Callback  struct {
			URL, State string
		} `json:"callback"`
	}
	// Without a topic the gate finds the group's among the registered ones.
	a := do(t, http.MethodGet, g.url+"/v1/groups/grp", nil)
	a.decode(t, &v)
	if a.status != http.StatusOK || v.State != "running" || v.Total == nil || *v.Total != 10 || v.Relayed != 10 || v.Queued != 7 ||
		v.Running != 1 || v.Done != 2 || v.Progress == nil || *v.Progress != 0.2 || v.Callback.URL != "http://cb/x" || v.Callback.State != "pending" {
		t.Fatalf("status: %d %s", a.status, a.body)
	}
	// The answer is internal/groups' Status, the admin API's answer too:
	// what groups.Read makes of the group, but for the rate, which moves
	// with the clock.
	var got groups.Status
	a.decode(t, &got)
	want, err := groups.Read(ctx, p, []string{"jobs"}, "grp", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got.Rate, got.EstimatedFinish, want.Rate, want.EstimatedFinish = 0, nil, 0, nil
	if !reflect.DeepEqual(got, want) || got.Group != "grp" || got.Partition != part.Part || got.FirstAt == nil {
		t.Fatalf("the gate's status:\n got %+v\nwant %+v", got, want)
	}
	// DELETE cancels the 7 not started; the running one may finish, and
	// then the group is complete. The answer is the status after the
	// cancel, with the ready jobs it removed.
	a = do(t, http.MethodDelete, g.url+"/v1/topics/jobs/groups/grp", nil)
	a.decode(t, &v)
	var cancelled groups.Cancelled
	a.decode(t, &cancelled)
	if a.status != http.StatusOK || v.State != "cancelling" || v.Cancelled != 7 || v.Queued != 0 || v.Running != 1 || cancelled.Removed != 7 || cancelled.CancelledAt == nil {
		t.Fatalf("after DELETE: %d %s", a.status, a.body)
	}
	// A second DELETE is harmless: nothing is left to remove.
	if a := do(t, http.MethodDelete, g.url+"/v1/groups/grp", nil); a.status != http.StatusOK || !bytes.Contains(a.body, []byte(`"removed":0`)) {
		t.Fatalf("a second DELETE: %d %s", a.status, a.body)
	}
	// An unknown group is not cancelled: no group is left behind by a typo.
	if a := do(t, http.MethodDelete, g.url+"/v1/topics/jobs/groups/grq", nil); a.status != http.StatusNotFound {
		t.Fatalf("DELETE of an unknown group: %d %s", a.status, a.body)
	}
	if st, err := p.GroupStatus(ctx, "jobs", "grq"); err != nil || st.Found {
		t.Fatalf("DELETE of an unknown group left one in Redis: %+v %v", st, err)
	}
	if _, err := p.AckMany(ctx, part, []queue.Done{{Job: claimed[2]}}, time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	a = do(t, http.MethodGet, g.url+"/v1/topics/jobs/groups/grp", nil)
	a.decode(t, &v)
	if v.State != "completed" || v.Done != 3 || v.Cancelled != 7 || *v.Progress != 1 {
		t.Fatalf("after the last running job: %s", a.body)
	}
	if n, _ := r.Client().LLen(ctx, layout.Keys(part).Completed()).Result(); n != 1 {
		t.Fatalf("completed list holds %d, want the group once", n)
	}
	// Items still on their way from Kafka are dropped by the relay.
	late := job.BulkID("grp", 99)
	res, err := p.Enqueue(ctx, 1, []queue.Item{{ID: late, Group: "grp", Topic: "jobs", Weight: 1, Envelope: []byte(`{}`)}}, time.Now())
	if err != nil || res[0].Outcome != queue.Dropped {
		t.Fatalf("a late item of a cancelled group: %v %v", res, err)
	}
	var raw map[string]json.RawMessage
	do(t, http.MethodGet, g.url+"/v1/groups/grp?topic=jobs", nil).decode(t, &raw)
	if string(raw["cancelled"]) != "8" {
		t.Fatalf("late item not counted cancelled: %s", raw["cancelled"])
	}
	// A topic is a queue: another topic's group of the same name is
	// another group, and asking without a topic is then ambiguous.
	other := queue.Item{ID: job.BulkID("grp", 0), Group: "grp", Topic: "emails", Weight: 1, Envelope: []byte(`{}`)}
	if _, err := p.Enqueue(ctx, 1, []queue.Item{other}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if a := do(t, http.MethodGet, g.url+"/v1/groups/grp", nil); a.status != http.StatusConflict ||
		!bytes.Contains(a.body, []byte("emails, jobs")) {
		t.Fatalf("a name in two topics: %d %s", a.status, a.body)
	}
	if a := do(t, http.MethodDelete, g.url+"/v1/groups/grp", nil); a.status != http.StatusConflict {
		t.Fatalf("DELETE of a name in two topics: %d %s", a.status, a.body)
	}
	if st, err := p.GroupStatus(ctx, "emails", "grp"); err != nil || !st.CancelledAt.IsZero() {
		t.Fatalf("an ambiguous DELETE cancelled the other topic's group: %+v %v", st, err)
	}
	do(t, http.MethodGet, g.url+"/v1/topics/emails/groups/grp", nil).decode(t, &raw)
	if string(raw["relayed"]) != "1" || string(raw["topic"]) != `"emails"` {
		t.Fatalf("the other topic's group: %s %s", raw["relayed"], raw["topic"])
	}
}

// A group whose only chunk times out at Kafka is cancelled all the same:
// the chunk may land after the 504 (here it does), and without a cancel
// its items would sit in Redis with no close, the group never complete.
func TestBulkGroupTimedOutChunkIsCancelled(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, func(c *gate.Config) { c.ProduceTimeout = 2 * time.Second })
	// The cancel goes with acks=all: its producer exists before the fault
	// (warmed on another topic, so that the group's partition holds only it).
	if a := post(t, g.url+"/v1/topics/other/jobs?acks=all", `{"type":"t"}`); a.status != http.StatusAccepted {
		t.Fatalf("warming acks=all: %d %s", a.status, a.body)
	}
	// A slow broker: the chunk's produce is answered 2.5 s late, after the
	// gate's 2 s deadline; the cancel's, sent then, waits behind it and is
	// answered well within its own 2 s.
	late := make(chan struct{})
	time.AfterFunc(2500*time.Millisecond, func() { close(late) })
	c := k.Cluster()
	var slept atomic.Bool // only the first call sleeps: the control stays, and sleeping again raced in kfake
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if slept.CompareAndSwap(false, true) {
			c.SleepControl(func() { <-late })
		}
		return nil, nil, false
	})
	var items []string
	for range 10 {
		items = append(items, `{"n":1}`)
	}
	a := post(t, g.url+"/v1/topics/jobs/groups", `{"id":"slow-grp","type":"t","items":[`+strings.Join(items, ",")+`]}`)
	if a.status != http.StatusGatewayTimeout || !bytes.Contains(a.body, []byte("10 items written (or sent) before it are cancelled")) {
		t.Fatalf("a timed-out chunk: %d %s", a.status, a.body)
	}
	var got []*job.Job
	var control []job.GroupClose
	testenv.WaitFor(t, 10*time.Second, "the chunk and the cancel in Kafka", func() bool {
		got, control = groupRecords(t, k, "slow-grp", 11)
		return len(got) == 10 && len(control) == 1
	})
	if !control[0].Cancel || control[0].Group != "slow-grp" {
		t.Fatalf("control record %+v, want the group's cancel", control[0])
	}
}

// TestCallbackAllowOpensWhatAnOperatorTrusts: a single job's callback_url
// is checked as a group's is, and --callback-allow lets a private receiver
// through.
func TestCallbackAllowOpensWhatAnOperatorTrusts(t *testing.T) {
	k := newKafka(t)
	closed := startGate(t, k, nil)
	open := startGate(t, k, func(c *gate.Config) { c.CallbackAllow = []string{"10.0.0.0/8"} })
	body := `{"type":"t","group":"g","group_total":1,"callback_url":"https://inside.test/hook","payload":{}}`
	if a := post(t, closed.url+"/v1/topics/jobs/jobs", body); a.status != http.StatusBadRequest || !bytes.Contains(a.body, []byte("private address")) {
		t.Errorf("without the allow-list: %d %s", a.status, a.body)
	}
	if a := post(t, open.url+"/v1/topics/jobs/jobs", body); a.status != http.StatusAccepted {
		t.Errorf("with 10.0.0.0/8 allowed: %d %s", a.status, a.body)
	}
	batch := `[{"type":"t","callback_url":"http://[::1]/x","payload":{}},{"type":"t","payload":{}}]`
	if a := post(t, closed.url+"/v1/topics/jobs/jobs:batch", batch); !bytes.Contains(a.body, []byte("loopback")) {
		t.Errorf("a batch item to loopback: %d %s", a.status, a.body)
	}
}
