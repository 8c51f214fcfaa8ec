package coordinator_test

import (
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice/coordinator"
)

// FuzzAdminDecoders: the admin API's decoders of operator input (scale
// pins from Consul, DLQ ids and cursors from query strings) never panic,
// and what they accept reads back the same.
func FuzzAdminDecoders(f *testing.F) {
	for _, s := range []string{`{"workers":3,"at":"2026-11-21T19:00:00Z","by":"x"}`, "0:17", "0:1,2:5", "1763751600000:01KA", "", ":", "-1:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := coordinator.ParsePin([]byte(s)); err == nil {
			b, _ := json.Marshal(p)
			if q, err := coordinator.ParsePin(b); err != nil || q.Workers != p.Workers || !q.At.Equal(p.At) || q.By != p.By {
				t.Fatalf("pin %q: %+v re-reads as %+v, %v", s, p, q, err)
			}
		}
		if p, off, err := coordinator.ParseKafkaID(s); err == nil && (p < 0 || off < 0) {
			t.Fatalf("kafka id %q: %d:%d", s, p, off)
		}
		if m, err := coordinator.ParseKafkaCursor(s); err == nil {
			for p, off := range m {
				if p < 0 || off < 0 {
					t.Fatalf("kafka cursor %q: %v", s, m)
				}
			}
		}
		if ms, id, err := coordinator.ParseDeadCursor(s); err == nil && s != "" && (ms < 0 || id == "") {
			t.Fatalf("dead cursor %q: %d %q", s, ms, id)
		}
	})
}
