package limits

import (
	"testing"
)

func TestParseRateKeepsThePausedRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rate
	}{
		{"500", Rate{PerSecond: 500}},
		{"paused", Rate{Paused: true}},
		{`{"paused":true}`, Rate{Paused: true}},
		{`{"paused":true,"rate":5,"burst":10}`, Rate{Paused: true, PerSecond: 5, Burst: 10}},
		{`{"rate":5}`, Rate{PerSecond: 5}},
	} {
		got, err := ParseRate([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		// What Encode writes reads back the same.
		if back, err := ParseRate(got.Encode()); err != nil || back != got {
			t.Errorf("ParseRate(Encode(%+v)) = %+v, %v", got, back, err)
		}
	}
	for _, bad := range []string{"", "0", "-1", "fast", `{"rate":0}`, `{"rate":1,"x":2}`, `{"paused":true,"rate":-1}`, `{"rate":1}{"rate":2}`} {
		if r, err := ParseRate([]byte(bad)); err == nil {
			t.Errorf("ParseRate(%q) = %+v, want an error", bad, r)
		}
	}
}

func TestParseLimitRoundTrip(t *testing.T) {
	for _, in := range []string{"10", `{"rate":2.5,"burst":3}`} {
		l, err := ParseLimit([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if back, err := ParseLimit(l.Encode()); err != nil || back != l {
			t.Errorf("ParseLimit(Encode(%+v)) = %+v, %v", l, back, err)
		}
	}
	for _, bad := range []string{"0", "2000000", `{"rate":1,"burst":-1}`, `{}`} {
		if l, err := ParseLimit([]byte(bad)); err == nil {
			t.Errorf("ParseLimit(%q) = %+v, want an error", bad, l)
		}
	}
}

// FuzzParse: the parsers take operators' bytes (Consul values, admin API
// bodies); they must never panic, and what they accept must encode to a
// value they accept again, unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"5", "paused", `{"rate":1,"burst":2}`, `{"paused":true,"rate":3}`, `{"rate":1e308}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseRate(b); err == nil {
			if back, err := ParseRate(r.Encode()); err != nil || back != r {
				t.Fatalf("rate %q: %+v encodes to %s, read back %+v, %v", b, r, r.Encode(), back, err)
			}
		}
		if l, err := ParseLimit(b); err == nil {
			if back, err := ParseLimit(l.Encode()); err != nil || back != l {
				t.Fatalf("limit %q: %+v encodes to %s, read back %+v, %v", b, l, l.Encode(), back, err)
			}
		}
	})
}
