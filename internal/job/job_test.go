package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Payloads that encoding/json would change on a decode/encode round trip.
var trickyPayloads = []string{
	`{"html":"<b>a & b</b>","slash":"a\/b","uni":"\u00e9\u2028","big":12345678901234567890123}`,
	`{ "spaced" :  [ 1 , 2 ] ,
	  "nl": true }`,
	`"just a string with \"quotes\" and \\ backslash"`,
	`123456789012345678901234567890.000000000000000000001e-5`,
	`[1,"<script>",{"a":null}]`,
	`null`,
	`"\ud83d\ude00 \u0000"`,
}

func TestPayloadRoundTripsByteForByte(t *testing.T) {
	for _, p := range trickyPayloads {
		body := `{"type":"email","payload":` + p + `}`
		j, err := Decode([]byte(body))
		if err != nil {
			t.Fatalf("Decode(%s): %v", body, err)
		}
		if !bytes.Equal(j.Payload, []byte(p)) {
			t.Fatalf("payload changed on decode:\n got %s\nwant %s", j.Payload, p)
		}
		j.Defaults("jobs", time.Now())
		again, err := Decode(j.AppendJSON(nil))
		if err != nil {
			t.Fatalf("Decode(AppendJSON): %v", err)
		}
		if !bytes.Equal(again.Payload, []byte(p)) {
			t.Fatalf("payload changed on encode:\n got %s\nwant %s", again.Payload, p)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	runAt := time.Date(2026, 11, 21, 12, 0, 0, 123456789, time.UTC)
	in := Job{
		ID: "01J0000000000000000000000A", IDGiven: true, Topic: "jobs", Type: "send\temail", Group: "g<1>",
		Tenant: "acme", Resource: "smtp", Priority: 3, Payload: json.RawMessage(`{"a":"<&>"}`),
		IdempotencyKey: "k\"1", MaxAttempts: 7, Timeout: Duration(90 * time.Second), Retain: Duration(72 * time.Hour),
		RunAt: runAt, EnqueuedAt: runAt.Add(-time.Minute), GroupTotal: 1000000,
		CallbackURL: "https://example.test/done?x=1&y=2",
	}
	enc := in.AppendJSON(nil)
	if !json.Valid(enc) {
		t.Fatalf("AppendJSON wrote invalid JSON: %s", enc)
	}
	if !bytes.Contains(enc, []byte(`"g<1>"`)) || !bytes.Contains(enc, []byte(`x=1&y=2`)) {
		t.Fatalf("AppendJSON escaped HTML characters: %s", enc)
	}
	if !bytes.Contains(enc, []byte(`"id_given":true`)) || !bytes.Contains(enc, []byte(`"retain":"72h0m0s"`)) {
		t.Fatalf("AppendJSON lacks id_given or retain: %s", enc)
	}
	out, err := Decode(enc)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !reflect.DeepEqual(&in, out) {
		t.Fatalf("round trip changed the job:\n in %+v\nout %+v", in, *out)
	}
	// encoding/json must read what we write the same way.
	var std Job
	if err := json.Unmarshal(enc, &std); err != nil || !reflect.DeepEqual(in, std) {
		t.Fatalf("encoding/json reads it differently (%v):\n in %+v\nout %+v", err, in, std)
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\"back\\slash", "ctl\x00\x01\x1f\x7f", "tab\tnl\ncr\r", "é😀", "bad\xff\xfeutf8", "<>&\u2028"} {
		got := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s: not JSON: %v", s, got, err)
		}
		std, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(std, &want)
		if back != want {
			t.Fatalf("AppendString(%q) reads back as %q, want %q", s, back, want)
		}
	}
}

func TestDurationAcceptsStringOrSeconds(t *testing.T) {
	for _, field := range []string{"timeout", "retain"} {
		for value, want := range map[string]time.Duration{
			`"1m30s"`: 90 * time.Second,
			`2.5`:     2500 * time.Millisecond,
			`30`:      30 * time.Second,
		} {
			body := `{"type":"t","` + field + `":` + value + `}`
			j, err := Decode([]byte(body))
			if err != nil {
				t.Fatalf("Decode(%s): %v", body, err)
			}
			got, other := j.Timeout, j.Retain
			if field == "retain" {
				got, other = j.Retain, j.Timeout
			}
			if time.Duration(got) != want || other != 0 {
				t.Fatalf("Decode(%s): timeout %v retain %v, want %s = %v", body, time.Duration(j.Timeout), time.Duration(j.Retain), field, want)
			}
		}
	}
}

func TestIDGivenIsABool(t *testing.T) {
	for body, want := range map[string]bool{
		`{"type":"t","id_given":true}`:  true,
		`{"type":"t","id_given":false}`: false,
		`{"type":"t","id_given":null}`:  false,
		`{"type":"t"}`:                  false,
	} {
		j, err := Decode([]byte(body))
		if err != nil {
			t.Fatalf("Decode(%s): %v", body, err)
		}
		if j.IDGiven != want {
			t.Fatalf("Decode(%s).IDGiven = %v, want %v", body, j.IDGiven, want)
		}
	}
	// Absent when false, so envelopes without a client id stay as they were.
	if enc := (&Job{Type: "t", ID: "x"}).AppendJSON(nil); bytes.Contains(enc, []byte("id_given")) {
		t.Fatalf("AppendJSON wrote id_given for a gate-assigned id: %s", enc)
	}
}

func TestDecodeErrorsSayWhatAndWhere(t *testing.T) {
	cases := []struct {
		body       string
		field      string
		inReason   string
		line, col  int
		wantOffset bool
	}{
		{body: "{\"type\":\"t\",\n  \"payload\": {\"a\": }}", inReason: "invalid character '}'", line: 2, col: 20, wantOffset: true},
		{body: `{"type":"t","priority":"high"}`, field: "priority", inReason: "want an integer, got string"},
		{body: `{"type":"t","prioirty":1}`, field: "prioirty", inReason: "unknown field"},
		{body: `{"type":"t","timeout":"soon"}`, field: "timeout", inReason: "not a duration"},
		{body: `{"type":"t","retain":"soon"}`, field: "retain", inReason: "not a duration"},
		{body: `{"type":"t","retain":true}`, field: "retain", inReason: "want a duration string"},
		{body: `{"type":"t","id_given":"true"}`, field: "id_given", inReason: "want true or false, got string"},
		{body: `{"type":"t","id_given":1}`, field: "id_given", inReason: "want true or false, got number"},
		{body: `{"type":"t","id_given":{}}`, field: "id_given", inReason: "want true or false, got object"},
		{body: `{"type":"t","id_given":tru}`, inReason: "in literal true"},
		{body: `{"type":"t"} {"type":"u"}`, inReason: "unexpected data after the job object"},
		{body: ``, inReason: "empty body"},
		{body: `{"type":"t"`, inReason: "unexpected end"},
		{body: `[{"type":"t"}]`, inReason: "want a job object, got array"},
	}
	for _, c := range cases {
		_, err := Decode([]byte(c.body))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("Decode(%q) = %v, want a *DecodeError", c.body, err)
		}
		if de.Field != c.field || !strings.Contains(de.Reason, c.inReason) {
			t.Fatalf("Decode(%q) = field %q reason %q; want field %q reason containing %q", c.body, de.Field, de.Reason, c.field, c.inReason)
		}
		if c.wantOffset && (de.Line != c.line || de.Column != c.col) {
			t.Fatalf("Decode(%q) at line %d col %d, want line %d col %d (%v)", c.body, de.Line, de.Column, c.line, c.col, err)
		}
	}
}

