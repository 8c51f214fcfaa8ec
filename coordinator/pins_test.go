package coordinator_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/admin"
	pins "github.com/sluicehq/sluice/internal/scaling"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestScalerHonoursAPin: a pin in Consul (as the console writes it)
// commands its partition to the pinned count with the reason "pinned by
// operator", even under a backlog the scaler would double for; the scaler
// does not undo it over further cycles, and Target and Pin show it (what
// a console in the process shows); a standby knows the pin but no target;
// the key's removal hands the partition back.
func TestScalerHonoursAPin(t *testing.T) {
	b := newBed(t, 2)
	c := b.start(t, "c1", scaling(fastParams()))
	c.waitHolding(t)
	cons := b.consumer(t, 0, 2)
	b.backlog(t, 0, 500)
	prefix, _ := pins.PinsPrefix("test") // as the console writes them
	v, _ := json.Marshal(admin.Pin{Workers: 3, At: time.Now().UTC(), By: "test"})
	kv := b.consul.Client().KV()
	if _, err := kv.Put(&consulapi.KVPair{Key: prefix + "0", Value: v}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the pinned command", func() bool {
		for _, cmd := range cons.commands() {
			if cmd.TargetWorkers == 3 && strings.HasPrefix(cmd.Reason, "pinned by operator") {
				return true
			}
		}
		return false
	})
	n := len(cons.commands())
	c.waitCycles(t, 6) // the backlog would have doubled the workers by now
	if got := cons.commands(); len(got) != n || cons.workers.Load() != 3 {
		t.Errorf("the scaler changed a pinned partition: %+v, workers %d", got[n:], cons.workers.Load())
	}
	if pin, ok := c.c.Pin(0); !ok || pin.Workers != 3 || c.c.Target(0) != 3 {
		t.Errorf("Pin(0) %+v %v, Target(0) %d; want the pin, 3", pin, ok, c.c.Target(0))
	}
	if _, ok := c.c.Pin(1); ok || c.c.Target(9) != 0 {
		t.Errorf("partition 1 has a pin, or partition 9 a target")
	}
	standby := b.start(t, "c2", scaling(fastParams()))
	testenv.WaitFor(t, 10*time.Second, "the standby to read the pin", func() bool { _, ok := standby.c.Pin(0); return ok })
	if standby.c.Holds() || standby.c.Target(0) != 0 {
		t.Errorf("the standby: holds %v, target %d", standby.c.Holds(), standby.c.Target(0))
	}
	if _, err := kv.Delete(prefix+"0", nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the scaler to scale the backlog again", func() bool { return cons.workers.Load() > 3 })
}
