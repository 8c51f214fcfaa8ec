package coordinator_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/testenv"
)

// aclBed is the bed with Consul under ACLs, default deny.
func aclBed(t *testing.T) *bed {
	t.Helper()
	b := newBed(t, 2)
	b.consul = testenv.Consul(t, testenv.WithConsulACL()) // instead of the open one
	return b
}

func coordinatorPolicy(t *testing.T) string {
	t.Helper()
	rules, err := consul.PolicyFor(consul.Policy{Part: "coordinator", Stage: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// TestCoordinatorUnderItsLeastACLPolicy: with Consul denying by default
// and a token of exactly `sluice consul-policy coordinator`, the
// coordinator takes its lock and follows the scaling parameters, the pins
// and the periodic schedules.
func TestCoordinatorUnderItsLeastACLPolicy(t *testing.T) {
	b := aclBed(t)
	kv := b.consul.Client().KV()
	if _, err := kv.Put(&consulapi.KVPair{Key: "sluice/test/scaling", Value: []byte(`{"base": 3}`)}, nil); err != nil {
		t.Fatal(err)
	}
	pin, _ := json.Marshal(admin.Pin{Workers: 4, At: time.Now().UTC(), By: "test"})
	if _, err := kv.Put(&consulapi.KVPair{Key: "sluice/test/scaling/pins/1", Value: pin}, nil); err != nil {
		t.Fatal(err)
	}
	schedule := `{"cron": "0 0 3 * * *", "topic": "jobs", "type": "report"}`
	if _, err := kv.Put(&consulapi.KVPair{Key: "sluice/test/periodic/nightly", Value: []byte(schedule)}, nil); err != nil {
		t.Fatal(err)
	}
	token := b.consul.ACLToken("coordinator", coordinatorPolicy(t))
	r := b.start(t, "c1", func(c *coordinator.Config) {
		scaling(fastParams())(c)
		c.ConsulToken = cli.Secret{Value: token}
	})
	r.waitHolding(t)
	testenv.WaitFor(t, 10*time.Second, "the parameters and the pin from Consul", func() bool {
		p, ok := r.c.Pin(1)
		return r.c.Params().Base == 3 && ok && p.Workers == 4
	})
	testenv.WaitFor(t, 10*time.Second, "the schedule from Consul", func() bool {
		return testenv.Metric(t, r.c.Registry(), "sluice_coordinator_periodic_next_fire_timestamp_seconds", "schedule", "nightly") > 0
	})
}

// TestCoordinatorWithoutScalingReadSaysWhatIsDenied: its policy less the
// scaling read: it still takes its lock, and logs an error naming the
// key it may not read, the part and the token's flag.
func TestCoordinatorWithoutScalingReadSaysWhatIsDenied(t *testing.T) {
	b := aclBed(t)
	rules := coordinatorPolicy(t)
	i := strings.Index(rules, "# the scaling parameters")
	j := strings.Index(rules[i:], "}\n") + i + 2
	rules = rules[:i] + rules[j:]
	token := b.consul.ACLToken("coordinator-no-scaling", rules)
	r := b.start(t, "c1", func(c *coordinator.Config) {
		scaling(fastParams())(c)
		c.ConsulToken = cli.Secret{Value: token}
	})
	r.waitHolding(t)
	testenv.WaitFor(t, 10*time.Second, "the refusal logged", func() bool {
		return strings.Contains(r.logs.String(), "coordinator: Consul denied read of key sluice/test/scaling")
	})
	for _, want := range []string{"level=ERROR", "--consul-token-file", "sluice consul-policy coordinator"} {
		if !strings.Contains(r.logs.String(), want) {
			t.Errorf("the log does not name %s:\n%s", want, r.logs.String())
		}
	}
}
