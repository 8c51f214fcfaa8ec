package scaling

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/queue"
)

// Scale pins (docs/admin.md#scaling): `sluice scale set <partition> <n>`
// has the console write {"workers":n,"at":...,"by":...} to Consul at
// sluice/<stage>/scaling/pins/<partition>. Every coordinator follows the
// prefix, so a new holder honours the pins in force; the holder's scaler
// commands a pinned partition to the pin instead of deciding, until the
// key goes (`scale set <partition> auto`). Consul, not the holder's
// memory: a pin must survive the failover that an on-call may be causing.

// PinsPrefix is the Consul prefix of the stage's pins, with its trailing
// slash: a pin's key is the prefix and the partition's number.
func PinsPrefix(stage string) (string, error) {
	k, err := consul.Key(stage, "scaling", "pins")
	return k + "/", err
}

// ParsePin reads a pin's value: {"workers": n, "at": ..., "by": ...}, n
// in 1..queue.MaxWorkers. Unknown fields are refused: a typo must not pin
// a partition to 0 workers.
func ParsePin(value []byte) (admin.Pin, error) {
	var p admin.Pin
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return admin.Pin{}, fmt.Errorf("scale pin %q: %v", value, err)
	}
	if dec.More() {
		return admin.Pin{}, fmt.Errorf("scale pin %q: more than one JSON value", value)
	}
	if p.Workers < 1 || p.Workers > queue.MaxWorkers {
		return admin.Pin{}, fmt.Errorf("scale pin %q: workers %d: want 1..%d", value, p.Workers, queue.MaxWorkers)
	}
	return p, nil
}

// ParsePins reads the pins prefix's keys, by name under the prefix:
// partition number -> pin. Keys that are not a partition of the layout,
// or values that do not parse, are skipped with an error each.
func ParsePins(values map[string][]byte, partitions int) (map[int]admin.Pin, []error) {
	out := map[int]admin.Pin{}
	var errs []error
	for name, v := range values {
		part, err := strconv.Atoi(name)
		if err != nil || part < 0 || part >= partitions {
			errs = append(errs, fmt.Errorf("scale pin key %q: not a partition 0..%d", name, partitions-1))
			continue
		}
		p, err := ParsePin(v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[part] = p
	}
	return out, errs
}