func TestValidate(t *testing.T) {
	now := time.Now()
	bad := map[string]string{
		`{}`:                                                               "type",
		`{"type":"has space"}`:                                             "type",
		`{"type":"t","topic":"other"}`:                                     "topic",
		`{"type":"t","id":"a\u0001b"}`:                                     "id",
		`{"type":"t","priority":10}`:                                       "priority",
		`{"type":"t","priority":-1}`:                                       "priority",
		`{"type":"t","max_attempts":101}`:                                  "max_attempts",
		`{"type":"t","timeout":"-1s"}`:                                     "timeout",
		`{"type":"t","timeout":"25h"}`:                                     "timeout",
		`{"type":"t","retain":"-1s"}`:                                      "retain",
		`{"type":"t","retain":"720h0m1s"}`:                                 "retain",
		`{"type":"t","retain":2592001}`:                                    "retain",
		`{"type":"t","callback_url":"x"}`:                                  "callback_url",
		`{"type":"t","group_total":-1}`:                                    "group_total",
		`{"type":"t","run_at":"2999-01-01T00:00:00Z"}`:                     "run_at",
		`{"type":"t","group":"` + strings.Repeat("g", MaxNameLen+1) + `"}`: "group",
	}
	for body, field := range bad {
		j, err := Decode([]byte(body))
		if err != nil {
			t.Fatalf("Decode(%s): %v", body, err)
		}
		err = j.Validate("jobs", now)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Fatalf("Validate(%s) = %v, want an error on field %q", body, err, field)
		}
	}
	for _, body := range []string{
		`{"type":"t","topic":"jobs","priority":9,"callback_url":"https://x.test/cb"}`,
		`{"type":"t","retain":"720h"}`, `{"type":"t","retain":2592000}`, `{"type":"t","retain":0}`,
		// id_given is the gate's to set: whatever the client sends is not
		// an error, Defaults overwrites it.
		`{"type":"t","id_given":true}`, `{"type":"t","id":"x","id_given":false}`,
	} {
		j, err := Decode([]byte(body))
		if err != nil {
			t.Fatalf("Decode(%s): %v", body, err)
		}
		if err := j.Validate("jobs", now); err != nil {
			t.Fatalf("Validate(%s) of a good job: %v", body, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	// No id, no group, and a client claiming id_given: the gate assigns
	// the id, so id_given is false, and the group stays absent.
	j := Job{Type: "t", IDGiven: true}
	j.Defaults("jobs", now)
	if len(j.ID) != 26 || j.IDGiven || j.Group != "" || j.Topic != "jobs" || !j.EnqueuedAt.Equal(now) || j.EnqueuedAt.Location() != time.UTC {
		t.Fatalf("Defaults gave %+v", j)
	}
	if j.KafkaKey() != j.ID {
		t.Fatalf("KafkaKey of a job without a group = %q, want its id %q", j.KafkaKey(), j.ID)
	}
	if enc := j.AppendJSON(nil); bytes.Contains(enc, []byte(`"group"`)) || bytes.Contains(enc, []byte(`id_given`)) {
		t.Fatalf("envelope of a job without a group or client id: %s", enc)
	}
	other := NewID()
	if other <= j.ID {
		t.Fatalf("ids do not sort by time: %s then %s", j.ID, other)
	}
	// A client id with id_given false: the client did choose the id.
	k := Job{Type: "t", ID: "mine", Group: "g", EnqueuedAt: now, IDGiven: false}
	k.Defaults("jobs", now.Add(time.Hour))
	if k.ID != "mine" || k.Group != "g" || !k.EnqueuedAt.Equal(now) || !k.IDGiven {
		t.Fatalf("Defaults overwrote client values or missed id_given: %+v", k)
	}
	if k.KafkaKey() != "g" {
		t.Fatalf("KafkaKey of a job with a group = %q, want the group", k.KafkaKey())
	}
	// Through the decoder too: what the client sent in id_given never counts.
	for body, want := range map[string]bool{
		`{"type":"t","id":"c1","id_given":false}`: true,
		`{"type":"t","id_given":true}`:            false,
		`{"type":"t","id":"","id_given":true}`:    false,
		`{"type":"t","id":null,"id_given":true}`:  false,
	} {
		d, err := Decode([]byte(body))
		if err != nil {
			t.Fatalf("Decode(%s): %v", body, err)
		}
		d.Defaults("jobs", now)
		back, err := Decode(d.AppendJSON(nil))
		if err != nil || back.IDGiven != want || back.Group != "" {
			t.Fatalf("%s after Defaults: id_given %v group %q (%v), want id_given %v and no group", body, back.IDGiven, back.Group, err, want)
		}
	}
}

func TestStreamArrayAndNDJSON(t *testing.T) {
	for name, body := range map[string]string{
		"array":  ` [ {"type":"a","payload":{"x":"<1>"}}, {"type":"b","priority":"x"}, {"type":"c"} ] `,
		"ndjson": "{\"type\":\"a\",\"payload\":{\"x\":\"<1>\"}}\n{\"type\":\"b\",\"priority\":\"x\"}\n\n{\"type\":\"c\"}\n",
	} {
		s := NewStream([]byte(body))
		var types []string
		var itemErrs []int
		for {
			j, err := s.Next()
			if err == io.EOF {
				break
			}
			var ie *ItemError
			if errors.As(err, &ie) {
				itemErrs = append(itemErrs, ie.Index)
				continue
			}
			if err != nil {
				t.Fatalf("%s: Next: %v", name, err)
			}
			types = append(types, j.Type)
			if j.Type == "a" && string(j.Payload) != `{"x":"<1>"}` {
				t.Fatalf("%s: payload changed: %s", name, j.Payload)
			}
		}
		if strings.Join(types, ",") != "a,c" || len(itemErrs) != 1 || itemErrs[0] != 1 || s.Count() != 3 {
			t.Fatalf("%s: got types %v item errors %v count %d", name, types, itemErrs, s.Count())
		}
	}
}

func TestStreamFatalErrors(t *testing.T) {
	for body, want := range map[string]string{
		``:                         "empty body",
		`"str"`:                    "want a JSON array",
		`[{"type":"a"},{"type":`:   "unexpected end",
		`[{"type":"a"}] trailing`:  "after the array",
		"{\"type\":\"a\"}\n{oops}": "invalid character",
	} {
		s := NewStream([]byte(body))
		var err error
		for err == nil {
			_, err = s.Next()
		}
		var de *DecodeError
		if !errors.As(err, &de) || !strings.Contains(de.Error(), want) {
			t.Fatalf("stream %q ended with %v, want a DecodeError containing %q", body, err, want)
		}
	}
}

const benchEnvelope = `{"type":"email.send","group":"campaign-42","tenant":"acme","payload":{"to":"a@b.test","subject":"Hello <there>","body":"0123456789012345678901234567890123456789012345678901234567890123456789"}}`

func BenchmarkDecode(b *testing.B) {
	body := []byte(benchEnvelope)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	j, _ := Decode([]byte(`{"type":"email.send","group":"campaign-42","tenant":"acme","payload":{"to":"a@b.test","subject":"Hello <there>"}}`))
	j.Defaults("jobs", time.Now())
	buf := make([]byte, 0, 512)
	for b.Loop() {
		buf = j.AppendJSON(buf[:0])
	}
}

func TestStreamSyntaxErrorPositions(t *testing.T) {
	for body, want := range map[string][2]int{
		"{\"type\": t}":                        {1, 11},
		"{\"type\":\"a\"}\n{\"type\": t}":      {2, 11},
		"[{\"type\":\"a\"},\n  {\"type\": t}]": {2, 13},
		"[{\"type\":\"a\"} , {\"type\": t}]":   {1, 27},
	} {
		s := NewStream([]byte(body))
		var err error
		for err == nil {
			_, err = s.Next()
		}
		var de *DecodeError
		if !errors.As(err, &de) || de.Line != want[0] || de.Column != want[1] {
			t.Fatalf("stream %q: %v, want line %d column %d", body, err, want[0], want[1])
		}
		if body[de.Offset] != '}' {
			t.Fatalf("stream %q: offset %d points at %q, want the '}'", body, de.Offset, body[de.Offset])
		}
	}
}

// BenchmarkDecodeStdlib is the same envelope through encoding/json, for the
// ratio in BENCHMARKS.md.
func BenchmarkDecodeStdlib(b *testing.B) {
	body := []byte(benchEnvelope)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := strictStdlibDecode(body); err != nil {
			b.Fatal(err)
		}
	}
}
