package coordinator

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/scaling"
)

// Scale pins (docs/admin.md#scaling, internal/scaling): an operator's
// fixed worker count for a partition, in Consul at
// sluice/<stage>/scaling/pins/<partition>. Every coordinator follows the
// prefix, so a new holder honours the pins in force; the holder's scaler
// commands a pinned partition to the pin instead of deciding, until the
// key goes.

// pinReason starts the reason of every command a pin causes.
const pinReason = "pinned by operator"

// ParsePin reads a pin's value: {"workers": n, "at": ..., "by": ...}, n
// in 1..MaxWorkers.
//
// Deprecated: the console (the admin API) and the coordinator share
// internal/scaling.ParsePin; this forwards to it.
func ParsePin(value []byte) (admin.Pin, error) { return scaling.ParsePin(value) }

// watchPins follows the pins until ctx ends; on Consul errors (and for a
// value that does not parse) the last known pins stay in force.
func (c *Coordinator) watchPins(ctx context.Context) {
	prefix, _ := scaling.PinsPrefix(c.cfg.Stage)
	log := c.log.With("prefix", prefix)
	consul.WatchPrefix(ctx, c.consul, prefix, consul.WatchOptions{Log: log}, func(values map[string][]byte) {
		pins, errs := scaling.ParsePins(values, c.cfg.Partitions)
		old := c.pins.Load()
		for _, err := range errs {
			log.Error("ignoring an invalid scale pin", "err", err)
			if old != nil {
				// A pin written wrong keeps the partition's last pin, if any.
				for part, p := range *old {
					if _, ok := pins[part]; !ok && values[strconv.Itoa(part)] != nil {
						pins[part] = p
					}
				}
			}
		}
		c.pins.Store(&pins)
		log.Info("scale pins in force", "pins", len(pins))
	})
}

// Pin is partition part's scale pin in force, as the coordinator last read
// it from Consul (it follows the pins while Config.ScaleEvery is set; a
// console in the same process shows it when Consul does not answer).
func (c *Coordinator) Pin(part int) (admin.Pin, bool) {
	m := c.pins.Load()
	if m == nil {
		return admin.Pin{}, false
	}
	p, ok := (*m)[part]
	return p, ok
}

// pinned decides for a pinned partition, as Decide does for the others: a
// command to the pin when the target differs, or again when a live
// consumer missed it (resend). It replaces Decide for the cycle; the state
// it returns (target = level = the pin) is where the scaler starts from
// once the pin goes.
func (s *scaler) pinned(st *partScaling, pin admin.Pin, checkpoint int, live map[string]queue.Beat) (State, Decision) {
	next := State{Target: pin.Workers, Level: float64(pin.Workers), At: s.c.cfg.Now()}
	was := st.seeded(checkpoint).Target
	if was == pin.Workers {
		d := s.resend(st, pin.Workers, live, Decision{})
		if d.Type != "" {
			d.Reason = pinReason + ": " + d.Reason
		}
		return next, d
	}
	st.mismatch = 0
	d := Decision{Type: queue.ScaleUp, Target: pin.Workers, Reason: pinReason}
	if pin.Workers < was {
		d.Type = queue.ScaleDown
	}
	if pin.By != "" {
		d.Reason = fmt.Sprintf("%s (%s, %s)", pinReason, pin.By, pin.At.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return next, d
}
