package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
)

// One job's cancel and delete: a ready or delayed job leaves its queue at
// once (a cancel leaves a record the lookup finds as cancelled, a delete
// nothing); a group's job is counted cancelled, so the group can still
// complete; a running job's cancel is a request the next lease extension
// answers, and its settlement records it cancelled; a delete of a running
// job and a cancel of an ended one are refused.
func TestCancelAndDeleteOneJob(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	later := now.Add(time.Hour)
	runAt := item("at", "")
	runAt.RunAt = later
	runAt.Envelope = (&job.Job{ID: "at", Type: "t", Topic: "jobs", RunAt: later}).AppendJSON(nil)
	enqueueOK(t, p, 1, positioned(0, 0, item("run", "")), now)
	k := p.keyspace.Keys(jq(0))
	find := func(id, group string) JobWhereabouts {
		t.Helper()
		w, err := p.FindJob(ctx, JobLookup{Topic: "jobs", ID: id, Group: group})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	cancel := func(id, group string, del bool) (string, error) {
		t.Helper()
		out, _, err := p.CancelJob(ctx, JobLookup{Topic: "jobs", ID: id, Group: group}, del, now)
		return out, err
	}
	// Claim one job, to run.
	jobs, err := p.Claim(ctx, jq(0), 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatal(jobs, err)
	}
	running := jobs[0]
	enqueueOK(t, p, 1, positioned(0, 1, item("ready", ""), item("gone", ""), item("g1", "grp"), item("g2", "grp"), runAt), now)
	readyBefore, _ := r.Client().HGet(ctx, k.Stats(), "ready").Int()

	for _, c := range []struct {
		id, group string
		del       bool
		want      string
		after     string
	}{
		{"ready", "", false, Cancelled, WhereCancelled},
		{"gone", "", true, Deleted, WhereNotFound},
		{"at", "", false, Cancelled, WhereCancelled},
		{"g1", "grp", false, Cancelled, WhereCancelled},
		{"g2", "grp", true, Deleted, WhereNotFound},
	} {
		if out, err := cancel(c.id, c.group, c.del); err != nil || out != c.want {
			t.Fatalf("%s (del %v): %q %v, want %q", c.id, c.del, out, err, c.want)
		}
		if w := find(c.id, c.group); w.Where != c.after {
			t.Fatalf("%s after %s: %+v, want %s", c.id, c.want, w, c.after)
		}
	}
	// Four ready jobs left ready (the fifth was delayed).
	if got, _ := r.Client().HGet(ctx, k.Stats(), "ready").Int(); got != readyBefore-4 {
		t.Fatalf("ready %d after the cancels, %d before", got, readyBefore)
	}
	if n, _ := r.Client().ZCard(ctx, k.Lanes()).Result(); n != 0 {
		t.Fatalf("%d lanes left in the fair order with nothing on them", n)
	}
	if n, _ := r.Client().ZCard(ctx, k.Delayed()).Result(); n != 0 {
		t.Fatalf("delayed holds %d after the delayed job's cancel", n)
	}
	if st, err := p.GroupStatus(ctx, "jobs", "grp"); err != nil || st.Cancelled != 2 || st.Queued != 0 {
		t.Fatalf("the group after cancelling and deleting its two jobs: %+v %v", st, err)
	}

	// The running job: delete refused, cancel requested.
	var se *JobStateError
	if _, err := cancel(running.ID, running.Group, true); !errors.As(err, &se) || se.Where != WhereRunning {
		t.Fatalf("delete of a running job: %v", err)
	}
	if out, err := cancel(running.ID, running.Group, false); err != nil || out != CancelRequested {
		t.Fatalf("cancel of a running job: %q %v", out, err)
	}
	if w := find(running.ID, running.Group); w.Where != WhereRunning || w.CancelRequested.IsZero() {
		t.Fatalf("a running job whose cancel was requested: %+v", w)
	}
	kept, cancels, err := p.ExtendLeases(ctx, jq(0), []string{running.Batch}, time.Minute)
	if err != nil || !kept[0] || len(cancels[running.Batch]) != 1 || cancels[running.Batch][0] != running.Index {
		t.Fatalf("the extension after the cancel: %v %v %v", kept, cancels, err)
	}
	if ok, err := p.SettleCancelled(ctx, jq(0), running, now, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if w := find(running.ID, running.Group); w.Where != WhereCancelled || !w.Until.Equal(now) {
		t.Fatalf("the running job once settled cancelled: %+v", w)
	}
	if n, _ := r.Client().Exists(ctx, k.Cancels(), k.Lease(running.Batch)).Result(); n != 0 {
		t.Fatalf("%d of the cancel request and the batch left after the settlement", n)
	}
	if inflight, _ := r.Client().HGet(ctx, k.Stats(), "inflight").Int(); inflight != 0 {
		t.Fatalf("inflight %d after the settlement", inflight)
	}
	// Nothing pending: the extension answers no cancels.
	if _, cancels, err := p.ExtendLeases(ctx, jq(0), []string{"none"}, time.Minute); err != nil || cancels != nil {
		t.Fatal(cancels, err)
	}

	// Ended jobs: cancel refused, delete removes the record.
	if _, err := cancel(running.ID, "", false); !errors.As(err, &se) || se.Where != WhereCancelled {
		t.Fatalf("cancel of a cancelled job: %v", err)
	}
	if out, err := cancel(running.ID, "", true); err != nil || out != Deleted {
		t.Fatalf("delete of a cancelled job: %q %v", out, err)
	}
	if w := find(running.ID, ""); w.Where != WhereNotFound {
		t.Fatalf("a deleted record: %+v", w)
	}
	if _, err := cancel("no-such-job", "", false); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("cancel of an unknown job: %v", err)
	}
}
