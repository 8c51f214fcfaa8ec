package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
)

// FindJob tells every state a job can be in, from what Redis holds: on its
// lane (a group's, or a shared one), in a claimed batch, delayed for each
// reason, dead, done with its record, and, by its Kafka position, still in
// Kafka or relayed and gone without a record.
func TestFindJobTellsEveryState(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	find := func(id, group string) JobWhereabouts {
		t.Helper()
		w, err := p.FindJob(ctx, JobLookup{Topic: "jobs", ID: id, Group: group})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	limits := DeadLimits{Max: 10, Keep: time.Hour}
	later := now.Add(time.Hour)
	runAt := item("at", "")
	runAt.RunAt = later
	runAt.Envelope = (&job.Job{ID: "at", Type: "t", Topic: "jobs", RunAt: later}).AppendJSON(nil)
	enqueueOK(t, p, 1, positioned(0, 0, item("g1", "grp"), item("s1", ""), item("run", ""), item("retry", ""),
		item("defer", ""), item("dies", ""), item("kept", ""), item("plain", ""), runAt), now)

	if w := find("g1", "grp"); w.Where != WhereReady || w.Why != LaneOf("grp", "", "jobs", 0) || w.Attempts != 0 {
		t.Fatalf("a group's ready job: %+v", w)
	}
	if w := find("s1", ""); w.Where != WhereReady || !strings.HasPrefix(w.Why, "q/jobs/") {
		t.Fatalf("a ready job on a shared lane: %+v", w)
	}
	if w := find("at", ""); w.Where != WhereDelayed || w.Why != DelayRunAt || !w.Until.Equal(later) {
		t.Fatalf("a job with run_at: %+v", w)
	}

	// The lease's deadline is Redis's clock (this host's) plus the lease.
	before := time.Now().Truncate(time.Millisecond)
	jobs, err := p.Claim(ctx, jq(0), 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	byID := map[string]Claimed{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	if w := find("run", ""); w.Where != WhereRunning || w.Batch != byID["run"].Batch || w.Until.Before(before.Add(time.Minute)) || w.Until.After(after.Add(time.Minute)) || w.Attempts != 1 {
		t.Fatalf("a running job: %+v", w)
	}
	failedAt := time.Now()
	if res, err := p.Fail(ctx, jq(0), Failure{Job: byID["retry"], Cause: "boom", NextTry: later}, now, limits); res != FailRetrying || err != nil {
		t.Fatal(res, err)
	}
	if w := find("retry", ""); w.Where != WhereDelayed || w.Why != DelayRetry || w.LastError != "boom" || w.Attempts != 1 || !dueAfter(w.Until, later.Sub(now), failedAt) {
		t.Fatalf("a retrying job: %+v", w)
	}
	if ok, err := p.Defer(ctx, jq(0), byID["defer"], later, now); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if w := find("defer", ""); w.Where != WhereDelayed || w.Why != DelayDefer || w.Attempts != 0 {
		t.Fatalf("a deferred job: %+v", w)
	}
	if res, err := p.Fail(ctx, jq(0), Failure{Job: byID["dies"], Cause: "fatal"}, now, limits); res != FailDead || err != nil {
		t.Fatal(res, err)
	}
	if w := find("dies", ""); w.Where != WhereDead || w.LastError != "fatal" || w.Attempts != 1 {
		t.Fatalf("a dead job: %+v", w)
	}
	if _, err := p.AckMany(ctx, jq(0), []Done{{Job: byID["kept"], Result: []byte(`"ok"`), Retain: time.Hour}, {Job: byID["plain"]}}, now, time.Hour); err != nil {
		t.Fatal(err)
	}
	if w := find("kept", ""); w.Where != WhereDone || w.Result != `"ok"` || !w.Until.Equal(now) {
		t.Fatalf("a done job kept with retain: %+v", w)
	}
	// A plain job acked leaves nothing: its Kafka position says it was
	// relayed; a position above the watermark, that it is still in Kafka.
	plain := JobLookup{Topic: "jobs", ID: "plain", HasPosition: true, KafkaPartition: 0, Offset: 7}
	if w, err := p.FindJob(ctx, plain); err != nil || w.Where != WhereNotFound || !w.Relayed {
		t.Fatalf("a plain job done: %+v %v", w, err)
	}
	plain.ID, plain.Offset = "later", 100
	if w, err := p.FindJob(ctx, plain); err != nil || w.Where != WhereInKafka {
		t.Fatalf("a job above the watermark: %+v %v", w, err)
	}
	plain.KafkaPartition = 5 // no record of this Kafka partition relayed at all
	if w, err := p.FindJob(ctx, plain); err != nil || w.Where != WhereInKafka {
		t.Fatalf("a job of a Kafka partition never relayed: %+v %v", w, err)
	}
}

// ListJobs lists the running jobs (unsettled places of claimed batches)
// and the delayed ones with why they wait.
func TestListJobs(t *testing.T) {
	p, _ := onePartition(t)
	ctx := context.Background()
	later := now.Add(time.Hour)
	enqueueOK(t, p, 1, positioned(0, 0, item("a", ""), item("b", ""), item("c", ""), item("d", "")), now)
	jobs, err := p.Claim(ctx, jq(0), 4, time.Minute)
	if err != nil || len(jobs) != 4 {
		t.Fatal(jobs, err)
	}
	byID := map[string]Claimed{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	ack(t, p, 0, byID["a"])
	failedAt := time.Now()
	if res, err := p.Fail(ctx, jq(0), Failure{Job: byID["b"], Cause: "x", NextTry: later}, now, DeadLimits{Max: 10, Keep: time.Hour}); res != FailRetrying || err != nil {
		t.Fatal(res, err)
	}
	if ok, err := p.Defer(ctx, jq(0), byID["c"], later.Add(time.Second), now); !ok || err != nil {
		t.Fatal(ok, err)
	}
	running, _, _, err := p.listState(ctx, jq(0), WhereRunning, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	delayed, _, _, err := p.listState(ctx, jq(0), WhereDelayed, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != 1 || running[0].ID != "d" || running[0].Batch != byID["d"].Batch || running[0].Attempts != 1 {
		t.Fatalf("running: %+v", running)
	}
	if len(delayed) != 2 || delayed[0].ID != "b" || delayed[0].Why != DelayRetry || delayed[1].ID != "c" || delayed[1].Why != DelayDefer ||
		!dueAfter(delayed[0].Until, later.Sub(now), failedAt) {
		t.Fatalf("delayed: %+v", delayed)
	}
}

// A pool with an Owner names its batches after it and their claim time,
// and a lookup of a job it claimed says who holds it, since when.
func TestFindJobNamesTheWorker(t *testing.T) {
	_, r := onePartition(t)
	claimedAt := now.Add(-time.Minute)
	p, err := NewPool(PoolConfig{Keyspace: Keyspace{Stage: "test", Partitions: 1}, Addr: r.Addr(), Owner: "host a/42~x",
		Now: func() time.Time { return claimedAt }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	if err := p.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	enqueueOK(t, p, 1, []Item{item("held", "")}, now)
	jobs, err := p.Claim(ctx, jq(0), 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatal(jobs, err)
	}
	w, err := p.FindJob(ctx, JobLookup{Topic: "jobs", ID: "held"})
	if err != nil || w.Where != WhereRunning || w.Worker != "host_a/42_x" || !w.Since.Equal(claimedAt) || !strings.Contains(w.View(JobLookup{}).Note, "host_a/42_x") {
		t.Fatalf("a held job: %+v %v", w, err)
	}
	if running, _, _, err := p.listState(ctx, jq(0), WhereRunning, 0, 10); err != nil || len(running) != 1 || running[0].Worker != "host_a/42_x" || !running[0].Since.Equal(claimedAt) {
		t.Fatalf("listed: %+v %v", running, err)
	}
}

func TestGlobEscape(t *testing.T) {
	if got := globEscape(`a*b?[c]\d`); got != `a\*b\?\[c\]\\d` {
		t.Fatalf("globEscape = %q", got)
	}
}

// dueAfter reports whether a retry's due time is delay after the failure by
// Redis's clock: the failure was sent at from, by this machine's clock,
// which Redis shares; the script ran between from and now.
func dueAfter(due time.Time, delay time.Duration, from time.Time) bool {
	// Redis's TIME is read in ms: allow the truncation below from.
	return !due.Before(from.Add(delay-time.Millisecond)) && !due.After(time.Now().Add(delay))
}
