package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/worker"
)

func init() {
	cli.Describe("worker", "The worker: claims jobs from its topics' queues on its Redis partitions (--topics, weighted or --strict) in fair order and runs them with built-in handlers:\n"+
		"  --handle \"type=noop,type2=sleep\"  --http \"type=https://host/path,...\"  --handle-other noop|sleep\n"+
		"Execution rate limits per resource key follow sluice/<stage>/limits/<resource> in Consul (--consul-addr).\n"+
		"Programs with handlers of their own embed the worker package instead. Ops: /healthz, /readyz, /metrics.")
}

// workerFlags are sluice worker's flags: the worker's Config plus what the
// binary adds (address, partitions to serve, built-in handlers).
type workerFlags struct {
	cfg            worker.Config
	listen         string
	serve          string
	partitionAddrs string
	handle         string
	retain         string
	http           string
	other          string
	logging        cli.Logging
}

func (f *workerFlags) register(fs *flag.FlagSet) {
	f.cfg = worker.DefaultConfig()
	c := &f.cfg
	fs.StringVar(&f.listen, "listen", ":8082", "address for /healthz, /readyz and /metrics")
	fs.StringVar(&c.Stage, "stage", c.Stage, "stage name (as the relay's)")
	fs.StringVar(&c.RedisAddr, "redis-addr", c.RedisAddr, "Redis address of every partition not in --redis-partition-addrs")
	fs.StringVar(&f.partitionAddrs, "redis-partition-addrs", "", "partitions on Redis servers of their own: \"0=host:port,3=host:port\"")
	fs.IntVar(&c.Partitions, "redis-partitions", c.Partitions, "Redis partitions in the layout (as the relay's)")
	fs.StringVar(&f.serve, "partitions", "", "partitions to consume: \"0-7\", \"0,2,4\"; empty: all")
	fs.Var(&c.Topics, "topics", "topics (queues) to serve, with weights: \"critical=6,default=3,low=1\" (a topic without =w weighs 1); each partition's consumer claims from them weighted fair by jobs served")
	fs.BoolVar(&c.Strict, "strict", c.Strict, "drain --topics in the order given instead of by weight: a later topic only when every earlier one has nothing ready")
	fs.IntVar(&c.Workers, "workers", c.Workers, "jobs run at once per partition, across its topics")
	cli.DurationVar(fs, &c.Lease, "lease", c.Lease, "lease of a claimed job, extended every lease/3 while it is held")
	fs.IntVar(&c.ClaimBatch, "claim-batch", c.ClaimBatch, "most jobs claimed per round trip")
	fs.IntVar(&c.Prefetch, "prefetch", c.Prefetch, "most claimed jobs waiting for a free slot, per partition (0: claim only for free slots)")
	cli.DurationVar(fs, &c.PrefetchWait, "prefetch-wait", c.PrefetchWait, "prefetch only as many jobs as the slots run in this time, at the average run time")
	fs.IntVar(&c.MaxAttempts, "max-attempts", c.MaxAttempts, "attempts of jobs whose envelope sets none")
	cli.DurationVar(fs, &c.Timeout, "timeout", c.Timeout, "time limit of an attempt of jobs whose envelope sets none")
	cli.DurationVar(fs, &c.Backoff, "backoff", c.Backoff, "delay before the second attempt; doubles per attempt, with ±20% jitter")
	cli.DurationVar(fs, &c.MaxBackoff, "max-backoff", c.MaxBackoff, "longest delay between attempts")
	cli.DurationVar(fs, &c.ResultTTL, "result-ttl", c.ResultTTL, "how long an ended group, and the record of a job that failed an attempt and then succeeded, are kept (a plain job that succeeded keeps nothing)")
	fs.StringVar(&f.retain, "retain", "", "per-topic default of the envelope's retain: \"topic=24h,other=1h\": how long a successful job's record and result are kept (a job's own retain wins)")
	cli.DurationVar(fs, &c.IdempotencyTTL, "idempotency-ttl", c.IdempotencyTTL, "how long a completed idempotency key keeps other jobs with it from running")
	fs.IntVar(&c.Dead.Max, "dead-max", c.Dead.Max, "most jobs kept in a queue's dead set, per topic and partition (oldest go first)")
	cli.DurationVar(fs, &c.Dead.Keep, "dead-ttl", c.Dead.Keep, "how long a dead job is kept")
	cli.DurationVar(fs, &c.Drain, "drain-timeout", c.Drain, "on SIGTERM, how long running jobs may take; the rest go back to ready")
	cli.DurationVar(fs, &c.Maintain, "maintain-every", c.Maintain, "how often expired leases are reaped and due retries promoted")
	fs.StringVar(&c.ConsulAddr, "consul-addr", "", "Consul HTTP address whose KV holds the execution rate limits, sluice/<stage>/limits/<resource>; empty: no limits")
	cli.DurationVar(fs, &c.RateLimitLead, "rate-limit-lead", c.RateLimitLead, "how long before its slot a throttled job comes back from delayed, to wait the rest in process")
	cli.DurationVar(fs, &c.RateLimitMargin, "rate-limit-margin", c.RateLimitMargin, "slack per second in a limit's slot spacing (costs margin/1s of the rate): lets a schedule delayed by late starts catch up")
	fs.StringVar(&f.handle, "handle", "", "built-in handlers by job type: \"type=noop,type2=sleep\"")
	fs.StringVar(&f.http, "http", "", "http handlers by job type: \"type=https://host/path,...\" (POST the payload)")
	fs.StringVar(&f.other, "handle-other", "", "built-in handler for every other job type: noop or sleep (empty: such jobs go dead)")
	f.logging.Register(fs)
}

