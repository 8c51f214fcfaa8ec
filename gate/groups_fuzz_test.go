package gate

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzGroupBody: whatever the body, reading a bulk group's fields and items
// never panics or loops, every item it yields is valid JSON and within its
// limit (the JSON form reads each through a bound), and an error ends the
// items.
//
//	go test ./gate -run '^$' -fuzz FuzzGroupBody -fuzztime 30s
func FuzzGroupBody(f *testing.F) {
	for _, seed := range []struct{ ctype, body string }{
		{"application/json", `{"id":"g","type":"t","items":[1,{"a":[2]},"x",null]}`},
		{"application/json", `{"type":"t","items":[1],"after":2}`},
		{"application/json", `{"type":"t","items":[1,`},
		{"application/x-ndjson", "{\"type\":\"t\"}\n1\n\n{\"a\":1}\n{bad\n"},
		{"application/x-ndjson", ""},
		{"", `{"items":{}}`},
		{"application/json", `{"type":"t","junk":"` + strings.Repeat("a", 2<<10) + `","items":[1]}`},
		{"application/json", `{"type":"t","items":[1,   "` + strings.Repeat("a", 2<<10) + `"]}`},
	} {
		f.Add(seed.ctype, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		r := httptest.NewRequest("POST", "/v1/topics/jobs/groups", bytes.NewReader(body))
		r.Header.Set("Content-Type", ctype)
		items, _, err := openGroupBody(r, 1<<10)
		if err != nil {
			return
		}
		for n := 0; ; n++ {
			if n > len(body) {
				t.Fatalf("%d items from a %d-byte body", n, len(body))
			}
			item, err := items.next()
			if err == io.EOF || err != nil {
				return
			}
			if !json.Valid(item) {
				t.Fatalf("item %d is not JSON: %q", n, item)
			}
			if len(item) > 1<<10+boundSlack {
				t.Fatalf("item %d: %d bytes, past the limit and its slack", n, len(item))
			}
		}
	})
}
