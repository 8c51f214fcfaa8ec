package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/testenv"
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

// A running job's cancel outlives its worker: a worker that dies (or is cut
// off from Redis) before its lease extension reads the request leaves the
// job to the reaper, which settles it cancelled rather than take it back to
// run again; a stopping worker's release does the same. A lease its holder
// still keeps is not the reaper's: a pending cancel there waits for the
// holder's extension.
func TestAPendingCancelOutlivesItsWorker(t *testing.T) {
	p, r := onePartition(t)
	ctx := context.Background()
	k := p.keyspace.Keys(jq(0))
	requestCancel := func(j Claimed) {
		t.Helper()
		if out, _, err := p.CancelJob(ctx, JobLookup{Topic: "jobs", ID: j.ID, Group: j.Group}, false, now); err != nil || out != CancelRequested {
			t.Fatalf("cancel of %s: %q %v", j.ID, out, err)
		}
	}
	where := func(j Claimed) string {
		t.Helper()
		w, err := p.FindJob(ctx, JobLookup{Topic: "jobs", ID: j.ID, Group: j.Group})
		if err != nil {
			t.Fatal(err)
		}
		return w.Where
	}
	claim := func(n int, lease time.Duration) map[string]Claimed {
		t.Helper()
		jobs, err := p.Claim(ctx, jq(0), n, lease)
		if err != nil || len(jobs) != n {
			t.Fatalf("claim %d: %v %v", n, jobs, err)
		}
		byID := map[string]Claimed{}
		for _, j := range jobs {
			byID[j.ID] = j
		}
		return byID
	}

	// The reaper: two of three jobs of an expired batch had a cancel
	// pending.
	enqueueOK(t, p, 1, positioned(0, 0, item("plain", ""), item("grouped", "grp"), item("kept", "")), now)
	held := claim(3, 50*time.Millisecond)
	requestCancel(held["plain"])
	requestCancel(held["grouped"])
	var returned int
	testenv.WaitFor(t, 5*time.Second, "the batch to expire and be reaped", func() bool {
		n, _, err := p.Reap(ctx, jq(0), 10, DeadLimits{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		returned += n
		return returned > 0
	})
	if returned != 1 {
		t.Fatalf("the reap took %d jobs back, want 1 (kept)", returned)
	}
	for _, id := range []string{"plain", "grouped"} {
		if w := where(held[id]); w != WhereCancelled {
			t.Fatalf("%s, its cancel pending when its batch expired: %s, want %s", id, w, WhereCancelled)
		}
	}
	if st, err := p.GroupStatus(ctx, "jobs", "grp"); err != nil || st.Cancelled != 1 || st.Running != 0 {
		t.Fatalf("the group of the cancelled job: %+v %v", st, err)
	}
	if n, _ := r.Client().Exists(ctx, k.Cancels()).Result(); n != 0 {
		t.Fatal("the cancel requests outlived the reap")
	}
	again := claim(1, time.Minute)
	if j, ok := again["kept"]; !ok || j.Attempt != 2 {
		t.Fatalf("claimed after the reap: %+v, want kept at attempt 2", again)
	}
	if inflight, _ := r.Client().HGet(ctx, k.Stats(), "inflight").Int(); inflight != 1 {
		t.Fatalf("inflight %d, want 1 (kept, claimed again)", inflight)
	}

	// A lease still kept: the reaper leaves its pending cancel alone, even
	// when asked to reap the batch.
	requestCancel(again["kept"])
	if n, _, err := p.reapBatches(ctx, jq(0), []string{again["kept"].Batch}, DeadLimits{}, nil); err != nil || n != 0 {
		t.Fatalf("a reap of a kept lease: %d %v", n, err)
	}
	if w := where(again["kept"]); w != WhereRunning {
		t.Fatalf("a job whose lease is kept, its cancel pending: %s, want %s", w, WhereRunning)
	}

	// A release: the job with a pending cancel is settled cancelled, the
	// other goes back.
	enqueueOK(t, p, 1, positioned(0, 3, item("left", "")), now)
	left := claim(1, time.Minute)["left"]
	n, err := p.Release(ctx, jq(0), []Claimed{again["kept"], left})
	if err != nil || n != 1 {
		t.Fatalf("release: %d %v, want 1 back", n, err)
	}
	if w := where(again["kept"]); w != WhereCancelled {
		t.Fatalf("released with its cancel pending: %s, want %s", w, WhereCancelled)
	}
	if w := where(left); w != WhereReady {
		t.Fatalf("released without a cancel: %s, want %s", w, WhereReady)
	}
}
