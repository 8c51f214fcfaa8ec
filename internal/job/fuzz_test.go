package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
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
	f.Add([]byte(`{"type":"t","id":"c","id_given":false,"retain":"720h","group":"g"}`))
	f.Add([]byte(`{"type":"t","id_given":true,"retain":86400.5}`))
	f.Add([]byte(`{"type":"t","id_given":"yes","retain":"1h"}`))
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
		clientID, clientGroup := j.ID, j.Group
		j.Defaults("jobs", now)
		// id_given says whether the client chose the id, whatever it sent;
		// an absent group stays absent, and the key falls back to the id.
		if j.IDGiven != (clientID != "") || j.Group != clientGroup || (clientGroup == "" && j.KafkaKey() != j.ID) {
			t.Fatalf("Defaults: id %q group %q -> %+v", clientID, clientGroup, j)
		}
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
		s := NewStream(data)
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

// strictStdlibDecode is the reference: encoding/json with unknown fields
// refused and nothing after the object. A document that is just null is
// refused too: encoding/json leaves the job unset, but a job must be an
// object (testdata/fuzz holds the case).
func strictStdlibDecode(data []byte) (*Job, error) {
	if bytes.Equal(bytes.Trim(data, " \t\r\n"), []byte("null")) {
		return nil, errors.New("null: want a job object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j Job
	if err := dec.Decode(&j); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the object: %v", err)
	}
	return &j, nil
}

// keysMatchExactly reports whether every top-level key of data is a field
// name as written: encoding/json also accepts "Type" for "type"; we do not.
func keysMatchExactly(data []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return true
	}
	known := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Job]()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		known[name] = true
	}
	for k := range m {
		if !known[k] {
			return false
		}
	}
	return true
}

// FuzzDecodeMatchesEncodingJSON holds the hand-written parser to
// encoding/json: it accepts what encoding/json accepts (but for the case of
// field names) and decodes it to the same job; it reports a syntax error
// exactly when encoding/json finds the input malformed, pointing at a byte
// of the input.
// Run longer with: go test ./internal/job -run '^$' -fuzz FuzzDecodeMatchesEncodingJSON -fuzztime 5m
func FuzzDecodeMatchesEncodingJSON(f *testing.F) {
	for _, p := range trickyPayloads {
		f.Add([]byte(`{"type":"t","payload":` + p + `}`))
	}
	for _, s := range []string{
		`{"type":"t","timeout":"1s","run_at":"2026-01-01T00:00:00Z","priority":3,"group_total":5,"max_attempts":null}`,
		`{"type":"t","id_given":true,"retain":"720h"}`, `{"type":"t","id_given":false,"retain":3600}`,
		`{"type":"t","id_given":null,"retain":null}`, `{"type":"t","id_given":"true"}`, `{"type":"t","id_given":1}`,
		`{"type":"t","id_given":tru}`, `{"type":"t","id_given":f}`, `{"type":"t","id_given":[true]}`,
		`{"type":"t","retain":"forever"}`, `{"type":"t","retain":-1}`, `{"type":"t","retain":{}}`,
		`{"type":"a\u00e9\ud83d\ude00\ud800x","id":"\"q\"","group":"\/"}`,
		`{"Type":"t"}`, `{"type":"t","type":"u"}`, `{"type":1}`, `{"priority":1.5}`, `{"priority":1e2}`,
		`{"type":"t","run_at":"yesterday"}`, `{"type":"t","timeout":-3}`, `{"type":"t"} `, `{"type":"t"}x`,
		`{"payload":[1,{"a":[true,false,null]}],"type":"t"}`, `[]`, `"x"`, `{"type":"t",}`, `{"type":"\x01"}`,
		"{\"type\":\"t\xff\"}", `{"type":"t","payload":-0.5e+10}`, `{"type":"t","payload":01}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mine, err := Decode(data)
		std, stdErr := strictStdlibDecode(data)
		if err == nil {
			if stdErr != nil {
				t.Fatalf("Decode accepts %q, encoding/json rejects it: %v", data, stdErr)
			}
			// encoding/json keeps the payload's bytes too (RawMessage).
			if !reflect.DeepEqual(mine, std) {
				t.Fatalf("Decode(%q):\n got %+v\nwant %+v", data, *mine, *std)
			}
			return
		}
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("Decode(%q) returned %T", data, err)
		}
		if de.Offset < 0 || de.Offset > int64(len(data)) {
			t.Fatalf("Decode(%q): offset %d outside the input", data, de.Offset)
		}
		if json.Valid(data) == de.Syntax() {
			t.Fatalf("Decode(%q): syntax error %v, but json.Valid says %v (encoding/json: %v)", data, de.Syntax(), json.Valid(data), stdErr)
		}
		if stdErr == nil && keysMatchExactly(data) {
			t.Fatalf("Decode rejects %q (%v), encoding/json accepts it", data, err)
		}
	})
}
