package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/ops"
)

func init() {
	cli.Describe("canary", "The heartbeat canary monitor on its own, for stages whose coordinator runs without --canary-topics:\n"+
		"every --canary-interval it sends one canary job through the gate into every Kafka partition of every topic in\n"+
		"--canary-topics, covering every Redis partition too; workers complete canaries with a built-in handler.\n"+
		"A path whose newest completed canary is older than 2 intervals + --canary-grace alerts: logged once with what\n"+
		"is stuck, sluice_canary_stale=1, POSTed to --canary-webhook; `sluice stats` shows it. Run one monitor per stage.\n"+
		"`sluice canary status [--admin-url U] [--admin-token T] [-o json]` prints the canaries' state through the admin API.\n"+
		"Ops: /healthz, /readyz, /metrics.")
}

// canaryFlags registers the canary monitor's flags, shared by sluice canary
// and sluice coordinator; topics is copied into cfg by its caller.
func registerCanaryFlags(fs *flag.FlagSet, c *coordinator.CanaryConfig, topics *cli.ListFlag) {
	fs.Var(topics, "canary-topics", "topics to send heartbeat canaries through, comma-separated (none: no canaries)")
	fs.StringVar(&c.GateURL, "canary-gate", c.GateURL, "the gate canaries go through")
	fs.StringVar(&c.Token, "canary-token", "", "the gate's bearer token for canaries: its scope needs the topics and +canary (e.g. \"<token> *,+canary\")")
	cli.DurationVar(fs, &c.Interval, "canary-interval", c.Interval, "time between canaries along each path (at least 1s)")
	cli.DurationVar(fs, &c.Grace, "canary-grace", c.Grace, "a path alerts when its newest completed canary is older than 2 intervals plus this (0: half an interval)")
	fs.StringVar(&c.Webhook, "canary-webhook", "", "URL that gets a JSON POST when canary alerts fire and when they clear")
	cli.DurationVar(fs, &c.Timeout, "canary-timeout", c.Timeout, "time limit of each call to the gate and the webhook")
}

type canaryCmdFlags struct {
	cfg     coordinator.CanaryConfig
	topics  cli.ListFlag
	listen  string
	redis   redisFlags
	logging cli.Logging
}

func (f *canaryCmdFlags) register(fs *flag.FlagSet) {
	f.cfg = coordinator.DefaultCanaryConfig()
	fs.StringVar(&f.listen, "listen", ":8084", "address for /healthz, /readyz and /metrics")
	f.redis.register(fs)
	registerCanaryFlags(fs, &f.cfg, &f.topics)
	f.logging.Register(fs)
}

func runCanary(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "status" {
		return runCanaryStatus(ctx, args, stdout, stderr)
	}
	fs := flag.NewFlagSet("canary", flag.ContinueOnError)
	var f canaryCmdFlags
	f.register(fs)
	ctx, log, stop, err := start(ctx, fs, "canary", &f.logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	f.cfg.Topics = f.topics
	if len(f.cfg.Topics) == 0 {
		return fmt.Errorf("--canary-topics: name at least one topic")
	}
	pool, err := f.redis.pool()
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := ops.NewRegistry()
	host, _ := os.Hostname()
	mon, err := coordinator.NewCanaryMonitor(f.cfg, pool, reg, fmt.Sprintf("%s/%d", host, os.Getpid()), log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	mux := http.NewServeMux()
	ops.Mount(mux, reg, pool.Ping)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	opsDone := make(chan error, 1)
	go func() { opsDone <- ops.Serve(ctx, log, srv, ln, time.Second) }()
	mon.Run(ctx, func() bool { return true })
	return <-opsDone
}
