// Command sluice runs any part of the sluice job pipeline, or all of them on
// one machine with `sluice dev`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/relay"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"dev", "run the whole pipeline on this machine: Kafka (kfake), Redis, Consul and every part", runDev},
		{"gate", "the HTTP gate: validate jobs and write them to Kafka", runGate},
		{"relay", "the relay: move jobs from Kafka into partitioned Redis under a Consul lock", runRelay},
		{"worker", "the worker: run jobs from Redis partitions in fair order (built-in handlers)", runWorker},
		{"coordinator", "the coordinator: under a Consul lock, deliver completed bulk groups' callbacks, scale workers per partition, send canaries; serves the console too", runCoordinator},
		{"console", "the console alone: the admin API and the dashboard (sluice coordinator serves them too, unless --console=false)", runConsole},
		{"canary", "the heartbeat canary monitor alone: canaries through every path, alerts when one is late; `canary status`: their state (admin API)", runCanary},
		{"stats", "the stage funnel per topic with its gaps explained, and the canaries' state (admin API, or the stores directly)", runStats},
		{"dlq", "dead letters: ls, show, replay, purge the dead set or a topic's Kafka DLQ (admin API)", runDLQ},
		{"topics", "topics (queues): create with their .retry and .dlq, ls, describe, delete (admin API)", runTopics},
		{"rate", "relay rates per topic: get, set, pause, resume (admin API)", runRate},
		{"limits", "execution rate limits per resource: get, set, unset (admin API)", runLimits},
		{"groups", "groups: ls, show, cancel (admin API)", runGroups},
		{"jobs", "jobs: ls a partition's running and delayed jobs, show where a job is (admin API)", runJobs},
		{"periodic", "periodic jobs: ls, show, set, delete, pause, resume, run-now (admin API)", runPeriodic},
		{"scale", "workers per partition: show, set <partition> <n|auto> (admin API)", runScale},
		{"consul-policy", "print the least Consul ACL policy of a part (relay, worker, coordinator, console): docs/secure/consul.md", runConsulPolicy},
		{"loadtest", "load generators for benchmarks: gate, body, bare-server", runLoadtest},
		{"version", "print the version", runVersion},
	}
}

func main() {
	cli.TuneGC()
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks errors whose message is all the user needs (flag errors are
// printed by the flag package itself).
var errUsage = errors.New("usage")

// usageError is a usage mistake the flag package did not see (a missing
// argument, an unknown subcommand): run prints it and exits 2, as for a
// bad flag (docs/admin.md: 2 is a usage error).
type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == errUsage }

func usageErrorf(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// errReported marks a failure the command's output already explains (exit
// 1, nothing more printed): `sluice stats` finding problems.
var errReported = errors.New("reported")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil || cli.IsHelp(err):
			return 0
		case errors.Is(err, errUsage):
			var ue *usageError
			if errors.As(err, &ue) {
				fmt.Fprintf(stderr, "sluice %s: %v\n", c.name, ue)
			}
			return 2
		case errors.Is(err, errReported):
			return 1
		}
		fmt.Fprintf(stderr, "sluice %s: %v\n", c.name, err)
		return 1
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: sluice <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `sluice <command> --help` for its flags; every flag can also be set through")
	fmt.Fprintln(w, "the environment as SLUICE_<COMMAND>_<FLAG> or SLUICE_<FLAG>.")
}

// parse parses a command's flags; a parse error has been printed already.
func parse(fs *flag.FlagSet, part string, args []string, stdout io.Writer) error {
	fs.SetOutput(stdout)
	if err := cli.Parse(fs, part, args); err != nil {
		var envErr *cli.EnvError
		if cli.IsHelp(err) || errors.As(err, &envErr) {
			// Help was asked for, or an environment variable was wrong
			// (the flag package printed nothing about that).
			return err
		}
		return errUsage // the flag package printed the error and usage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// start parses a long-running command's flags (registered on fs by the
// caller), builds its logger and returns a context that ends on SIGINT or
// SIGTERM; call stop when done.
func start(ctx context.Context, fs *flag.FlagSet, part string, logging *cli.Logging, args []string, stdout, stderr io.Writer) (_ context.Context, _ *slog.Logger, stop func(), err error) {
	if err := parse(fs, part, args, stdout); err != nil {
		return nil, nil, nil, err
	}
	log, err := logging.Logger(stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	kafka.RouteLogs(log)
	queue.RouteLogs(log)
	stopTracing := func() {}
	if part != "dev" { // sluice dev starts tracing once its Jaeger runs (dev_tracing.go)
		if stopTracing, err = logging.StartTracing(ctx, part, log); err != nil {
			return nil, nil, nil, err
		}
	}
	ctx, stopSignals := cli.SignalContext(ctx, log)
	return ctx, log, func() { stopSignals(); stopTracing() }, nil
}

func runGate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	cfg := gate.DefaultConfig()
	cfg.RegisterFlags(fs)
	var logging cli.Logging
	logging.Register(fs)
	ctx, log, stop, err := start(ctx, fs, "gate", &logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	return ops.ListenAndServe(ctx, "gate", cfg.Listen, func() (*gate.Gate, error) {
		g, err := gate.New(ctx, cfg, log)
		return g, flagHint(err, "gate", cfg)
	})
}

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	cfg := relay.DefaultConfig()
	cfg.RegisterFlags(fs)
	var logging cli.Logging
	logging.Register(fs)
	ctx, log, stop, err := start(ctx, fs, "relay", &logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	return ops.ListenAndServe(ctx, "relay", cfg.Listen, func() (*relay.Relay, error) {
		r, err := relay.New(ctx, cfg, log)
		return r, flagHint(err, "relay", cfg)
	})
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	fmt.Fprintf(stdout, "sluice %s\n", v)
	return nil
}
