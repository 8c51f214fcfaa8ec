package relay_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

// aclBed is the bed with Consul under ACLs, default deny, and a token
// file holding a token of exactly rules.
func aclBed(t *testing.T, rules string) (*bed, string) {
	t.Helper()
	b := newBed(t)
	b.consul = testenv.Consul(t, testenv.WithConsulACL()) // instead of the open one
	file := filepath.Join(t.TempDir(), "consul-token")
	if err := os.WriteFile(file, []byte(b.consul.ACLToken("relay", rules)), 0o600); err != nil {
		t.Fatal(err)
	}
	return b, file
}

func relayPolicy(t *testing.T) string {
	t.Helper()
	rules, err := consul.PolicyFor(consul.Policy{Part: "relay", Stage: "test", Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// TestRelayUnderItsLeastACLPolicy: with Consul denying by default and a
// token of exactly `sluice consul-policy relay`, the relay takes its
// topic's lock, follows the rate in Consul and relays.
func TestRelayUnderItsLeastACLPolicy(t *testing.T) {
	b, file := aclBed(t, relayPolicy(t))
	key := "sluice/test/relay/" + topic + "/rate"
	if _, err := b.consul.Client().KV().Put(&consulapi.KVPair{Key: key, Value: []byte(`5000`)}, nil); err != nil {
		t.Fatal(err)
	}
	b.produce(t, 0, 200)
	r := b.start(t, "r1", func(c *relay.Config) { c.ConsulToken = cli.Secret{File: file} })
	b.waitRelayed(t, 200, 30*time.Second)
	if !r.relay.Holds(topic) {
		t.Fatal("the relay does not hold its lock")
	}
	testenv.WaitFor(t, 5*time.Second, "the rate from Consul in force", func() bool {
		return metricLabeled(t, r.relay, "sluice_relay_rate_limit_jobs_per_second", "topic", topic) == 5000
	})
}

// TestRelayWithoutSessionRuleSaysWhatIsDenied: the relay's policy less its
// session rule: the relay logs, at the first refusal, an error naming the
// part, the session it could not create and the token's flags, and
// relays nothing.
func TestRelayWithoutSessionRuleSaysWhatIsDenied(t *testing.T) {
	rules := strings.Replace(relayPolicy(t), `session_prefix ""`, `session_prefix "no-such-node"`, 1)
	b, file := aclBed(t, rules)
	b.produce(t, 0, 10)
	cfg := b.config(func(c *relay.Config) { c.ConsulToken = cli.Secret{File: file} })
	var logs testenv.LogBuffer
	r, err := relay.New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 10*time.Second, "the refusal logged", func() bool {
		return strings.Contains(logs.String(), "relay: Consul denied session create")
	})
	for _, want := range []string{"level=ERROR", "--consul-token-file", "sluice consul-policy relay", `session_prefix \"\"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not name %s:\n%s", want, logs.String())
		}
	}
	if r.Holds(topic) {
		t.Error("the relay holds the lock without a session")
	}
}
