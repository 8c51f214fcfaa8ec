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
	"github.com/sluicehq/sluice/internal/queue"
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

// canaryCmdFlags are sluice canary's flags: the monitor's (shared with
// sluice coordinator) and where the Redis partitions live.
type canaryCmdFlags struct {
	cfg     coordinator.CanaryConfig
	listen  string
	http    ops.HTTPLimits
	redis   queue.StageRedis
	logging cli.Logging
}

func (f *canaryCmdFlags) register(fs *flag.FlagSet) {
	f.cfg = coordinator.DefaultCanaryConfig()
	f.redis = queue.DefaultStageRedis()
	fs.StringVar(&f.listen, "listen", ":8084", "address for /healthz, /readyz and /metrics")
	f.http = ops.DefaultHTTPLimits()
	f.http.RegisterFlags(fs, "the canary monitor's --listen")
	f.redis.RegisterFlags(fs)
	f.cfg.RegisterFlags(fs)
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
	if len(f.cfg.Topics) == 0 {
		return fmt.Errorf("--canary-topics: name at least one topic")
	}
	pool, err := redisPool(f.redis)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := ops.NewRegistry()
	host, _ := os.Hostname()
	mon, err := coordinator.NewCanaryMonitor(f.cfg, pool, reg, fmt.Sprintf("%s/%d", host, os.Getpid()), log)
	if err != nil {
		return flagHint(err, "canary", f.cfg)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	mux := http.NewServeMux()
	ops.Mount(mux, reg, pool.Ping)
	srv := ops.NewServer(mux, f.http, log)
	opsDone := make(chan error, 1)
	go func() { opsDone <- ops.Serve(ctx, log, srv, ln, time.Second) }()
	mon.Run(ctx, func() bool { return true })
	return <-opsDone
}
