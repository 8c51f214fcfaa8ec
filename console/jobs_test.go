package console_test

import (
	"context"
	"net/http"
	"strconv"
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
	// A partition's running jobs: those claimed and not settled.
	if _, err := b.pool.Enqueue(context.Background(), 1, []queue.Item{{ID: "run-me", Topic: "jobs", Weight: 1, Envelope: []byte(`{"type":"t"}`)}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	claimed := b.claimAll(t, "jobs")
	var list queue.JobList
	part := b.layout.QueueOf("jobs", "", "run-me").Part
	c.must(t, "GET", "/api/v1/jobs?topic=jobs&partition="+strconv.Itoa(part), nil, &list)
	if len(claimed) != 1 || len(list.Running) != 1 || list.Running[0].ID != "run-me" || list.Topic != "jobs" || list.Partition != part {
		t.Fatalf("jobs of partition %d with %d claimed: %+v", part, len(claimed), list)
	}
	if code, body := c.call(t, "GET", "/api/v1/jobs?topic=jobs&partition=99", adminToken, nil); code != http.StatusBadRequest {
		t.Fatalf("a partition out of range: %d %s", code, body)
	}
}
