package job

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"
)

// FuzzDecode: no input crashes the decoder, and every envelope it accepts
// survives AppendJSON and Decode unchanged, payload bytes included.
// Run longer with: go test ./internal/job -run '^$' -fuzz FuzzDecode -fuzztime 60s
func FuzzDecode(f *testing.F) {
	for _, p := range trickyPayloads {
		f.Add([]byte(`{"type":"t","payload":` + p + `}`))
	}
	f.Add([]byte(`{"type":"t","timeout":"1s","run_at":"2026-01-01T00:00:00Z","priority":3,"group_total":5}`))
	f.Add([]byte(`{"type":"t","timeout":1e308}`))
	f.Add([]byte(`{"type":"\u0000","id":"\ud800"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := Decode(data)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode returned %T %v, want *DecodeError", err, err)
			}
			return
		}
		now := time.Now()
		if j.Validate("jobs", now) != nil {
			return
		}
		payload := bytes.Clone(j.Payload)
		j.Defaults("jobs", now)
		back, err := Decode(j.AppendJSON(nil))
		if err != nil {
			t.Fatalf("Decode(AppendJSON(%+v)): %v", j, err)
		}
		if !bytes.Equal(back.Payload, payload) {
			t.Fatalf("payload changed: %q -> %q", payload, back.Payload)
		}
		// Time zones are not kept (we write RFC 3339); compare instants.
		if !back.RunAt.Equal(j.RunAt) || !back.EnqueuedAt.Equal(j.EnqueuedAt) {
			t.Fatalf("times changed: %+v -> %+v", j, back)
		}
		back.RunAt, back.EnqueuedAt, j.RunAt, j.EnqueuedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(j, back) {
			t.Fatalf("round trip changed the job:\n in %+v\nout %+v", j, back)
		}
	})
}

// FuzzStream: the batch decoder never panics and never loops.
func FuzzStream(f *testing.F) {
	f.Add([]byte(`[{"type":"a"},{"type":1},{"type":"c"}]`))
	f.Add([]byte("{\"type\":\"a\"}\n{\"x\":1}\n"))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := NewStream(bytes.NewReader(data), data)
		for i := 0; ; i++ {
			if i > len(data)+1 {
				t.Fatalf("stream yielded more items than bytes: %q", data)
			}
			_, err := s.Next()
			var ie *ItemError
			if err == nil || errors.As(err, &ie) {
				continue
			}
			if err == io.EOF {
				return
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Next returned %T %v, want *DecodeError", err, err)
			}
			return
		}
	})
}
