package consul

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// aclConsul is one agent with ACLs on, default deny, for the tests here
// (each its own stage).
func aclConsul(t *testing.T, opts ...testenv.ConsulOption) *testenv.ConsulServer {
	return testenv.Consul(t, append([]testenv.ConsulOption{testenv.WithConsulACL()}, opts...)...)
}

func policy(t *testing.T, p Policy) string {
	t.Helper()
	rules, err := PolicyFor(p)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

func client(t *testing.T, cfg Config, part string) *api.Client {
	t.Helper()
	c, err := cfg.Client(part)
	if err != nil {
		t.Fatalf("Config.Client: %v", err)
	}
	return c
}

// wantDenied checks that err is a *DeniedError whose text names the part,
// what was refused and the flag to fix.
func wantDenied(t *testing.T, err error, part string, names ...string) {
	t.Helper()
	var d *DeniedError
	if !errors.As(err, &d) {
		t.Fatalf("want a *DeniedError, got %v", err)
	}
	for _, s := range append([]string{part + ": Consul denied", "--consul-token", "sluice consul-policy " + part}, names...) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not name %q: %v", s, err)
		}
	}
}

// TestLeastRelayPolicyHoldsTheLockAndReadsTheRate: under default deny, a
// token of exactly PolicyFor(relay) takes a topic's lock (session and key
// write) and reads its rate; the same policy without the session rule is
// refused with an error naming the session, the part and the flag.
func TestLeastRelayPolicyHoldsTheLockAndReadsTheRate(t *testing.T) {
	s := aclConsul(t)
	ctx := testCtx(t)
	rules := policy(t, Policy{Part: "relay", Stage: "acl", Topics: []string{"jobs"}})
	cfg := Config{ConsulAddr: s.Addr(), ConsulToken: cli.Secret{Value: s.ACLToken("relay", rules)}}
	c := client(t, cfg, "relay")

	lease, err := Acquire(ctx, LockConfig{Client: c, Key: "sluice/acl/relay/jobs/lock", LockDelay: NoLockDelay})
	if err != nil {
		t.Fatalf("the relay's policy cannot take the lock: %v", err)
	}
	release(t, lease)
	if _, err := s.Client().KV().Put(&api.KVPair{Key: "sluice/acl/relay/jobs/rate", Value: []byte("5")}, nil); err != nil {
		t.Fatal(err)
	}
	if p, _, err := c.KV().Get("sluice/acl/relay/jobs/rate", nil); err != nil || p == nil || string(p.Value) != "5" {
		t.Fatalf("reading the rate: %v %v", p, err)
	}
	// Its policy reaches no other topic, nor the rate's write.
	_, err = c.KV().Put(&api.KVPair{Key: "sluice/acl/relay/jobs/rate", Value: []byte("9")}, nil)
	wantDenied(t, err, "relay", "write of key sluice/acl/relay/jobs/rate")

	noSession := strings.Replace(rules, `session_prefix ""`, `session_prefix "nobody-"`, 1)
	cfg.ConsulToken.Value = s.ACLToken("relay-no-session", noSession)
	_, err = createSession(ctx, mustResolve(t, LockConfig{Client: client(t, cfg, "relay"), Key: "sluice/acl/relay/jobs/lock"}))
	wantDenied(t, err, "relay", "session create", `session_prefix ""`)
}

