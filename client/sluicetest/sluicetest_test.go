package sluicetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/client/sluicetest"
	"github.com/sluicehq/sluice/worker"
)

type welcome struct {
	To   string `json:"to"`
	HTML string `json:"html,omitempty"`
}

func (welcome) Kind() string { return "welcome.send" }

type farewell struct{}

func (farewell) Kind() string { return "farewell" }

// signup is code under test that enqueues: it takes the interface.
func signup(ctx context.Context, e client.Enqueuer, to string) error {
	_, err := e.Enqueue(ctx, "mail", "", welcome{To: to}, client.Group(to), client.Timeout(3*time.Second), client.MaxAttempts(2))
	return err
}

// TestRecorderRecordsWhatTheClientWouldSend: each job with its type (the
// Kind() when none is given), id, payload as sent and options, in order,
// findable by type and decodable as the worker decodes it.
func TestRecorderRecordsWhatTheClientWouldSend(t *testing.T) {
	var r sluicetest.Recorder
	ctx := context.Background()
	if err := signup(ctx, &r, "ada@example.com"); err != nil {
		t.Fatal(err)
	}
	res, err := r.Enqueue(ctx, "mail", "report", map[string]string{"html": "<b>&</b>"}, client.ID("r-1"), client.Retain(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != "r-1" || res.Offset != 1 || res.Topic != "mail" {
		t.Fatalf("second Result %+v, want id r-1 at offset 1 of mail", res)
	}
	br, err := r.EnqueueBatch(ctx, "mail", []client.Job{{Payload: welcome{To: "bob"}}, {Type: "report", Payload: nil}}, client.Acks(client.AcksLeader))
	if err != nil || br.Accepted != 2 || br.Results[1].Offset != 3 {
		t.Fatalf("batch: %+v, %v", br, err)
	}
	jobs := r.Jobs()
	if len(jobs) != 4 {
		t.Fatalf("recorded %d jobs, want 4: %+v", len(jobs), jobs)
	}
	first := jobs[0]
	if first.Call != "Enqueue" || first.Topic != "mail" || first.Type != "welcome.send" || first.ID == "" ||
		string(first.JSON) != `{"to":"ada@example.com"}` || first.Options.Group != "ada@example.com" ||
		first.Options.Timeout != 3*time.Second || first.Options.MaxAttempts != 2 {
		t.Fatalf("first job %+v", first)
	}
	if got := string(jobs[1].JSON); got != `{"html":"<b>&</b>"}` || jobs[1].Options.Retain != time.Hour {
		t.Fatalf("second job: payload %s (want the HTML unescaped, as the Client sends it), %+v", got, jobs[1].Options)
	}
	if jobs[2].Call != "EnqueueBatch" || jobs[2].Index != 0 || jobs[2].Options.Acks != client.AcksLeader || jobs[3].Index != 1 || jobs[3].JSON != nil {
		t.Fatalf("batch jobs %+v", jobs[2:])
	}
	if n := len(r.ByType("report")); n != 2 {
		t.Fatalf("ByType(report): %d, want 2", n)
	}
	ws, err := sluicetest.Payloads[welcome](&r, "")
	if err != nil || len(ws) != 2 || ws[0].To != "ada@example.com" || ws[1].To != "bob" {
		t.Fatalf("Payloads[welcome]: %+v, %v", ws, err)
	}
	if _, err := sluicetest.Payloads[[]int](&r, "report"); err == nil || !strings.Contains(err.Error(), "r-1") {
		t.Fatalf("Payloads[[]int] of report: %v, want an error naming job r-1", err)
	}

	g, err := r.EnqueueGroup(ctx, "mail", "", []any{welcome{To: "cy"}, welcome{To: "di"}}, client.ID("g-1"), client.Callback("http://127.0.0.1:9/cb"))
	if err != nil || g.Group != "g-1" || g.Count != 2 {
		t.Fatalf("group: %+v, %v", g, err)
	}
	items := r.Jobs()[4:]
	if items[1].ID != "g-1.1" || items[1].Options.Group != "g-1" || items[1].Options.Callback != "http://127.0.0.1:9/cb" || items[1].Type != "welcome.send" {
		t.Fatalf("group item %+v", items[1])
	}
	r.Reset()
	if n := len(r.Jobs()); n != 0 {
		t.Fatalf("after Reset: %d jobs", n)
	}
}

// TestRecorderRefusesWhatTheClientRefuses: for each job the Client
// refuses before sending, the Recorder returns the same error.
func TestRecorderRefusesWhatTheClientRefuses(t *testing.T) {
	c, err := client.New(client.Config{URL: "http://127.0.0.1:1", Retry: client.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var r sluicetest.Recorder
	ctx := context.Background()
	cases := map[string]func(e client.Enqueuer) error{
		"no type": func(e client.Enqueuer) error { _, err := e.Enqueue(ctx, "mail", "", 1); return err },
		"Callback on Enqueue": func(e client.Enqueuer) error {
			_, err := e.Enqueue(ctx, "mail", "x", nil, client.Callback("http://a"))
			return err
		},
		"bad JSON": func(e client.Enqueuer) error {
			_, err := e.Enqueue(ctx, "mail", "x", json.RawMessage(`{`))
			return err
		},
		"no jobs": func(e client.Enqueuer) error { _, err := e.EnqueueBatch(ctx, "mail", nil); return err },
		"Group on a batch": func(e client.Enqueuer) error {
			_, err := e.EnqueueBatch(ctx, "mail", []client.Job{{Type: "x"}}, client.Group("g"))
			return err
		},
		"Acks on a batch's job": func(e client.Enqueuer) error {
			_, err := e.EnqueueBatch(ctx, "mail", []client.Job{{Type: "x"}, {Type: "x", Options: []client.Option{client.Acks(client.AcksAll)}}})
			return err
		},
		"a batch job without a type": func(e client.Enqueuer) error {
			_, err := e.EnqueueBatch(ctx, "mail", []client.Job{{Type: "x"}, {Payload: 2}})
			return err
		},
		"Group on a group": func(e client.Enqueuer) error {
			_, err := e.EnqueueGroup(ctx, "mail", "x", []any{1}, client.Group("g"))
			return err
		},
		"a group of two Kinds": func(e client.Enqueuer) error {
			_, err := e.EnqueueGroup(ctx, "mail", "", []any{welcome{}, farewell{}})
			return err
		},
	}
	for name, call := range cases {
		want, got := call(c), call(&r)
		if want == nil || got == nil || want.Error() != got.Error() {
			t.Errorf("%s: the Recorder says %v, the Client %v", name, got, want)
		}
	}
	if n := len(r.Jobs()); n != 0 {
		t.Fatalf("the Recorder kept %d refused jobs", n)
	}
}

// TestRecorderFailsWhenTold: FailWith fails every job and records none;
// in a batch a *client.Error rejects that job alone, another error the
// whole batch; nil ends it.
func TestRecorderFailsWhenTold(t *testing.T) {
	var r sluicetest.Recorder
	ctx := context.Background()
	down := errors.New("gate down")
	r.FailWith(down)
	if err := signup(ctx, &r, "ada"); !errors.Is(err, down) {
		t.Fatalf("Enqueue under FailWith: %v", err)
	}
	if _, err := r.EnqueueBatch(ctx, "mail", []client.Job{{Type: "x"}}); !errors.Is(err, down) {
		t.Fatalf("EnqueueBatch under FailWith: %v", err)
	}
	if _, err := r.EnqueueGroup(ctx, "mail", "x", []any{1, 2}); !errors.Is(err, down) {
		t.Fatalf("EnqueueGroup under FailWith: %v", err)
	}
	if n := len(r.Jobs()); n != 0 {
		t.Fatalf("%d failed jobs recorded", n)
	}
	r.FailWhen(func(e sluicetest.Enqueued) error {
		if e.Type == "bad" {
			return &client.Error{Status: http.StatusBadRequest, Message: "no", Field: "payload"}
		}
		return nil
	})
	br, err := r.EnqueueBatch(ctx, "mail", []client.Job{{Type: "ok"}, {Type: "bad"}, {Type: "ok"}})
	var be *client.BatchError
	if !errors.As(err, &be) || len(be.Rejected) != 1 || be.Rejected[0].Index != 1 || br.Accepted != 2 || br.Results[1].Status != http.StatusBadRequest {
		t.Fatalf("batch with a rejected job: %+v, %v", br, err)
	}
	if got := r.ByType("ok"); len(got) != 2 || got[1].Index != 2 {
		t.Fatalf("accepted batch jobs recorded: %+v", got)
	}
	r.FailWith(nil)
	if err := signup(ctx, &r, "ada"); err != nil || len(r.Jobs()) != 3 {
		t.Fatalf("after FailWith(nil): %v, %d jobs", err, len(r.Jobs()))
	}
}

// TestHarnessRunsAJobAsTheWorkerDoes: the handler sees the job's options
// (group, attempt, max attempts, the timeout as its deadline), and the
// outcome is the worker's: a retry before the last attempt, dead at it.
// A job the Recorder took runs as it was enqueued.
func TestHarnessRunsAJobAsTheWorkerDoes(t *testing.T) {
	h := sluicetest.NewHarness(t)
	h.Topic = "mail"
	type saw struct {
		job      worker.Job
		to       string
		deadline time.Duration
	}
	var last saw
	worker.HandleFunc(h.Worker, "", func(ctx context.Context, j *worker.TypedJob[welcome]) error {
		d, _ := ctx.Deadline()
		last = saw{*j.Job, j.Payload.To, time.Until(d)}
		if strings.HasSuffix(j.Payload.To, "@invalid") {
			return errors.New("smtp: no such domain")
		}
		return nil
	})
	ctx := context.Background()
	out, err := h.Work(ctx, "", welcome{To: "ada@example.com"}, client.Group("ada"), client.Timeout(3*time.Second), client.ID("j-1"))
	if err != nil || out.Err != nil || out.Retry || out.Dead {
		t.Fatalf("Work: %+v, %v", out, err)
	}
	if last.job.Type != "welcome.send" || last.job.ID != "j-1" || last.job.Group != "ada" || last.job.Topic != "mail" || last.job.Attempt != 1 ||
		last.job.MaxAttempts != 5 || last.to != "ada@example.com" || last.deadline > 3*time.Second || last.deadline < 2*time.Second {
		t.Fatalf("the handler saw %+v", last)
	}

	var r sluicetest.Recorder
	if err := signup(ctx, &r, "bob@invalid"); err != nil {
		t.Fatal(err)
	}
	e := r.Jobs()[0]
	if out := h.WorkEnqueued(ctx, 1, e); !out.Retry || out.Err == nil || out.MaxAttempts != 2 || out.Timeout != 3*time.Second {
		t.Fatalf("attempt 1 of 2 failing: %+v, want a retry under the job's own limits", out)
	}
	if out := h.WorkEnqueued(ctx, 2, e); out.Retry || !out.Dead || last.job.Attempt != 2 || last.job.Group != "bob@invalid" {
		t.Fatalf("attempt 2 of 2 failing: %+v (handler saw %+v), want dead", out, last.job)
	}
	if _, err := h.Work(ctx, "", 7); err == nil || !strings.Contains(err.Error(), "Kind()") {
		t.Fatalf("Work without a type: %v, want the Client's error", err)
	}
}
