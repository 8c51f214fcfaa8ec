// Command loadtest drives a sluice pipeline with load and reports what it
// measured: enqueue and enqueue-to-completion latency histograms,
// throughput, queue depth and workers per partition over time, and each
// scenario's verdict against the seed's numbers.
//
//	go run ./loadtest --start-dev throughput     # starts `sluice dev` on free ports, runs, stops it
//	go run ./loadtest spike                      # against a `sluice dev` already running on its defaults
//	make loadtest SCENARIO=ratelimit SIZE=full
//
// Scenarios: throughput, spike, ratelimit, scaling (and scaling-fixed),
// hol, and load (one stream from the flags). See docs/loadtest.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/loadtest/scenario"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	scenario   string
	opts       scenario.Options
	ep         scenario.Endpoints
	startDev   bool
	split      bool
	bin        string
	maxMemory  string
	out        string
	progress   string
	yardsticks bool
	yardFor    time.Duration
	strict     bool
	devFlags   stringList
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func (c *config) register(fs *flag.FlagSet) {
	def := scenario.DevEndpoints()
	fs.StringVar(&c.opts.Size, "size", "scaled", `"scaled" (minutes at most) or "full" (the seed's sizes)`)
	fs.BoolVar(&c.startDev, "start-dev", false, "start `sluice dev` on free ports in a temporary directory for the run (else target the endpoints below)")
	fs.BoolVar(&c.split, "split-processes", true, "--start-dev: run Kafka and each part in a process of its own (sluice dev --split-processes), so that each phase reports the CPU per job of each; false: sluice dev's default, one process")
	fs.StringVar(&c.bin, "sluice-bin", "bin/sluice", "the sluice binary for --start-dev and the bare-server yardstick (built with go build when missing)")
	fs.StringVar(&c.maxMemory, "redis-maxmemory", "", "--start-dev: Redis's maxmemory (default: sluice dev's 256mb; 4gb for throughput and hol, which may queue millions of jobs)")
	fs.StringVar(&c.out, "out", ".sluice/loadtest", "directory for the JSON and HTML reports")
	fs.StringVar(&c.progress, "progress", "auto", "live progress line: auto (on a terminal), on, off")
	fs.BoolVar(&c.yardsticks, "yardsticks", false, "throughput: also measure the bare HTTP handler, kfake produce and redis-benchmark in the same run")
	fs.DurationVar(&c.yardFor, "yardstick-duration", 10*time.Second, "how long each timed yardstick runs")
	fs.Var(&c.devFlags, "dev-flag", "--start-dev: one more flag for `sluice dev`, e.g. --dev-flag=--pprof (repeatable)")
	fs.BoolVar(&c.strict, "strict", false, "exit with status 3 when a verdict fails (else 0 once the scenario ran; 1 on errors)")

	fs.StringVar(&c.ep.Gate, "gate", def.Gate, "the gate's base URL")
	fs.StringVar(&c.ep.Topic, "topic", def.Topic, "the job topic")
	fs.StringVar(&c.ep.Token, "token", "", "bearer token for the gate")
	fs.StringVar(&c.ep.Acks, "acks", "", `the acks level of every job posted ("leader" or "all"; default: the gate's, all)`)
	fs.StringVar(&c.ep.Redis, "redis", def.Redis, "Redis address (completion times, done counters, memory)")
	fs.StringVar(&c.ep.Consul, "consul", def.Consul, "Consul HTTP address (ratelimit and scaling set keys there)")
	fs.StringVar(&c.ep.Relay, "relay", def.Relay, "the relay's metrics base URL")
	fs.StringVar(&c.ep.Worker, "worker", def.Worker, "the worker's metrics base URL")
	fs.StringVar(&c.ep.Coordinator, "coordinator", def.Coordinator, "the coordinator's metrics base URL")
	fs.StringVar(&c.ep.Stage, "stage", def.Stage, "the pipeline's stage (Redis and Consul key prefix)")
	fs.IntVar(&c.ep.Partitions, "redis-partitions", def.Partitions, "the pipeline's Redis partitions")
	fs.IntVar(&c.ep.KafkaPartitions, "kafka-partitions", def.KafkaPartitions, "the topic's Kafka partitions")

	fs.Float64Var(&c.opts.Rate, "rate", 0, "load: requests per second, open loop (0: closed loop); spike: the spike's requests/s; ratelimit: the limit")
	fs.IntVar(&c.opts.Conns, "conns", 0, "connections (closed loop: the concurrency)")
	fs.IntVar(&c.opts.Jobs, "jobs", 0, "load: jobs to send (0: for --duration); ratelimit: jobs per group; scaling, hol: jobs")
	fs.DurationVar(&c.opts.Duration, "duration", 0, "load, throughput: how long each stream sends; steady: each load (20s); idle: the measurement (1m); spike: the spike's length")
	fs.IntVar(&c.opts.Batch, "batch", 0, "jobs per POST (1: single-job route)")
	fs.IntVar(&c.opts.PayloadBytes, "payload", 0, "payload size in bytes")
	fs.StringVar(&c.opts.JobType, "type", "", `load: job type ("noop", or "sleep" with --sleep-ms)`)
	fs.IntVar(&c.opts.SleepMS, "sleep-ms", 0, "sleep jobs' time (spike, scaling, load)")
	fs.IntVar(&c.opts.SampleEvery, "sample-every", 0, "load: read the completion time of one job in this many (1: every job; a sampled job carries an id and a retained record, which costs Redis more than a plain job's nothing); 0: one in 100 with single-job POSTs, one per request with batches")
	fs.Float64Var(&c.opts.Max, "max", 0, "steady: the single-POST maximum in jobs/s whose 1%, 10%, 25% and 50% it runs (0: measured first, in the same run)")
	fs.IntVar(&c.opts.Groups, "groups", 0, "throughput, load: groups the jobs are spread over (0: the scenario's default; -1: none, each job on its partition's shared lane)")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	c.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./loadtest [flags] <scenario>\n\nScenarios: %s (see docs/loadtest.md)\n\nFlags:\n", strings.Join(scenario.Scenarios, ", "))
		fs.PrintDefaults()
	}
	// Flags may come before or after the scenario's name.
	var rest []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(rest) != 1 {
		fs.Usage()
		return 2
	}
	c.scenario = rest[0]
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := c.run(ctx, stdout, stderr)
	if rep != nil {
		rep.Publish(stdout, stderr, c.out, "loadtest")
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return 1
	}
	if c.strict && !rep.Pass() {
		return 3
	}
	return 0
}

