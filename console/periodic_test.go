package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/periodic"
)

// TestAdminPeriodic: a schedule is created, read with its next slots,
// paused, resumed, run now and deleted through the API; a bad one is a 400
// that names the field, and Consul keeps the last good one.
func TestAdminPeriodic(t *testing.T) {
	b := newBed(t, 2)
	c := b.start(t, "c1", nil)
	if code, _ := c.call(t, "GET", "/api/v1/periodic/nightly", adminToken, nil); code != 404 {
		t.Errorf("no schedule: %d", code)
	}
	s := periodic.Schedule{Cron: "0 0 3 * * *", Timezone: "Europe/Berlin", Topic: "jobs", Type: "report", CatchUp: 2}
	var st admin.PeriodicState
	c.must(t, "PUT", "/api/v1/periodic/nightly", s, &st)
	if st.Schedule == nil || st.Schedule.Cron != s.Cron || len(st.Next) != 3 {
		t.Fatalf("after set: %+v", st)
	}
	if h := st.Next[0].In(mustLoad(t, "Europe/Berlin")).Hour(); h != 3 || !st.Next[1].After(st.Next[0]) {
		t.Errorf("next slots %v: want 03:00 Berlin, rising", st.Next)
	}
	pair, _, err := b.consul.Client().KV().Get("sluice/test/periodic/nightly", nil)
	if err != nil || pair == nil {
		t.Fatal(pair, err)
	}
	if _, err := periodic.Parse("nightly", pair.Value); err != nil {
		t.Fatalf("Consul holds what the scheduler refuses: %s: %v", pair.Value, err)
	}

	code, body := c.call(t, "PUT", "/api/v1/periodic/nightly", adminToken, periodic.Schedule{Every: job.Duration(time.Millisecond), Topic: "jobs", Type: "report"})
	if code != 400 || !strings.Contains(string(body), "every") {
		t.Errorf("a bad schedule: %d %s", code, body)
	}
	// A topic no relay registered is refused, naming the topics there are
	// (issue 32: a typo used to pass, then fail on every slot).
	typo := s
	typo.Topic = "jbos"
	code, body = c.call(t, "PUT", "/api/v1/periodic/nightly", adminToken, typo)
	if code != 400 || !strings.Contains(string(body), `topic \"jbos\": no relay of this stage relays it (its topics: jobs)`) {
		t.Errorf("an unknown topic: %d %s", code, body)
	}
	c.must(t, "GET", "/api/v1/periodic/nightly", nil, &st)
	if st.Schedule == nil || st.Schedule.Cron != s.Cron || st.Schedule.Topic != "jobs" {
		t.Errorf("the last good schedule is gone: %+v", st)
	}
	if code, _ := c.call(t, "PUT", "/api/v1/periodic/nightly", readToken, s); code != 403 {
		t.Errorf("a read token changed a schedule: %d", code)
	}

	c.must(t, "POST", "/api/v1/periodic/nightly/pause", nil, &st)
	if !st.Schedule.Paused || len(st.Next) != 0 {
		t.Errorf("paused: %+v", st)
	}
	c.must(t, "POST", "/api/v1/periodic/nightly/resume", nil, &st)
	if st.Schedule.Paused || len(st.Next) != 3 {
		t.Errorf("resumed: %+v", st)
	}
	c.must(t, "POST", "/api/v1/periodic/nightly/run-now", nil, &st)
	first := st.Schedule.RunNow
	c.must(t, "POST", "/api/v1/periodic/nightly/run-now", nil, &st)
	if first == "" || st.Schedule.RunNow == first {
		t.Errorf("each run-now needs a nonce of its own: %q then %q", first, st.Schedule.RunNow)
	}

	var list admin.PeriodicList
	c.must(t, "GET", "/api/v1/periodic", nil, &list)
	if len(list.Schedules) != 1 || list.Schedules[0].Name != "nightly" {
		t.Errorf("list: %+v", list)
	}
	c.must(t, "DELETE", "/api/v1/periodic/nightly", nil, nil)
	if code, _ := c.call(t, "GET", "/api/v1/periodic/nightly", adminToken, nil); code != 404 {
		t.Errorf("after delete: %d", code)
	}
	if code, _ := c.call(t, "PUT", "/api/v1/periodic/a%2Fb", adminToken, s); code != 400 {
		t.Errorf("a name with '/': %d", code)
	}
}

func mustLoad(t *testing.T, zone string) *time.Location {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
