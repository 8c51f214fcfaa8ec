package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
)

func init() {
	cli.Describe("consul-policy", "Print the least Consul ACL policy (HCL rules) a part needs under default_policy \"deny\":\n"+
		"sluice consul-policy [--stage S] [--topics a,b] relay|worker|coordinator|console. Create it with\n"+
		"`consul acl policy create -name sluice-relay -rules @relay.hcl` and a token of it alone, then give the part the token\n"+
		"with --consul-token-file (docs/secure/consul.md). The gate needs none: it never talks to Consul.")
}

// runConsulPolicy prints consul.PolicyFor: the same rules the tests give
// each part.
func runConsulPolicy(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("consul-policy", flag.ContinueOnError)
	stage := fs.String("stage", "dev", "the stage whose keys (sluice/<stage>/) the part uses")
	var topics []string
	cli.StringsVar(fs, &topics, "topics", nil, "the relay's topics, comma-separated: narrows the relay's and the console's rules to these topics' keys (default: every topic)")
	if err := cli.Parse(fs, "consul-policy", args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: sluice consul-policy [--stage S] [--topics a,b] <part>: one of relay, worker, coordinator, console", errUsage)
	}
	rules, err := consul.PolicyFor(consul.Policy{Part: fs.Arg(0), Stage: *stage, Topics: topics})
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, rules)
	return err
}
