package periodic

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzParse: the periodic schedule parser (a schedule's JSON as Consul
// keeps it and the admin API takes it): whatever the name and value,
// nothing panics; a schedule it accepts has slots strictly after any time
// (or none: a cron that never matches), a job the gate would take for each,
// and reads back the same from its own encoding.
//
//	go test ./internal/periodic -run '^$' -fuzz FuzzParse -fuzztime 30s
func FuzzParse(f *testing.F) {
	for _, s := range []struct{ name, value string }{
		{"report", `{"cron":"0 30 9 * * MON-FRI","timezone":"Europe/Paris","topic":"jobs","type":"report"}`},
		{"tick", `{"every":"15m","topic":"jobs","type":"t","catch_up":3,"grace":"2m"}`},
		{"daily", `{"cron":"@daily","topic":"jobs","type":"t","payload":{"a":[1,2]},"run_now":"n1"}`},
		{"feb30", `{"cron":"0 0 0 30 2 *","topic":"jobs","type":"t"}`},
		{"every", `{"cron":"@every 90s","topic":"jobs","type":"t"}`},
		{"both", `{"cron":"* * * * *","every":"1m","topic":"jobs","type":"t"}`},
		{"tz", `{"cron":"CRON_TZ=Asia/Tokyo 0 9 * * *","topic":"jobs","type":"t"}`},
		{"huge", `{"every":"2562047h","topic":"jobs","type":"t"}`},
		{"bad name!", `{}`},
	} {
		f.Add(s.name, []byte(s.value))
	}
	at := []time.Time{time.Unix(0, 0).UTC(), time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC), time.Date(2099, 12, 31, 23, 59, 59, 0, time.UTC)}
	f.Fuzz(func(t *testing.T, name string, value []byte) {
		p, err := Parse(name, value)
		if err != nil {
			return
		}
		for _, now := range at {
			next := p.Next(now)
			if !next.IsZero() && !next.After(now) {
				t.Fatalf("%s: next slot after %s is %s", value, now, next)
			}
			if next.IsZero() {
				continue
			}
			if j := p.Job(next); j.Validate(p.Topic, now) != nil {
				err := j.Validate(p.Topic, now)
				t.Fatalf("%s: the slot %s makes a job the gate refuses: %v", value, next, err)
			}
			_ = p.Plan(now.Add(-time.Hour), now)
		}
		b, err := json.Marshal(p.Schedule)
		if err != nil {
			t.Fatalf("%s: does not encode: %v", value, err)
		}
		q, err := Parse(name, b)
		if err != nil {
			t.Fatalf("%s: re-encoded as %s, refused: %v", value, b, err)
		}
		for _, now := range at {
			if a, b := p.Next(now), q.Next(now); !a.Equal(b) {
				t.Fatalf("%s: next after %s is %s, %s once re-encoded", value, now, a, b)
			}
		}
	})
}
