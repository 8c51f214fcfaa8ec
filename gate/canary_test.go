package gate_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/gate"
)

// Groups and types starting with "sluice." are the canaries': only a token
// with +canary may send them, and they are counted apart from user jobs.
// GET /v1/topics/{topic} tells the canary monitor the partition count.
func TestCanaryReservationAndTopicInfo(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, func(c *gate.Config) {
		c.AllowNoAuth = false
		c.Tokens = "user-token-0123456789 *; canary-token-0123456789 *,+canary"
	})
	user := []string{"Authorization", "Bearer user-token-0123456789"}
	mon := []string{"Authorization", "Bearer canary-token-0123456789"}
	jobs := g.url + "/v1/topics/jobs/jobs"
	canaryJob := `{"type":"sluice.canary","group":"sluice.canary.jobs.0.0.1","payload":{}}`
	if a := post(t, jobs, canaryJob, user...); a.status != 403 || !strings.Contains(string(a.body), "reserved") {
		t.Errorf("a user's canary: %d %s, want 403 saying reserved", a.status, a.body)
	}
	if a := post(t, jobs, `{"type":"sluice.x"}`, user...); a.status != 403 {
		t.Errorf("a user's sluice. type: %d %s", a.status, a.body)
	}
	if a := post(t, jobs+":batch", `[{"type":"t"},{"type":"t","group":"sluice.g"}]`, user...); a.status != 207 {
		t.Errorf("a batch with a reserved group: %d %s, want 207", a.status, a.body)
	}
	// Without a group, the id is what the job is keyed by: reserved too.
	if a := post(t, jobs, `{"type":"t","id":"sluice.canary.jobs.0.0.1"}`, user...); a.status != 403 {
		t.Errorf("a user's job with a canary's id and no group: %d %s, want 403", a.status, a.body)
	}
	if a := post(t, jobs, `{"type":"t","id":"sluice.x","group":"g"}`, user...); a.status != 202 {
		t.Errorf("a user's job with a sluice. id in a group of its own: %d %s, want 202", a.status, a.body)
	}
	if a := post(t, g.url+"/v1/topics/jobs/groups", `{"id":"sluice.canary.x","type":"t","items":[1]}`, user...); a.status != 403 {
		t.Errorf("a bulk group with a reserved id: %d %s", a.status, a.body)
	}
	if a := post(t, jobs+"?partition=2", canaryJob, mon...); a.status != 202 {
		t.Fatalf("the monitor's canary: %d %s", a.status, a.body)
	}
	if a := post(t, jobs, `{"type":"t"}`, mon...); a.status != 202 {
		t.Fatalf("a user job from the monitor's token: %d %s", a.status, a.body)
	}

	a := do(t, "GET", g.url+"/v1/topics/jobs", nil, user...)
	if a.status != 200 || !strings.Contains(string(a.body), `"partitions":`) {
		t.Errorf("GET topic: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", g.url+"/v1/topics/nope", nil, user...); a.status != 404 {
		t.Errorf("GET unknown topic: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", g.url+"/v1/topics/jobs", nil); a.status != 401 {
		t.Errorf("GET topic without a token: %d %s", a.status, a.body)
	}

	m := string(do(t, "GET", g.url+"/metrics", nil).body)
	for _, want := range []string{
		`sluice_gate_jobs_total{outcome="canary",topic="jobs"} 1`,
		`sluice_gate_jobs_total{outcome="accepted",topic="jobs"} 3`,
		`sluice_gate_jobs_total{outcome="rejected",topic="jobs"} 4`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
