package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/testenv"
)

var quick = client.RetryPolicy{MaxAttempts: 20, MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}

// TestA504IsResentWithTheSameIDsAndQueuedOnce: Kafka holds the first
// produce past the gate's produce timeout, so the gate answers 504 while
// the write is still on its way; the write then lands, and the client's
// resend lands too. Kafka holds the job twice, Redis once: the client
// chose the id, so the relay deduplicates the resend. Then the same for a
// batch.
func TestA504IsResentWithTheSameIDsAndQueuedOnce(t *testing.T) {
	b := newBed(t, func(c *gate.Config) { c.ProduceTimeout = 300 * time.Millisecond })
	c := b.client(t, quick)
	ctx := context.Background()

	// The held write lands once the gate has answered 504.
	release := make(chan struct{})
	var once sync.Once
	b.hook(func(status int) {
		if status == http.StatusGatewayTimeout {
			once.Do(func() { close(release) })
		}
	})
	holdFirstProduce(b.kafka, release)
	res, err := c.Enqueue(ctx, topic, "email", map[string]string{"to": "a@example.com"})
	if err != nil {
		t.Fatalf("Enqueue through a 504: %v", err)
	}
	if b.answered(http.StatusGatewayTimeout) == 0 {
		t.Fatal("the gate never answered 504: the test proves nothing")
	}
	ids := []string{res.ID}

	release2 := make(chan struct{})
	var once2 sync.Once
	b.hook(func(status int) {
		if status == http.StatusGatewayTimeout {
			once2.Do(func() { close(release2) })
		}
	})
	before := b.answered(http.StatusGatewayTimeout)
	holdFirstProduce(b.kafka, release2)
	jobs := make([]client.Job, 5)
	for i := range jobs {
		jobs[i] = client.Job{Type: "email", Payload: map[string]int{"n": i}}
	}
	jobs[2].Options = []client.Option{client.ID("chosen-by-caller")}
	br, err := c.EnqueueBatch(ctx, topic, jobs)
	if err != nil {
		t.Fatalf("EnqueueBatch through a 504: %v", err)
	}
	if b.answered(http.StatusGatewayTimeout) == before {
		t.Fatal("the gate never answered the batch 504")
	}
	if br.Accepted != 5 || br.Results[2].ID != "chosen-by-caller" {
		t.Fatalf("batch result: %+v", br)
	}
	for _, r := range br.Results {
		ids = append(ids, r.ID)
	}

	kafkaIDs, _ := b.kafkaIDs(t)
	twice := 0
	for _, id := range ids {
		if kafkaIDs[id] == 0 {
			t.Errorf("job %s is not in Kafka", id)
		}
		if kafkaIDs[id] > 1 {
			twice++
		}
	}
	if twice == 0 {
		t.Fatalf("no job is in Kafka twice (%v): the 504'd writes did not land, and dedupe went untested", kafkaIDs)
	}
	b.onceEach(t, ids)
}

