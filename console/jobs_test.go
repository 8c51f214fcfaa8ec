package console_test

import (
	"net/http"
	"testing"

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
}
