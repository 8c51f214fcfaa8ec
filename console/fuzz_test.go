package console

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/scaling"
)

// FuzzAdminDecoders: the admin API's decoders of operator input (scale
// pins from Consul, DLQ ids and cursors from query strings) never panic,
// and what they accept reads back the same.
func FuzzAdminDecoders(f *testing.F) {
	for _, s := range []string{`{"workers":3,"at":"2026-11-21T19:00:00Z","by":"x"}`, "0:17", "0:1,2:5", "1763751600000:jobs:01KA", "1763751600000:01KA", "", ":", "-1:2", "5:a.b:c:d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := scaling.ParsePin([]byte(s)); err == nil {
			b, _ := json.Marshal(p)
			if q, err := scaling.ParsePin(b); err != nil || q.Workers != p.Workers || !q.At.Equal(p.At) || q.By != p.By {
				t.Fatalf("pin %q: %+v re-reads as %+v, %v", s, p, q, err)
			}
		}
		// The ids and cursors read back as the API writes them (kafkaEntry's
		// id, kafkaList's and deadList's next_cursor).
		if p, off, err := parseKafkaID(s); err == nil {
			f := fmt.Sprintf("%d:%d", p, off)
			if q, qoff, err := parseKafkaID(f); err != nil || q != p || qoff != off {
				t.Fatalf("kafka id %q: %d:%d re-reads from %q as %d:%d, %v", s, p, off, f, q, qoff, err)
			}
		}
		if m, err := parseKafkaCursor(s); err == nil {
			var pairs []string
			for p, off := range m {
				pairs = append(pairs, fmt.Sprintf("%d:%d", p, off))
			}
			f := strings.Join(pairs, ",")
			if n, err := parseKafkaCursor(f); err != nil || !maps.Equal(n, m) {
				t.Fatalf("kafka cursor %q: %v re-reads from %q as %v, %v", s, m, f, n, err)
			}
		}
		if c, err := parseDeadCursor(s); err == nil && s != "" {
			f := c.String()
			if c2, err := parseDeadCursor(f); err != nil || c2 != c {
				t.Fatalf("dead cursor %q: %+v re-reads from %q as %+v, %v", s, c, f, c2, err)
			}
		}
	})
}
