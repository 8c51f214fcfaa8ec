// Package limits holds the rate values operators write into Consul KV: a
// topic's relay rate (sluice/<stage>/relay/<topic>/rate, read by the relay)
// and a resource's execution limit (sluice/<stage>/limits/<resource>, read
// by the workers). They live here, not in the parts, because the admin API
// writes them too and must accept exactly what the readers accept.
package limits

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rate is a topic's relay rate, as stored in Consul KV at
// sluice/<stage>/relay/<topic>/rate. Accepted forms:
//
//	{"rate": 5000, "burst": 10000}                  jobs per second and burst (burst defaults to rate, at least 1)
//	{"paused": true}                                relay nothing until changed
//	{"paused": true, "rate": 5000, "burst": 10000}  paused; the rate is kept for a resume (sluice rate resume)
//	5000                                            jobs per second
//	paused                                          as {"paused": true}
//
// A missing key means unlimited: a topic nobody limited relays as fast as
// Redis takes it (the memory guard still applies).
type Rate struct {
	PerSecond float64 `json:"rate,omitempty"`
	Burst     int     `json:"burst,omitempty"`
	Paused    bool    `json:"paused,omitempty"`
	Unlimited bool    `json:"-"`
}

func (r Rate) String() string {
	switch {
	case r.Paused:
		return "paused"
	case r.Unlimited:
		return "unlimited"
	}
	return fmt.Sprintf("%g/s burst %d", r.PerSecond, r.EffectiveBurst())
}

// EffectiveBurst is the burst in force: the given one, else the rate
// rounded up, at least 1.
func (r Rate) EffectiveBurst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return max(int(math.Ceil(r.PerSecond)), 1)
}

// ParseRate reads a rate value; see Rate. A paused value keeps the rate it
// names (PerSecond, Burst), so that resuming can restore it; the relay
// only looks at Paused then.
func ParseRate(value []byte) (Rate, error) {
	s := strings.TrimSpace(string(value))
	switch {
	case s == "paused":
		return Rate{Paused: true}, nil
	case strings.HasPrefix(s, "{"):
		var r Rate
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return Rate{}, fmt.Errorf("rate %q: %v", s, err)
		}
		if dec.More() {
			return Rate{}, fmt.Errorf("rate %q: more than one JSON value", s)
		}
		if r.Burst < 0 || r.PerSecond < 0 || math.IsInf(r.PerSecond, 0) {
			return Rate{}, fmt.Errorf("rate %q: want a positive rate (or \"paused\") and a burst >= 0", s)
		}
		if r.Paused {
			return r, nil
		}
		if r.PerSecond <= 0 {
			return Rate{}, fmt.Errorf("rate %q: want a positive rate (or \"paused\") and a burst >= 0", s)
		}
		return r, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return Rate{}, fmt.Errorf("rate %q: want jobs per second, a JSON object or \"paused\"", s)
	}
	return Rate{PerSecond: v}, nil
}

// Encode is the rate's JSON value for Consul; an unlimited rate has none
// (its key is deleted).
func (r Rate) Encode() []byte {
	b, _ := json.Marshal(r)
	return b
}

// Limit is the execution rate limit of a resource key, as stored in Consul
// KV at sluice/<stage>/limits/<resource>. Accepted forms:
//
//	{"rate": 10, "burst": 1}   starts per second; how many may start at once after a quiet spell (default 1)
//	10                         as {"rate": 10}
//
// A missing key means unlimited. Unlike the relay's rate, burst defaults
// to 1, not to the rate: with burst 1 no one-second window holds more than
// the rate's starts; with burst b, up to rate+b-1.
type Limit struct {
	PerSecond float64 `json:"rate"`
	Burst     int     `json:"burst,omitempty"`
}

// String is the limit's definition, the same on every worker: the Redis
// schedule notices a change by it.
func (l Limit) String() string {
	return strconv.FormatFloat(l.PerSecond, 'g', -1, 64) + "/s burst " + strconv.Itoa(l.EffectiveBurst())
}

// EffectiveBurst is the burst in force: the given one, at least 1.
func (l Limit) EffectiveBurst() int { return max(l.Burst, 1) }

// MaxLimitRate keeps the slot spacing at a whole microsecond or more.
const MaxLimitRate = 1_000_000

// ParseLimit reads a limit value; see Limit.
func ParseLimit(value []byte) (Limit, error) {
	s := strings.TrimSpace(string(value))
	var l Limit
	if strings.HasPrefix(s, "{") {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return Limit{}, fmt.Errorf("limit %q: %v", s, err)
		}
		if dec.More() {
			return Limit{}, fmt.Errorf("limit %q: more than one JSON value", s)
		}
	} else {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return Limit{}, fmt.Errorf("limit %q: want starts per second or {\"rate\": N, \"burst\": B}", s)
		}
		l.PerSecond = v
	}
	if !(l.PerSecond > 0) || math.IsInf(l.PerSecond, 0) || l.PerSecond > MaxLimitRate || l.Burst < 0 {
		return Limit{}, fmt.Errorf("limit %q: want a rate in (0, %d] per second and a burst >= 0", s, MaxLimitRate)
	}
	return l, nil
}

// Encode is the limit's JSON value for Consul.
func (l Limit) Encode() []byte {
	b, _ := json.Marshal(l)
	return b
}