// build makes the worker the flags describe.
func (f *workerFlags) build(log *slog.Logger) (*worker.Worker, error) {
	var err error
	if f.cfg.PartitionAddrs, err = queue.ParsePartitionAddrs(f.partitionAddrs, f.cfg.Partitions); err != nil {
		return nil, fmt.Errorf("--redis-partition-addrs: %w", err)
	}
	if f.cfg.Serve, err = parsePartitionList(f.serve, f.cfg.Partitions); err != nil {
		return nil, fmt.Errorf("--partitions: %w", err)
	}
	if f.cfg.Retain, err = parseTopicDurations(f.retain); err != nil {
		return nil, fmt.Errorf("--retain: %w", err)
	}
	w, err := worker.New(f.cfg, log)
	if err != nil {
		return nil, err
	}
	builtin := map[string]worker.Handler{"noop": worker.Noop, "sleep": worker.Sleep}
	for _, def := range strings.Split(f.handle, ",") {
		if def = strings.TrimSpace(def); def == "" {
			continue
		}
		typ, name, ok := strings.Cut(def, "=")
		h, known := builtin[strings.TrimSpace(name)]
		if !ok || !known || typ == "" {
			return nil, fmt.Errorf("--handle %q: want type=noop or type=sleep", def)
		}
		w.Handle(strings.TrimSpace(typ), h)
	}
	hs, err := worker.ParseHTTPHandlers(f.http)
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	for typ, h := range hs {
		w.Handle(typ, h)
	}
	if f.other != "" {
		h, known := builtin[f.other]
		if !known {
			return nil, fmt.Errorf("--handle-other %q: want noop or sleep", f.other)
		}
		w.HandleOther(h)
	}
	return w, nil
}

// parsePartitionList reads "0-7", "1,3,5-6" or "" (all of 0..n-1).
func parsePartitionList(s string, n int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	seen := map[int]bool{}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b >= n {
			return nil, fmt.Errorf("%q: want partitions in 0..%d like \"0-3\" or \"1,5\"", part, n-1)
		}
		for p := a; p <= b; p++ {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var f workerFlags
	f.register(fs)
	ctx, log, stop, err := start(ctx, fs, "worker", &f.logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	return ops.ListenAndServe(ctx, "worker", f.listen, func() (*worker.Worker, error) { return f.build(log) })
}

// parseTopicDurations reads "topic=24h,other=1h".
func parseTopicDurations(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, def := range strings.Split(s, ",") {
		if def = strings.TrimSpace(def); def == "" {
			continue
		}
		topic, v, ok := strings.Cut(def, "=")
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if !ok || strings.TrimSpace(topic) == "" || err != nil || d < 0 {
			return nil, fmt.Errorf("%q: want topic=<duration>, e.g. orders=24h", def)
		}
		out[strings.TrimSpace(topic)] = d
	}
	return out, nil
}