// TestA503IsRetriedUntilKafkaIsBack: with Kafka stopped the gate answers
// 503; the client retries with backoff, and once Kafka is back every job
// is in Redis once.
func TestA503IsRetriedUntilKafkaIsBack(t *testing.T) {
	b := newBed(t, nil)
	c := b.client(t, client.RetryPolicy{MaxAttempts: 100, MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	// Warm: the relay holds its lock and the gate knows the topic.
	first, err := c.Enqueue(ctx, topic, "t", nil, client.Group("warm"))
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{first.ID}

	down := make(chan struct{})
	var once sync.Once
	b.hook(func(status int) {
		if status >= 500 {
			once.Do(func() { close(down) })
		}
	})
	b.kafka.Stop()
	type outcome struct {
		ids []string
		err error
	}
	done := make(chan outcome, 2)
	go func() {
		r, err := c.Enqueue(ctx, topic, "t", "single")
		if err != nil {
			done <- outcome{err: err}
			return
		}
		done <- outcome{ids: []string{r.ID}}
	}()
	go func() {
		jobs := make([]client.Job, 20)
		for i := range jobs {
			jobs[i] = client.Job{Type: "t", Payload: i, Options: []client.Option{client.Group("g" + strconv.Itoa(i%3))}}
		}
		br, err := c.EnqueueBatch(ctx, topic, jobs)
		if err != nil {
			done <- outcome{err: err}
			return
		}
		var out []string
		for _, r := range br.Results {
			out = append(out, r.ID)
		}
		done <- outcome{ids: out}
	}()
	select {
	case <-down:
	case <-ctx.Done():
		t.Fatal("the gate never answered 5xx with Kafka stopped")
	}
	b.kafka.Start()
	for range 2 {
		o := <-done
		if o.err != nil {
			t.Fatalf("enqueue across the outage: %v", o.err)
		}
		ids = append(ids, o.ids...)
	}
	if b.answered(http.StatusServiceUnavailable) == 0 {
		t.Fatal("the gate never answered 503: the test proves nothing")
	}
	b.onceEach(t, ids)
}

// TestA503IsBounded: with Kafka down for good the client gives up after
// MaxAttempts sends and returns the gate's 503 as an *Error.
func TestA503IsBounded(t *testing.T) {
	b := newBed(t, nil)
	c := b.client(t, client.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	b.kafka.Stop()
	_, err := c.Enqueue(context.Background(), topic, "t", nil)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Attempts != 3 || !e.Temporary() {
		t.Fatalf("Enqueue with Kafka down: %v (%+v)", err, e)
	}
}

// TestA4xxIsATypedErrorAndNotRetried: the gate's message, field and status
// reach the caller through errors.As, after one send.
func TestA4xxIsATypedErrorAndNotRetried(t *testing.T) {
	b := newBed(t, nil)
	c := b.client(t, quick)
	ctx := context.Background()

	_, err := c.Enqueue(ctx, topic, "t", nil, client.Priority(42))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Field != "priority" || e.Attempts != 1 || e.Temporary() {
		t.Fatalf("priority 42: %v (%+v)", err, e)
	}
	_, err = c.Enqueue(ctx, "no-such-topic", "t", nil)
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Message == "" {
		t.Fatalf("unknown topic: %v (%+v)", err, e)
	}
	if got := b.answered(http.StatusBadRequest) + b.answered(http.StatusNotFound); got != 2 {
		t.Fatalf("the gate answered %d 4xx, want 2 (one send each)", got)
	}

	// A batch: the valid jobs are stored, the invalid one is a BatchError.
	br, err := c.EnqueueBatch(ctx, topic, []client.Job{
		{Type: "t", Payload: 1},
		{Type: "t", Options: []client.Option{client.MaxAttempts(1000)}},
		{Type: "t", Payload: 3},
	})
	var be *client.BatchError
	if !errors.As(err, &be) || len(be.Rejected) != 1 || be.Rejected[0].Index != 1 || be.Rejected[0].Err.Field != "max_attempts" {
		t.Fatalf("batch with one invalid job: %v", err)
	}
	if br.Accepted != 2 || br.Results[0].Err != nil || br.Results[2].Err != nil {
		t.Fatalf("batch result: %+v", br)
	}

	// A misuse the client catches itself.
	if _, err := c.Enqueue(ctx, topic, "t", nil, client.Callback("http://127.0.0.1:1/")); err == nil {
		t.Fatal("Callback on a single job: no error")
	}
	// Status of a group Redis does not know: 404.
	_, err = c.GroupStatus(ctx, topic, "never-submitted")
	if !errors.As(err, &e) || e.Status != http.StatusNotFound {
		t.Fatalf("status of an unknown group: %v", err)
	}
	b.onceEach(t, []string{br.Results[0].ID, br.Results[2].ID})
}

// TestEveryOptionReachesTheEnvelope: the options land in the envelope the
// gate wrote to Kafka under the envelope's names.
func TestEveryOptionReachesTheEnvelope(t *testing.T) {
	b := newBed(t, nil)
	c := b.client(t, quick)
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	res, err := c.Enqueue(context.Background(), topic, "report", map[string]string{"html": "<b>&</b>"},
		client.ID("opt-1"), client.Group("g"), client.Tenant("acme"), client.Resource("smtp"), client.Priority(3),
		client.RunAt(runAt), client.MaxAttempts(7), client.Timeout(90*time.Second), client.IdempotencyKey("k-1"),
		client.Retain(time.Hour), client.Acks(client.AcksAll))
	if err != nil {
		t.Fatal(err)
	}
	m := testenv.ReadRecords(t, b.kafka.Brokers(), topic, res.Partition, res.Offset, 1)[0]
	want := `{"id":"opt-1","id_given":true,"topic":"jobs","type":"report","group":"g","tenant":"acme","resource":"smtp","priority":3,"payload":{"html":"<b>&</b>"},"idempotency_key":"k-1","max_attempts":7,"timeout":"1m30s","retain":"1h0m0s","run_at":"` + runAt.Format(time.RFC3339Nano) + `"`
	if got := string(m.Value); len(got) < len(want) || got[:len(want)] != want {
		t.Fatalf("envelope in Kafka:\n got %s\nwant %s...", got, want)
	}
}

// TestGroupStatusAndCancel: a bulk group submitted with the client is
// relayed (no worker runs, so its jobs stay ready), its status says so,
// and a cancel removes them all; options outside a group's fields are
// refused before anything is sent.
func TestGroupStatusAndCancel(t *testing.T) {
	b := newBed(t, nil)
	c := b.client(t, quick)
	ctx := context.Background()
	items := make([]any, 30)
	for i := range items {
		items[i] = map[string]int{"n": i}
	}
	if _, err := c.EnqueueGroup(ctx, topic, "t", items, client.RunAt(time.Now())); err == nil {
		t.Fatal("EnqueueGroup with RunAt: no error")
	}
	g, err := c.EnqueueGroup(ctx, topic, "t", items, client.ID("newsletter-1"), client.Callback("http://127.0.0.1:1/done"), client.Priority(2))
	if err != nil {
		t.Fatal(err)
	}
	if g.Group != "newsletter-1" || g.Count != 30 || g.Status != "/v1/topics/jobs/groups/newsletter-1" {
		t.Fatalf("group answer: %+v", g)
	}
	var st *client.GroupStatus
	testenv.WaitFor(t, 30*time.Second, "the group to be relayed with its total", func() bool {
		st, err = c.GroupStatus(ctx, topic, g.Group)
		return err == nil && st.Total == 30 && st.Queued == 30
	})
	if st.State != client.GroupRunning || st.CallbackURL != "http://127.0.0.1:1/done" {
		t.Fatalf("status: %+v", st)
	}
	cs, err := c.CancelGroup(ctx, topic, g.Group)
	if err != nil || cs.Removed != 30 || cs.Cancelled != 30 {
		t.Fatalf("cancel: %v %+v", err, cs)
	}
	if got := b.redisIDs(t); len(got) != 0 {
		t.Fatalf("after the cancel Redis still holds %d jobs", len(got))
	}
}

// TestLookupJob: a job the client enqueued is found ready once relayed (no
// worker runs), with its position or its group; an unknown id is an
// answer, not an error.
func TestLookupJob(t *testing.T) {
	b := newBed(t, nil)
	c := b.client(t, quick)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, topic, "t", nil, client.Group("g-7"))
	if err != nil {
		t.Fatal(err)
	}
	var info *client.JobInfo
	testenv.WaitFor(t, 30*time.Second, "the job to be ready", func() bool {
		info, err = c.LookupJob(ctx, topic, res.ID, client.InGroup("g-7"), client.AtPosition(res.Partition, res.Offset))
		if err != nil {
			t.Fatalf("LookupJob: %v", err)
		}
		return info.State == client.JobReady
	})
	if info.ID != res.ID || info.Topic != topic || info.Note == "" {
		t.Fatalf("lookup: %+v", info)
	}
	info, err = c.LookupJob(ctx, topic, "never-sent")
	if err != nil || info.State != client.JobNotFound {
		t.Fatalf("unknown id: %v %+v", err, info)
	}
	_, err = c.LookupJob(ctx, topic, "x", client.AtPosition(-1, 0))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
		t.Fatalf("a bad position: %v", err)
	}
}

// TestConnectionRefusedIsRetried: a gate that is not listening yet (a
// restart, a deploy) refuses connections; the client retries until it
// listens, and the job is queued once.
func TestConnectionRefusedIsRetried(t *testing.T) {
	// A loopback port free a moment ago, where the gate will listen.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()

	var refused atomic.Int64
	dialer := &net.Dialer{}
	transport := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, a)
		if err != nil {
			refused.Add(1)
		}
		return conn, err
	}}
	c, err := client.New(client.Config{URL: "http://" + addr, HTTPClient: &http.Client{Transport: transport},
		Retry: client.RetryPolicy{MaxAttempts: 200, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res *client.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Enqueue(context.Background(), topic, "t", "hello", client.ID("sent-before-the-gate"))
		done <- outcome{res, err}
	}()
	testenv.WaitFor(t, 10*time.Second, "a refused connection", func() bool { return refused.Load() > 0 })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port was taken meanwhile: %v", err)
	}
	b := newBedOn(t, ln, nil)
	o := <-done
	if o.err != nil || o.res.ID != "sent-before-the-gate" {
		t.Fatalf("Enqueue across refused connections: %v %+v", o.err, o.res)
	}
	b.onceEach(t, []string{"sent-before-the-gate"})
}

// TestAGroup504IsNotResent: after a 504 the gate may have cancelled what
// it wrote of the group (and a cancelled id takes no more jobs), so the
// client returns the *Error naming the group instead of resending.
func TestAGroup504IsNotResent(t *testing.T) {
	b := newBed(t, func(c *gate.Config) { c.ProduceTimeout = 300 * time.Millisecond })
	c := b.client(t, quick)
	release := make(chan struct{})
	defer close(release)
	holdFirstProduce(b.kafka, release)
	_, err := c.EnqueueGroup(context.Background(), topic, "t", []any{1, 2, 3}, client.ID("held-group"))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusGatewayTimeout || e.Attempts != 1 || len(e.IDs) != 1 || e.IDs[0] != "held-group" {
		t.Fatalf("a held group: %v (%+v)", err, e)
	}
	if n := b.answered(http.StatusGatewayTimeout); n != 1 {
		t.Fatalf("the gate answered 504 %d times, want 1: the client resent the group", n)
	}
}
