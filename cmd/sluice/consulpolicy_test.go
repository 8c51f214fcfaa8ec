package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/consul"
)

// TestConsulPolicyCommand: sluice consul-policy prints consul.PolicyFor
// (what the parts' tests run under), takes the stage and topics, and
// refuses a part without one.
func TestConsulPolicyCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"consul-policy", "--stage", "prod", "--topics", "jobs,mail", "relay"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want, _ := consul.PolicyFor(consul.Policy{Part: "relay", Stage: "prod", Topics: []string{"jobs", "mail"}})
	if out.String() != want || !strings.Contains(want, `key "sluice/prod/relay/mail/lock"`) {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"consul-policy", "gate"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "relay, worker, coordinator, console") {
		t.Errorf("the gate: exit %d, %q", code, errOut.String())
	}
	if code := run(context.Background(), []string{"consul-policy"}, &out, &errOut); code != 2 {
		t.Errorf("no part: exit %d", code)
	}
}

// TestCoordinatorSharesConsulWithItsConsole: sluice coordinator's Consul
// token and TLS flags reach the console in its process.
func TestCoordinatorSharesConsulWithItsConsole(t *testing.T) {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	cfg := coordinator.DefaultConfig()
	cfg.RegisterFlags(fs)
	var cc coordinatorConsole
	cc.register(fs)
	if err := fs.Parse([]string{"--consul-token-file", "/run/token", "--consul-tls-ca-file", "/run/ca.pem", "--consul-addr", "consul:8501"}); err != nil {
		t.Fatal(err)
	}
	cc.share(cfg)
	if cc.cfg.ConsulToken.File != "/run/token" || cc.cfg.ConsulTLS.CAFile != "/run/ca.pem" || cc.cfg.ConsulAddr != "consul:8501" {
		t.Errorf("the console's Consul settings: %+v", cc.cfg.Config)
	}
}
