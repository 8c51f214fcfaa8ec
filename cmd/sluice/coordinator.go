package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
)

func init() {
	cli.Describe("coordinator", "The coordinator: the holder of the Consul lock sluice/<stage>/coordinator/lock watches every queue partition\n"+
		"(each topic's, on each Redis partition) for completed bulk groups, aggregates their items' results and POSTs each\n"+
		"group's callback, retried with backoff until a 2xx or given up (callback_state failed). It also scales each\n"+
		"partition's workers on its per-worker queue depth (PWQD = ready jobs of every topic / live workers): SCALE_UP /\n"+
		"SCALE_DOWN commands on the partition's cmd list. The topics are those the relays registered, plus --topics. The --scale-* flags are defaults; the JSON in Consul KV sluice/<stage>/scaling overrides them live.\n"+
		"With --canary-topics it also runs the heartbeat canary monitor (see sluice canary).\n"+
		"Other coordinators stand by. Ops: /healthz, /readyz, /metrics. Every coordinator, standby too, serves the\n"+
		"admin API under /api/v1/ (bearer tokens from --admin-tokens / --admin-tokens-file; docs/admin.md) and the\n"+
		"web dashboard at /.")
}

// coordinatorFlags are sluice coordinator's flags: the coordinator's Config
// plus what the binary adds.
type coordinatorFlags struct {
	cfg            coordinator.Config
	topics         cli.ListFlag
	canaryTopics   cli.ListFlag
	listen         string
	partitionAddrs string
	adminTokens    string
	adminFile      string
	adminInsecure  bool
	gateMetrics    cli.ListFlag
	logging        cli.Logging
}

