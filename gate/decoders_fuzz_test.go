package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
)

// fuzzNow is the clock of the decoders' fuzz targets: run_at and the like
// are checked against it.
var fuzzNow = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// FuzzJobBody: the single-job route's decoding as serveJob runs it (the
// body read under its limit, the envelope decoded, then checked): whatever
// the body, nothing panics, a body over the limit is a 413 read no
// further, a refusal carries a message, and a job it accepts encodes to
// JSON that carries its payload byte for byte.
//
//	go test ./gate -run '^$' -fuzz FuzzJobBody -fuzztime 30s
func FuzzJobBody(f *testing.F) {
	for _, s := range []string{
		`{"type":"email","payload":{"to":"a@b"}}`,
		`{"id":"x1","type":"t","group":"g","tenant":"t","resource":"r","priority":2,"payload":"<&>","idempotency_key":"k","max_attempts":3,"timeout":"30s","run_at":"2026-11-27T13:00:00Z","retain":"1h"}`,
		`{"type":"t","payload":null,"callback_url":"https://example.com/x"}`,
		`{"type":"t","payload":1e400}`,
		`{"type":"t","unknown":1}`,
		`[]`, ``, `{"type":"t"`, "{\"type\":\"\\ud800\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const limit = 2 << 10
		w := httptest.NewRecorder()
		x := &exchange{w: w, r: httptest.NewRequest(http.MethodPost, "/v1/topics/jobs/jobs", bytes.NewReader(body))}
		b, ok := x.readBody(limit)
		if !ok {
			if len(body) <= limit || w.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("a %d-byte body (limit %d) refused with %d: %s", len(body), limit, w.Code, w.Body)
			}
			return
		}
		if len(body) > limit {
			t.Fatalf("a %d-byte body read whole (limit %d)", len(body), limit)
		}
		j, err := job.Decode(b)
		if err != nil {
			if decodeErrorBody(err).Error == "" {
				t.Fatalf("refused without a message: %#v", err)
			}
			return
		}
		if err := j.Validate("jobs", fuzzNow); err != nil {
			if decodeErrorBody(err).Error == "" {
				t.Fatalf("refused without a message: %#v", err)
			}
			return
		}
		j.Defaults("jobs", fuzzNow)
		out := j.AppendJSON(nil)
		if !json.Valid(out) {
			t.Fatalf("accepted job encodes to invalid JSON: %q", out)
		}
		if !bytes.Contains(out, j.Payload) {
			t.Fatalf("payload %q not kept byte for byte in %q", j.Payload, out)
		}
	})
}

// FuzzBatchBody: the batch route's decoding (a JSON array or NDJSON of
// jobs) as serveBatch runs it: whatever the body, nothing panics or loops,
// a bad item is refused on its own with a message, a syntax error ends the
// body with a message, and an accepted job encodes to valid JSON.
//
//	go test ./gate -run '^$' -fuzz FuzzBatchBody -fuzztime 30s
func FuzzBatchBody(f *testing.F) {
	for _, s := range []string{
		`[{"type":"a","payload":1},{"type":"b","payload":{"x":[1,2]}}]`,
		"{\"type\":\"a\"}\n{\"type\":\"b\",\"payload\":\"x\"}\n\n",
		`[{"type":"a"},{"bad":1},{"type":"c"}]`,
		"{\"type\":\"a\"}\n{bad\n{\"type\":\"c\"}\n",
		`[{"type":"a"},`, `[]`, ``, ` [ ] `, `[1,"x",null]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		stream := job.NewStream(body)
		for n := 0; ; n++ {
			if n > len(body)+1 {
				t.Fatalf("%d items from a %d-byte body", n, len(body))
			}
			j, err := stream.Next()
			if err == io.EOF {
				return
			}
			var itemErr *job.ItemError
			if errors.As(err, &itemErr) {
				if r := rejectedItem(n, itemErr.Err); r.Status != http.StatusBadRequest || r.Error == "" {
					t.Fatalf("item %d refused as %+v", n, r)
				}
				continue
			}
			if err != nil {
				if decodeErrorBody(err).Error == "" {
					t.Fatalf("body refused without a message: %#v", err)
				}
				return
			}
			if err := j.Validate("jobs", fuzzNow); err != nil {
				if r := rejectedItem(n, err); r.Error == "" {
					t.Fatalf("item %d refused without a message: %#v", n, err)
				}
				continue
			}
			j.Defaults("jobs", fuzzNow)
			if out := j.AppendJSON(nil); !json.Valid(out) {
				t.Fatalf("item %d encodes to invalid JSON: %q", n, out)
			}
		}
	})
}