func (c *config) run(ctx context.Context, stdout, stderr io.Writer) (*scenario.Report, error) {
	tty := c.progress == "on" || (c.progress == "auto" && isTerminal(stderr))
	progress := scenario.NewProgress(stderr, tty)
	ep := c.ep
	bin := ""
	var procs []scenario.Process
	if c.startDev || c.yardsticks {
		var err error
		if bin, err = sluiceBin(ctx, c.bin, stderr); err != nil {
			return nil, err
		}
	}
	if c.startDev {
		mem := c.maxMemory
		if mem == "" && (c.scenario == "throughput" || c.scenario == "hol") {
			// Both may queue millions of jobs (hol at full size: a
			// 1,000,000-job group); at sluice dev's 256mb the relay's
			// memory guard would hold the relay, and they would measure
			// the guard instead (docs/loadtest.md).
			mem = "4gb"
		}
		progress.Printf("starting %s dev on free ports...\n", bin)
		dev, err := scenario.StartDev(ctx, scenario.DevConfig{Bin: bin, RedisMaxMemory: mem, SplitProcesses: c.split, Args: c.devFlags})
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := dev.Stop(); err != nil {
				fmt.Fprintf(stderr, "loadtest: stopping sluice dev: %v\n", err)
			}
		}()
		ep = dev.Endpoints
		ep.Token = c.ep.Token
		progress.Printf("sluice dev: gate %s, redis %s, consul %s, metrics %s %s %s; log %s\n",
			ep.Gate, ep.Redis, ep.Consul, ep.Relay, ep.Worker, ep.Coordinator, dev.LogPath())
		if procs, err = dev.Processes(); err != nil {
			progress.Printf("sluice dev's processes not found (%v): the phases report the sluice processes' CPU together\n", err)
		} else {
			progress.Printf("sluice dev's processes: %s\n", processList(procs))
		}
	}
	r, err := scenario.NewRunner(ep, progress)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	r.SetProcesses(procs)
	var y *scenario.Yardsticks
	if c.yardsticks {
		v := scenario.MeasureYardsticks(ctx, bin, ep.Redis, c.yardFor, progress)
		y = &v
	}
	rep, err := r.RunScenario(ctx, c.scenario, c.opts)
	if rep != nil && y != nil {
		rep.AddYardsticks(*y)
	}
	return rep, err
}

// sluiceBin is path when it exists; else the binary is built there with
// go build (from the module root, this command's working directory).
func sluiceBin(ctx context.Context, path string, stderr io.Writer) (string, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	fmt.Fprintf(stderr, "loadtest: %s is missing: go build -o %s ./cmd/sluice\n", path, path)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/sluice")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building sluice (run from the module root, or pass --sluice-bin): %w", err)
	}
	return path, nil
}

// processList is "gate 123, kafka 124, ...".
func processList(ps []scenario.Process) string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s %d", p.Name, p.Pid))
	}
	return strings.Join(out, ", ")
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && scenario.IsTerminal(f)
}
