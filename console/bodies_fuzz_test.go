package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/periodic"
)

// FuzzAdminBodies: the admin API's request bodies (DLQ replay and purge,
// relay rates, execution limits, scale pins, periodic schedules), read as
// serve reads them (under maxBody, unknown fields refused): whatever the
// body, nothing panics, a refusal is a 400 with a message, and what is
// accepted reads back the same from its own encoding.
//
//	go test ./console -run '^$' -fuzz FuzzAdminBodies -fuzztime 30s
func FuzzAdminBodies(f *testing.F) {
	for _, s := range []string{
		`{"source":"redis","topic":"jobs","ids":["a","b"]}`,
		`{"source":"kafka","all":true}`,
		`{"rate":12.5,"burst":3}`, `{"unlimited":true}`,
		`{"resource":"api","rate":20,"burst":5}`,
		`{"workers":4}`, `{"auto":true}`,
		`{"cron":"0 30 9 * * MON-FRI","timezone":"Europe/Paris","topic":"jobs","type":"report","payload":{"a":1},"catch_up":2,"grace":"2m"}`,
		`{"every":"15m","topic":"jobs","type":"t","timeout":"30s","retain":"1h","paused":true,"run_now":"x1"}`,
		`{"rate":1e400}`, `{"ids":[1]}`, `{} {}`, `{"x":1}`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	bodies := []func() any{
		func() any { return new(admin.DLQAction) },
		func() any { return new(admin.RateSet) },
		func() any { return new(admin.LimitState) },
		func() any { return new(admin.ScaleSet) },
		func() any { return new(periodic.Schedule) },
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, newBody := range bodies {
			v := newBody()
			if err := decodeBody(adminRequest(body), v); err != nil {
				var e *admin.Error
				if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Message == "" {
					t.Fatalf("%T: refused as %#v", v, err)
				}
				continue
			}
			again, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%T: %+v does not encode: %v", v, v, err)
			}
			w := newBody()
			if err := decodeBody(adminRequest(again), w); err != nil {
				t.Fatalf("%T: %s (from %q) does not read back: %v", v, again, body, err)
			}
			if !reflect.DeepEqual(v, w) {
				if ps, ok := v.(*periodic.Schedule); ok && payloadOnly(ps, w.(*periodic.Schedule)) {
					continue
				}
				t.Fatalf("%T: %+v reads back from %s as %+v", v, v, again, w)
			}
		}
	})
}

// adminRequest is a request with body as serve hands it to a handler.
func adminRequest(body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPut, "/api/v1/x", bytes.NewReader(body))
	r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, maxBody)
	return r
}

// payloadOnly: a and b differ only in how their payloads are spelled
// (json.Marshal compacts and escapes a RawMessage), not in what it says.
func payloadOnly(a, b *periodic.Schedule) bool {
	var pa, pb any
	if json.Unmarshal(a.Payload, &pa) != nil || json.Unmarshal(b.Payload, &pb) != nil || !reflect.DeepEqual(pa, pb) {
		return false
	}
	x, y := *a, *b
	x.Payload, y.Payload = nil, nil
	return reflect.DeepEqual(x, y)
}
