package console_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// GET /api/v1/topics/{topic}/jobs/{id} answers the gate's lookup: a dead
// job with its last error, an unknown one as not found (200: the note is
// the answer), a bad query 400.
func TestAdminJobLookup(t *testing.T) {
	b := newBed(t, 4)
	c := b.start(t, "c1", nil)
	b.deadJob(t, "job-a", "g-job-a", "jobs", "smtp: 550 no such mailbox")
	var v queue.JobView
	c.must(t, "GET", "/api/v1/topics/jobs/jobs/job-a?group=g-job-a", nil, &v)
	if v.State != queue.WhereDead || v.LastError != "smtp: 550 no such mailbox" || v.Attempts != 1 || v.Until == nil {
		t.Fatalf("a dead job: %+v", v)
	}
	c.must(t, "GET", "/api/v1/topics/jobs/jobs/nope", nil, &v)
	if v.State != queue.WhereNotFound || v.Note == "" {
		t.Fatalf("an unknown job: %+v", v)
	}
	if code, body := c.call(t, "GET", "/api/v1/topics/jobs/jobs/x?offset=3", adminToken, nil); code != http.StatusBadRequest {
		t.Fatalf("offset without partition: %d %s", code, body)
	}
	// The topic's jobs across partitions, by state, paged.
	ctx := context.Background()
	var items []queue.Item
	for i := range 7 {
		id := "ls-" + strconv.Itoa(i)
		items = append(items, queue.Item{ID: id, Topic: "jobs", Weight: 1, Envelope: []byte(`{"id":"` + id + `","type":"t"}`)})
	}
	if _, err := b.pool.Enqueue(ctx, 1, items, time.Now()); err != nil {
		t.Fatal(err)
	}
	claimed := b.claimAll(t, "jobs") // the seven, running
	if len(claimed) != 7 {
		t.Fatalf("%d claimed", len(claimed))
	}
	if _, err := b.pool.Enqueue(ctx, 1, []queue.Item{{ID: "waits", Topic: "jobs", Weight: 1, Envelope: []byte(`{"id":"waits","type":"t"}`)}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	cursor, pages := "", 0
	for {
		var page queue.JobPage
		c.must(t, "GET", "/api/v1/jobs?topic=jobs&limit=3&cursor="+cursor, nil, &page)
		pages++
		for _, j := range page.Jobs {
			if _, dup := seen[j.ID]; dup {
				t.Fatalf("job %s listed twice", j.ID)
			}
			seen[j.ID] = j.State
		}
		if cursor = page.NextCursor; cursor == "" || pages > 20 {
			break
		}
	}
	for id := range claimed {
		if seen[id] != queue.WhereRunning {
			t.Fatalf("the listing of every state and partition: %v, want %s running", seen, id)
		}
	}
	if seen["waits"] != queue.WhereReady || seen["job-a"] != queue.WhereDead || len(seen) != 9 || pages < 3 {
		t.Fatalf("the listing of every state and partition, %d pages: %v", pages, seen)
	}
	var ready queue.JobPage
	c.must(t, "GET", "/api/v1/jobs?topic=jobs&state=ready", nil, &ready)
	if len(ready.Jobs) != 1 || ready.Jobs[0].ID != "waits" || ready.NextCursor != "" || ready.State != queue.WhereReady {
		t.Fatalf("the ready jobs: %+v", ready)
	}
	for _, bad := range []string{"partition=99", "state=sleeping", "limit=0", "cursor=x"} {
		if code, body := c.call(t, "GET", "/api/v1/jobs?topic=jobs&"+bad, adminToken, nil); code != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", bad, code, body)
		}
	}
}

// POST .../jobs/{id}/cancel and DELETE .../jobs/{id}: a ready job
// cancelled (its lookup says so), a running one's cancel requested, its
// delete refused (409), an unknown job 404, a read token refused.
func TestAdminJobCancelAndDelete(t *testing.T) {
	b := newBed(t, 2)
	c := b.start(t, "c1", nil)
	ctx := context.Background()
	if _, err := b.pool.Enqueue(ctx, 1, []queue.Item{{ID: "runs", Topic: "jobs", Weight: 1, Envelope: []byte(`{"id":"runs","type":"t"}`)}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	b.claimAll(t, "jobs")
	if _, err := b.pool.Enqueue(ctx, 1, []queue.Item{{ID: "waits", Topic: "jobs", Weight: 1, Envelope: []byte(`{"id":"waits","type":"t"}`)}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, body := c.call(t, "POST", "/api/v1/topics/jobs/jobs/waits/cancel", readToken, nil); code != http.StatusForbidden {
		t.Fatalf("a cancel with a read token: %d %s", code, body)
	}
	var ch queue.JobChange
	c.must(t, "POST", "/api/v1/topics/jobs/jobs/waits/cancel", nil, &ch)
	if ch.Was != queue.WhereReady || ch.Outcome != queue.Cancelled {
		t.Fatalf("a ready job's cancel: %+v", ch)
	}
	var v queue.JobView
	c.must(t, "GET", "/api/v1/topics/jobs/jobs/waits", nil, &v)
	if v.State != queue.WhereCancelled {
		t.Fatalf("the cancelled job's lookup: %+v", v)
	}
	if code, body := c.call(t, "DELETE", "/api/v1/topics/jobs/jobs/runs", adminToken, nil); code != http.StatusConflict || !strings.Contains(string(body), "cancel it first") {
		t.Fatalf("a running job's delete: %d %s", code, body)
	}
	c.must(t, "POST", "/api/v1/topics/jobs/jobs/runs/cancel", nil, &ch)
	if ch.Was != queue.WhereRunning || ch.Outcome != queue.CancelRequested {
		t.Fatalf("a running job's cancel: %+v", ch)
	}
	c.must(t, "DELETE", "/api/v1/topics/jobs/jobs/waits", nil, &ch)
	if ch.Was != queue.WhereCancelled || ch.Outcome != queue.Deleted {
		t.Fatalf("a cancelled job's delete: %+v", ch)
	}
	if code, body := c.call(t, "POST", "/api/v1/topics/jobs/jobs/nope/cancel", adminToken, nil); code != http.StatusNotFound {
		t.Fatalf("an unknown job's cancel: %d %s", code, body)
	}
}
