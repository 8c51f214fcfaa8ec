package scaling

import (
	"strings"
	"testing"
	"time"
)

func TestParseParams(t *testing.T) {
	def := Params{Threshold: 10, Cycles: 3, Base: 2, MaxFactor: 4, HalfLife: time.Minute}
	p, err := ParseParams([]byte(`{"threshold": 50, "cycles": 2, "base": 4, "maxFactor": 4, "halfLife": "90s"}`), def)
	if err != nil || p.Threshold != 50 || p.Cycles != 2 || p.Base != 4 || p.Limit() != 16 || p.HalfLife != 90*time.Second {
		t.Fatalf("full value: %+v %v", p, err)
	}
	p, err = ParseParams([]byte(`{"max": 40, "halfLife": 30}`), def)
	if err != nil || p.Limit() != 40 || p.HalfLife != 30*time.Second || p.Threshold != def.Threshold || p.Base != def.Base {
		t.Fatalf("partial value: %+v %v", p, err)
	}
	if p, err = ParseParams([]byte(`{"paused": true}`), def); err != nil || !p.Paused {
		t.Fatalf("paused: %+v %v", p, err)
	}
	for _, bad := range []string{
		`{"treshold": 5}`, `{"threshold": 0}`, `{"cycles": 0}`, `{"base": 0}`, `{"base": 4, "max": 3}`,
		`{"halfLife": "soon"}`, `{"halfLife": "-1s"}`, `{"maxFactor": 20000}`, `not json`, `{"threshold": 5} {}`,
	} {
		if _, err := ParseParams([]byte(bad), def); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if w := DefaultParams().Wire(); w.Max != 80 || w.HalfLife != 120 || w.Base != 10 {
		t.Errorf("the defaults on the wire: %+v", w)
	}
}

// TestParsePins: the keys under the prefix that name a partition of the
// layout with a valid pin are read; the others are each an error, and
// the rest is still read.
func TestParsePins(t *testing.T) {
	prefix, err := PinsPrefix("prod")
	if err != nil || prefix != "sluice/prod/scaling/pins/" {
		t.Fatalf("prefix %q %v", prefix, err)
	}
	pins, errs := ParsePins(map[string][]byte{
		"0": []byte(`{"workers":3,"at":"2026-11-21T19:00:00Z","by":"admin API"}`),
		"1": []byte(`{"workers":0}`),
		"2": []byte(`{"wrokers":4}`),
		"9": []byte(`{"workers":4}`),
		"x": []byte(`{"workers":4}`),
	}, 4)
	if len(pins) != 1 || pins[0].Workers != 3 || pins[0].By != "admin API" || len(errs) != 4 {
		t.Fatalf("pins %+v, errors %v", pins, errs)
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), "scale pin") {
			t.Errorf("an error that does not say it is about a pin: %v", err)
		}
	}
}
