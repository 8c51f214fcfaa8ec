package scenario

import "testing"

// The acks level reaches every request's URL, on both routes, and no
// level leaves the URL to the gate's default.
func TestLoadURLCarriesTheAcksLevel(t *testing.T) {
	for _, c := range []struct {
		acks  string
		batch int
		want  string
	}{
		{"", 1, "http://g/v1/topics/jobs/jobs"},
		{"leader", 1, "http://g/v1/topics/jobs/jobs?acks=leader"},
		{"all", 100, "http://g/v1/topics/jobs/jobs:batch?acks=all"},
	} {
		l := &Load{Gate: "http://g/", Topic: "jobs", Acks: c.acks, Batch: c.batch}
		if got := l.url(); got != c.want {
			t.Errorf("acks %q batch %d: %s, want %s", c.acks, c.batch, got, c.want)
		}
	}
}
