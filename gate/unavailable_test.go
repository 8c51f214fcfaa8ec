package gate_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/gate"
)

// A bulk group whose produce passed the gate's deadline is answered 504,
// and that is all: the deadline is the request's, not Kafka being
// unreachable. The gate once marked its topic catalogue unavailable for it
// (a context deadline is a net.Error, which kafka.Unavailable counts), so
// every request of every topic was a 503 "Kafka unavailable: context
// deadline exceeded" until the next metadata refresh; `make chaos
// KAFKA=apache` saw a whole window of them.
func TestAGroupDeadlineDoesNotTurnTheGateAway(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, func(c *gate.Config) { c.ProduceTimeout = 300 * time.Millisecond })
	if a := post(t, g.url+"/v1/topics/other/jobs", `{"type":"t"}`); a.status != http.StatusAccepted {
		t.Fatalf("warming the producer: %d %s", a.status, a.body)
	}
	// The first produce after this (the group's chunk) is answered late.
	late := make(chan struct{})
	defer close(late)
	c := k.Cluster()
	var slept atomic.Bool
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if slept.CompareAndSwap(false, true) {
			c.SleepControl(func() { <-late })
		}
		return nil, nil, false
	})
	a := post(t, g.url+"/v1/topics/jobs/groups", `{"id":"late-grp","type":"t","items":[{"n":1},{"n":2}]}`)
	if a.status != http.StatusGatewayTimeout {
		t.Fatalf("a group past the produce deadline: %d %s; want 504", a.status, a.body)
	}
	if strings.Contains(g.logs.String(), `msg="Kafka unavailable"`) {
		t.Errorf("the gate marked Kafka unavailable for one request's deadline:\n%s", g.logs.String())
	}
	if a := do(t, http.MethodGet, g.url+"/readyz", nil); a.status != http.StatusOK {
		t.Errorf("/readyz right after a group's deadline: %d %s; want 200", a.status, a.body)
	}
}
