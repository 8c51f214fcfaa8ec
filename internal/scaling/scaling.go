// Package scaling is the contract between the coordinator's scaler and the
// operators who steer it: the scaling parameters, in Consul at
// sluice/<stage>/scaling, and the operators' scale pins, at
// sluice/<stage>/scaling/pins/<partition>. The coordinator (coordinator/)
// follows both and decides; the console (console/: the admin API and
// `sluice scale`) shows them and writes the pins. One parser for each value,
// so that neither part accepts what the other would refuse.
// docs/coordinator.md#scaling and docs/admin.md#scaling describe them.
package scaling

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/queue"
)

// Params are the scaling parameters: the coordinator's flags' defaults,
// overridden live by the JSON value of the Consul key
// sluice/<stage>/scaling (ParseParams).
type Params struct {
	// Threshold is the PWQD (the partition's ready jobs, summed over its
	// topics' queues, per live worker) above which a partition is under
	// pressure. Default 100.
	Threshold float64
	// Cycles (K) is how many consecutive cycles above the threshold it
	// takes to double the workers; while the pressure lasts they double
	// again every cycle after that, up to Max. Default 3.
	Cycles int
	// Base is the fewest workers per consumer: decay stops there.
	// Default 10 (the workers' default pool).
	Base int
	// MaxFactor caps the workers per consumer at Base × MaxFactor, unless
	// Max is set. Default 8.
	MaxFactor int
	// Max caps the workers per consumer; 0: Base × MaxFactor. Default 0.
	Max int
	// HalfLife is how fast the workers decay towards Base once the load
	// has fallen: half the way down per HalfLife. Default 2m.
	HalfLife time.Duration
	// Paused keeps the scaler measuring (metrics) without commanding.
	// Default false.
	Paused bool
}

// DefaultParams are the coordinator's flags' defaults: the workers'
// default pool (10) as the base.
func DefaultParams() Params {
	return Params{Threshold: 100, Cycles: 3, Base: 10, MaxFactor: 8, HalfLife: 2 * time.Minute}
}

// Limit is the most workers per consumer the parameters allow.
func (p Params) Limit() int {
	if p.Max > 0 {
		return p.Max
	}
	return p.Base * p.MaxFactor
}

// Check reports a parameter that makes no sense.
func (p Params) Check() error {
	switch {
	case !(p.Threshold > 0) || math.IsInf(p.Threshold, 0):
		return fmt.Errorf("threshold %g: want a positive PWQD", p.Threshold)
	case p.Cycles < 1:
		return fmt.Errorf("cycles %d: want at least 1", p.Cycles)
	case p.Base < 1 || p.Base > queue.MaxWorkers:
		return fmt.Errorf("base %d: want 1..%d", p.Base, queue.MaxWorkers)
	case p.MaxFactor < 1:
		return fmt.Errorf("max factor %d: want at least 1", p.MaxFactor)
	case p.Max != 0 && p.Max < p.Base:
		return fmt.Errorf("max %d is below the base %d", p.Max, p.Base)
	case p.Limit() > queue.MaxWorkers:
		return fmt.Errorf("max workers %d: want at most %d", p.Limit(), queue.MaxWorkers)
	case p.HalfLife <= 0:
		return fmt.Errorf("half-life %s: want a positive duration", p.HalfLife)
	}
	return nil
}

func (p Params) String() string {
	return fmt.Sprintf("threshold %g, %d cycles, base %d, max %d, half-life %s, paused %t",
		p.Threshold, p.Cycles, p.Base, p.Limit(), p.HalfLife, p.Paused)
}

// Wire is the parameters as the admin API shows them (GET /api/v1/scale).
func (p Params) Wire() admin.ScaleParams {
	return admin.ScaleParams{Threshold: p.Threshold, Cycles: p.Cycles, Base: p.Base, Max: p.Limit(), HalfLife: p.HalfLife.Seconds(), Paused: p.Paused}
}

// Key is the Consul key of the stage's scaling parameters,
// sluice/<stage>/scaling.
func Key(stage string) (string, error) { return consul.Key(stage, "scaling") }

// paramsJSON is the Consul value; absent fields keep the defaults.
type paramsJSON struct {
	Threshold *float64      `json:"threshold"`
	Cycles    *int          `json:"cycles"`
	Base      *int          `json:"base"`
	MaxFactor *int          `json:"maxFactor"`
	Max       *int          `json:"max"`
	HalfLife  *jsonDuration `json:"halfLife"`
	Paused    *bool         `json:"paused"`
}

// jsonDuration is "90s", "2m" or a number of seconds.
type jsonDuration time.Duration

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		*d = jsonDuration(v)
		return err
	}
	secs, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return errors.New(`want a duration such as "2m" or a number of seconds`)
	}
	*d = jsonDuration(secs * float64(time.Second))
	return nil
}

// ParseParams reads the Consul value of sluice/<stage>/scaling, such as
//
//	{"threshold": 100, "cycles": 3, "base": 2, "maxFactor": 8, "halfLife": "2m"}
//
// Fields left out take their values from defaults (the flags); "max" sets
// the cap directly instead of "maxFactor"; {"paused": true} stops commands.
// Unknown fields are errors: a typo must not pass for a default.
func ParseParams(value []byte, defaults Params) (Params, error) {
	var v paramsJSON
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return Params{}, fmt.Errorf("scaling parameters %q: %v", value, err)
	}
	if dec.More() {
		return Params{}, fmt.Errorf("scaling parameters %q: more than one JSON value", value)
	}
	p := defaults
	if v.Threshold != nil {
		p.Threshold = *v.Threshold
	}
	if v.Cycles != nil {
		p.Cycles = *v.Cycles
	}
	if v.Base != nil {
		p.Base = *v.Base
	}
	if v.MaxFactor != nil {
		p.MaxFactor, p.Max = *v.MaxFactor, 0
	}
	if v.Max != nil {
		p.Max = *v.Max
	}
	if v.HalfLife != nil {
		p.HalfLife = time.Duration(*v.HalfLife)
	}
	if v.Paused != nil {
		p.Paused = *v.Paused
	}
	if err := p.Check(); err != nil {
		return Params{}, fmt.Errorf("scaling parameters %q: %v", value, err)
	}
	return p, nil
}