func (f *coordinatorFlags) register(fs *flag.FlagSet) {
	f.cfg = coordinator.DefaultConfig()
	c := &f.cfg
	fs.StringVar(&f.listen, "listen", ":8083", "address for /healthz, /readyz and /metrics")
	fs.StringVar(&c.Stage, "stage", c.Stage, "stage name: Consul keys under sluice/<stage>/, Redis keys under sluice:{<stage>:<topic>:p<N>}: and sluice:{<stage>:p<N>}:")
	fs.StringVar(&c.RedisAddr, "redis-addr", c.RedisAddr, "Redis address of every partition not in --redis-partition-addrs")
	fs.StringVar(&f.partitionAddrs, "redis-partition-addrs", "", "partitions on Redis servers of their own: \"0=host:port,3=host:port\"")
	fs.IntVar(&c.Partitions, "redis-partitions", c.Partitions, "Redis partitions in the layout (as the relay's and the workers')")
	fs.Var(&f.topics, "topics", "topics whose queues are read besides those the relays registered (their relays have not started yet), comma-separated; default none")
	fs.StringVar(&c.ConsulAddr, "consul-addr", c.ConsulAddr, "Consul HTTP address")
	cli.DurationVar(fs, &c.LockTTL, "lock-ttl", c.LockTTL, "TTL of the coordinator's Consul session (Consul's minimum is 10s)")
	cli.DurationVar(fs, &c.LockDelay, "lock-delay", c.LockDelay, "Consul lock-delay after a holder's session expires; 0 for none")
	cli.DurationVar(fs, &c.GroupWait, "group-wait", c.GroupWait, "how long a queue partition's watcher blocks for a completed group (whole seconds); also bounds how long stopping takes, and is how often the registered topics are read for new ones to watch")
	cli.DurationVar(fs, &c.RescanEvery, "rescan-every", c.RescanEvery, "how often to look for groups an earlier coordinator left mid-delivery")
	fs.IntVar(&c.Deliveries, "deliveries", c.Deliveries, "groups delivered at once per queue partition (a failing receiver holds one)")
	fs.IntVar(&c.WaitConns, "wait-conns", c.WaitConns, "Redis connections per Redis server for the watchers' blocking waits, one per queue partition (topics x partitions) waiting; beyond that they take turns")
	fs.IntVar(&c.ReadChunk, "read-chunk", c.ReadChunk, "items' states read per Redis round trip when aggregating a group")
	cli.DurationVar(fs, &c.Keep, "keep", c.Keep, "how long a finished group's status (GET /v1/groups/{id}) is kept")
	cli.DurationVar(fs, &c.CallbackTimeout, "callback-timeout", c.CallbackTimeout, "time limit of one callback POST, answer included")
	cli.DurationVar(fs, &c.CallbackBackoff, "callback-backoff", c.CallbackBackoff, "wait after the first failed attempt; doubles per attempt, with ±20% jitter")
	cli.DurationVar(fs, &c.CallbackMaxBackoff, "callback-max-backoff", c.CallbackMaxBackoff, "longest wait between attempts")
	fs.IntVar(&c.CallbackMaxAttempts, "callback-max-attempts", c.CallbackMaxAttempts, "give up after this many attempts (0: no limit)")
	cli.DurationVar(fs, &c.CallbackGiveUp, "callback-give-up", c.CallbackGiveUp, "give up once the next attempt would start this long after the first (0: no limit)")
	fs.Int64Var(&c.SpillAbove, "spill-above", c.SpillAbove, "callback bodies larger than this many bytes are built in a temporary file, not in memory")
	fs.StringVar(&c.SpillDir, "spill-dir", "", "directory for those files (default: the system's temporary directory)")
	cli.DurationVar(fs, &c.ScaleEvery, "scale-every", c.ScaleEvery, "scaling cycle: every partition's ready depth (summed over the topics) and live workers are read this often (0: no scaling)")
	fs.Float64Var(&c.Scaling.Threshold, "scale-threshold", c.Scaling.Threshold, "PWQD (ready jobs per live worker) above which a partition is under pressure")
	fs.IntVar(&c.Scaling.Cycles, "scale-cycles", c.Scaling.Cycles, "consecutive cycles above the threshold before the workers double (K)")
	fs.IntVar(&c.Scaling.Base, "scale-base", c.Scaling.Base, "workers per consumer the scaler never goes below; set it to the workers' --workers")
	fs.IntVar(&c.Scaling.MaxFactor, "scale-max-factor", c.Scaling.MaxFactor, "the most workers per consumer, as a multiple of the base")
	fs.IntVar(&c.Scaling.Max, "scale-max", c.Scaling.Max, "the most workers per consumer, instead of base x factor (0: base x factor)")
	cli.DurationVar(fs, &c.Scaling.HalfLife, "scale-half-life", c.Scaling.HalfLife, "once the load has fallen, the workers decay half the way to the base per half-life")
	cli.DurationVar(fs, &c.ConsumerTTL, "consumer-ttl", c.ConsumerTTL, "a consumer's heartbeat older than this no longer counts (ten times older: removed)")
	cli.DurationVar(fs, &c.StatsEvery, "stats-every", c.StatsEvery, "how often the queue partitions' in-flight, delayed and dead jobs and the stage funnel are read into metrics (0: never)")
	registerCanaryFlags(fs, &c.Canary, &f.canaryTopics)
	// The admin API (docs/admin.md).
	fs.StringVar(&f.adminTokens, "admin-tokens", "", "admin API bearer tokens with their roles: \"<token> admin;<token> read\" (kept as SHA-256 hashes); prefer --admin-tokens-file, as flags show in ps")
	fs.StringVar(&f.adminFile, "admin-tokens-file", "", "file of admin API tokens: one \"<token> <role>\" per line (role read or admin), # comments")
	fs.BoolVar(&f.adminInsecure, "admin-insecure", false, "without tokens, serve the admin API to anyone as admin (sluice dev on localhost only); without it and without tokens the API answers 403")
	c.Admin.Kafka.Register(fs, "sluice-coordinator")
	c.Admin.Kafka.Brokers = nil // optional: without, the Kafka DLQ endpoints answer 503
	fs.Lookup("kafka-brokers").DefValue = ""
	fs.Lookup("kafka-brokers").Usage = "Kafka brokers, comma-separated host:port: the admin API reads and replays <topic>.dlq and reads the relays' lag (none: those answer 503)"
	fs.StringVar(&c.Admin.ConsumerGroup, "consumer-group", c.Admin.ConsumerGroup, "the relays' --consumer-group, for their lag in /api/v1/stats")
	fs.Var(&f.gateMetrics, "gate-metrics", "the gates' /metrics URLs, comma-separated, for the gate's counts in /api/v1/stats")
	f.logging.Register(fs)
}

// build makes the coordinator the flags describe.
func (f *coordinatorFlags) build(log *slog.Logger) (*coordinator.Coordinator, error) {
	var err error
	if f.cfg.PartitionAddrs, err = queue.ParsePartitionAddrs(f.partitionAddrs, f.cfg.Partitions); err != nil {
		return nil, fmt.Errorf("--redis-partition-addrs: %w", err)
	}
	f.cfg.Topics = f.topics
	f.cfg.Canary.Topics = f.canaryTopics
	if f.cfg.Admin.Auth, err = admin.NewAuth(f.adminTokens, f.adminFile, f.adminInsecure); err != nil {
		return nil, err
	}
	f.cfg.Admin.GateMetrics = f.gateMetrics
	if !f.cfg.Admin.Auth.Configured() && !f.adminInsecure {
		log.Warn("the admin API has no tokens: it answers 403 until --admin-tokens or --admin-tokens-file is set")
	}
	return coordinator.New(f.cfg, log)
}

func runCoordinator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	var f coordinatorFlags
	f.register(fs)
	ctx, log, stop, err := start(ctx, fs, "coordinator", &f.logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	return ops.ListenAndServe(ctx, "coordinator", f.listen, func() (*coordinator.Coordinator, error) { return f.build(log) })
}