func mustResolve(t *testing.T, c LockConfig) LockConfig {
	t.Helper()
	c, err := c.resolve()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDeniedTokens: no token, an unknown token, and a list the policy
// shows only in part each fail with an error that says which.
func TestDeniedTokens(t *testing.T) {
	s := aclConsul(t)
	for _, k := range []string{"sluice/acl/limits/a", "sluice/acl/limits/b"} {
		if _, err := s.Client().KV().Put(&api.KVPair{Key: k, Value: []byte("1/s")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// (A list without a token is not refused: Consul hides from the
	// anonymous token what it may not read and does not say so.)
	_, _, err := client(t, Config{ConsulAddr: s.Addr()}, "worker").KV().Get("sluice/acl/limits/a", nil)
	wantDenied(t, err, "worker", "no token was given")

	bogus := Config{ConsulAddr: s.Addr(), ConsulToken: cli.Secret{Value: "00000000-0000-4000-8000-000000000000"}}
	_, _, err = client(t, bogus, "worker").KV().Get("sluice/acl/limits/a", nil)
	wantDenied(t, err, "worker", "ACL not found", "wrong, deleted or expired", "read of key sluice/acl/limits/a")

	// A policy that reads one limit but not the other: the list would
	// read as "b has no limit", so it is refused.
	part := Config{ConsulAddr: s.Addr(), ConsulToken: cli.Secret{Value: s.ACLToken("one-limit", `key "sluice/acl/limits/a" { policy = "read" }`)}}
	_, _, err = client(t, part, "worker").KV().List("sluice/acl/limits/", nil)
	wantDenied(t, err, "worker", "list of keys under sluice/acl/limits/", `key_prefix "sluice/acl/limits/"`)

	// The secret shows in no error.
	if strings.Contains(err.Error(), part.ConsulToken.Value) {
		t.Errorf("the error shows the token: %v", err)
	}
}

// TestRotatedTokenFileIsReadAgain: a token file whose token is deleted
// and replaced is read again on the refusal, and the request goes
// through with the new token without a new client.
func TestRotatedTokenFileIsReadAgain(t *testing.T) {
	s := aclConsul(t)
	rules := policy(t, Policy{Part: "worker", Stage: "rot"})
	file := filepath.Join(t.TempDir(), "token")
	old := s.ACLToken("worker-old", rules)
	if err := os.WriteFile(file, []byte(old+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := client(t, Config{ConsulAddr: s.Addr(), ConsulToken: cli.Secret{File: file}}, "worker")
	if _, _, err := c.KV().List("sluice/rot/limits/", nil); err != nil {
		t.Fatalf("with the first token: %v", err)
	}
	s.DeleteACLToken(old)
	if _, _, err := c.KV().List("sluice/rot/limits/", nil); err == nil || !IsDenied(err) {
		t.Fatalf("with a deleted token: want a refusal, got %v", err)
	}
	if err := os.WriteFile(file, []byte(s.ACLToken("worker-new", rules)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.KV().List("sluice/rot/limits/", nil); err != nil {
		t.Fatalf("after the file was rotated: %v", err)
	}
}

// TestConsulOverTLS: a client given the CA talks to an HTTPS-only agent
// with ACLs; one that trusts another CA is told to set
// --consul-tls-ca-file, one without TLS to set --consul-tls.
func TestConsulOverTLS(t *testing.T) {
	certs := testenv.NewCerts(t)
	s := aclConsul(t, testenv.WithConsulTLS(certs))
	token := s.ACLToken("worker", policy(t, Policy{Part: "worker", Stage: "tls"}))
	cfg := Config{ConsulAddr: s.Addr(), ConsulToken: cli.Secret{Value: token}, ConsulTLS: tlsfiles.Client{CAFile: certs.CAFile}}
	if _, _, err := client(t, cfg, "worker").KV().List("sluice/tls/limits/", nil); err != nil {
		t.Fatalf("over TLS with the CA: %v", err)
	}
	cfg.ConsulTLS.CAFile = certs.OtherCAFile
	_, _, err := client(t, cfg, "worker").KV().List("sluice/tls/limits/", nil)
	if err == nil || !strings.Contains(err.Error(), "worker: ") || !strings.Contains(err.Error(), "--consul-tls-ca-file") {
		t.Errorf("an untrusted certificate: want an error naming --consul-tls-ca-file, got %v", err)
	}
	cfg.ConsulTLS = tlsfiles.Client{}
	_, _, err = client(t, cfg, "worker").KV().List("sluice/tls/limits/", nil)
	if err == nil || !strings.Contains(err.Error(), "--consul-tls") {
		t.Errorf("plain HTTP to the HTTPS port: want an error naming --consul-tls, got %v", err)
	}
}

// TestEveryPartsPolicyIsValid: Consul accepts each part's policy, with and
// without topics.
func TestEveryPartsPolicyIsValid(t *testing.T) {
	s := aclConsul(t)
	for _, part := range Parts {
		for _, topics := range [][]string{nil, {"jobs", "mail"}} {
			rules := policy(t, Policy{Part: part, Stage: "prod", Topics: topics})
			s.ACLToken(part+"-"+strings.Join(topics, "-"), rules)
		}
	}
	if _, err := PolicyFor(Policy{Part: "gate", Stage: "prod"}); err == nil || !strings.Contains(err.Error(), "relay, worker, coordinator, console") {
		t.Errorf("the gate has no policy: want an error listing the parts, got %v", err)
	}
	if _, err := PolicyFor(Policy{Part: "relay", Stage: "prod", Topics: []string{"a/b"}}); err == nil {
		t.Error("a topic with '/' makes a policy")
	}
}
