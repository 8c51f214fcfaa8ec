package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/topics"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/worker"
)

func init() {
	cli.Describe("dev", "Runs the whole pipeline on this machine with embedded defaults: Kafka in-process (kfake, persisted under --dir),\n"+
		"a redis-server child with AOF, a Consul dev agent child, the gate without authentication, a relay, a worker and a coordinator.\n"+
		"Ctrl-C or SIGTERM stops everything; jobs survive a restart.")
}

type devConfig struct {
	Dir       string
	GateAddr  string
	KafkaAddr string
	// Kafka is which Kafka runs: "kfake" (in process) or "apache" (a real
	// broker from bin/kafka, `make kafka`, as a child process).
	Kafka           string
	RedisAddr       string
	ConsulAddr      string
	RelayAddr       string
	WorkerAddr      string
	CoordinatorAddr string
	RedisPartitions int
	Topic           string
	// Topics, when given, are the job topics created and served instead
	// of Topic alone (--topics jobs,mail).
	Topics         []string
	Partitions     int
	RedisMaxMemory string
	RedisAOF       bool
	ResultTTL      time.Duration
	CanaryInterval time.Duration
	WorkerServe    []int
	// Worker starts the built-in worker (every type runs noop); false
	// leaves the queues to a worker of the developer's own, which the
	// banner says how to attach.
	Worker bool
	// HTTP maps job types to URLs the built-in worker POSTs them to
	// (sluice worker's --http, the worker's http handler); other types
	// stay no-ops.
	HTTP string
	// CallbackSecretFile signs bulk groups' callbacks (the coordinator's
	// --callback-secret-file); empty: unsigned.
	CallbackSecretFile string
	StopTimeout        time.Duration
	Pprof              bool
	PprofListen        string
	// AdminTokens are the coordinator's admin API tokens ("<token> <role>;
	// ..."); empty: one admin token is generated and written to
	// <dir>/admin-token, unless AdminInsecure.
	AdminTokens   string
	AdminInsecure bool
	Logging       cli.Logging
	// JaegerAddr and OTLPAddr are where --tracing's Jaeger serves its
	// UI and query API, and its OTLP/HTTP receiver (dev_tracing.go).
	JaegerAddr string
	OTLPAddr   string
	// SplitProcesses runs Kafka and each part as a child process of its
	// own, `sluice dev <the same flags> --only-part <part>` (OnlyPart), so
	// that each one's CPU can be measured apart (the loadtest does).
	SplitProcesses bool
	OnlyPart       string
	args           []string // the flags given, for the children
}

func (c *devConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Dir, "dir", ".sluice", "directory for Kafka, Redis and Consul data and logs")
	fs.StringVar(&c.GateAddr, "gate-addr", "127.0.0.1:8080", "gate HTTP address")
	fs.StringVar(&c.KafkaAddr, "kafka-addr", "127.0.0.1:9092", "Kafka broker address")
	fs.StringVar(&c.Kafka, "kafka", devKafkaFake, "which Kafka runs: kfake (in process) or apache (a real Apache Kafka broker from bin/kafka, `make kafka`, as a child process; data in <dir>/kafka-apache)")
	fs.StringVar(&c.RedisAddr, "redis-addr", "127.0.0.1:6390", "Redis address")
	fs.StringVar(&c.ConsulAddr, "consul-addr", "127.0.0.1:8500", "Consul HTTP address")
	fs.StringVar(&c.RelayAddr, "relay-addr", "127.0.0.1:8081", "relay's /healthz, /readyz and /metrics address")
	fs.StringVar(&c.WorkerAddr, "worker-addr", "127.0.0.1:8082", "worker's /healthz, /readyz and /metrics address")
	fs.StringVar(&c.CoordinatorAddr, "coordinator-addr", "127.0.0.1:8083", "the coordinator's address: the admin API (/api/v1, what sluice <command> --admin-url dials), the dashboard (/), and /healthz, /readyz and /metrics")
	fs.IntVar(&c.RedisPartitions, "redis-partitions", 8, "Redis partitions (queue pool size)")
	fs.StringVar(&c.Topic, "topic", "jobs", "job topic to create (with its .retry and .dlq topics)")
	cli.StringsVar(fs, &c.Topics, "topics", nil, "job topics to create and serve, comma-separated (each with its .retry and .dlq), instead of --topic alone: --topics jobs,mail; more later without a restart: sluice topics create <name>")
	fs.IntVar(&c.Partitions, "partitions", 8, "partitions of the job topic")
	fs.StringVar(&c.RedisMaxMemory, "redis-maxmemory", "256mb", "Redis maxmemory (policy noeviction)")
	fs.BoolVar(&c.RedisAOF, "redis-aof", true, "Redis appends every write to its AOF (fsync every second), so jobs survive a restart; --redis-aof=false for load tests that measure without it")
	cli.DurationVar(fs, &c.ResultTTL, "result-ttl", 24*time.Hour, "how long the dev worker keeps a done job and its result (the relay dedupes by id for as long)")
	fs.BoolVar(&c.Worker, "worker", true, "run the built-in worker (every job type a no-op); --worker=false starts everything else and prints how to attach a worker of your own (go run ./examples/worker)")
	fs.StringVar(&c.HTTP, "http", "", "job types the built-in worker POSTs to a URL, its http handler (sluice worker's --http): \"thumb=http://127.0.0.1:8787/,...\"; other types stay no-ops (docs/sdk.md)")
	fs.StringVar(&c.CallbackSecretFile, "callback-secret-file", "", "sign bulk groups' callbacks with the secrets in this file (the coordinator's --callback-secret-file: one per line, at least 32 bytes, mode 0600); empty: unsigned")
	cli.IntRangesVar(fs, &c.WorkerServe, "worker-partitions", nil, "Redis partitions the dev worker consumes: \"0-6\", \"0,2\"; empty: all (leave one out to see its canary alert)")
	cli.DurationVar(fs, &c.CanaryInterval, "canary-interval", 10*time.Second, "time between heartbeat canaries along each path (0: none)")
	cli.DurationVar(fs, &c.StopTimeout, "stop-timeout", 15*time.Second, "how long each part may take to stop")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve the gate's Go profiler under /debug/pprof/ on --pprof-listen (not on the gate's address: it authenticates no one)")
	fs.StringVar(&c.PprofListen, "pprof-listen", "127.0.0.1:6060", "loopback address --pprof serves the gate's profiler on")
	fs.StringVar(&c.AdminTokens, "admin-tokens", "", "the coordinator's admin API tokens, \"<token> admin;<token> read\"; empty: an admin token is generated into <dir>/admin-token and printed")
	fs.BoolVar(&c.AdminInsecure, "admin-insecure", false, "serve the admin API and dashboard without tokens (anyone who reaches the coordinator's address is admin)")
	fs.BoolVar(&c.SplitProcesses, "split-processes", false, "run Kafka (kfake) and each part (relay, worker, coordinator, gate) in a process of its own, so that each one's CPU and memory can be measured apart (the loadtest's per-part CPU); default: all in this process")
	fs.StringVar(&c.OnlyPart, "only-part", "", "run only this part (kafka, relay, worker, coordinator or gate) of a stack whose Redis and Consul run already: how --split-processes starts its children")
	c.Logging.Register(fs)
	c.registerTracing(fs)
	fs.Lookup("log-format").DefValue = "text"
	c.Logging.Format = "text"
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	var cfg devConfig
	cfg.register(fs)
	ctx, log, stop, err := start(ctx, fs, "dev", &cfg.Logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	cfg.args = args
	return devStack(ctx, cfg, log, stdout, nil)
}

// devStack starts every component, prints where they are, waits for ctx or a
// component's death, and stops them all in reverse order. ready, if not nil,
// is called once everything is up.
func devStack(ctx context.Context, cfg devConfig, log *slog.Logger, stdout io.Writer, ready func()) (err error) {
	if err := checkOnlyPart(cfg.OnlyPart); err != nil {
		return err
	}
	if cfg.OnlyPart != "" {
		log = log.With("process", cfg.OnlyPart)
	}
	// Refuse taken ports before starting anything, with the flag to change
	// (a --split-processes child's parent did).
	for _, p := range []struct{ addr, what, flag string }{
		{cfg.GateAddr, "gate", "--gate-addr"},
		{cfg.KafkaAddr, "kafka", "--kafka-addr"},
		{cfg.RedisAddr, "redis", "--redis-addr"},
		{cfg.ConsulAddr, "consul", "--consul-addr"},
		{cfg.RelayAddr, "relay", "--relay-addr"},
		{cfg.WorkerAddr, "worker", "--worker-addr"},
		{cfg.CoordinatorAddr, "coordinator", "--coordinator-addr"},
	} {
		if cfg.OnlyPart != "" {
			break
		}
		if p.what == "worker" && !cfg.Worker {
			continue // left for the developer's own worker
		}
		if err := stack.CheckAddrFree(p.addr, p.what, p.flag); err != nil {
			return err
		}
	}
	if cfg.Partitions < 1 {
		return errors.New("--partitions must be at least 1")
	}
	for _, t := range cfg.topicNames() {
		if err := topics.Valid(t); err != nil {
			return fmt.Errorf("--topics: %w", err)
		}
	}
	if cfg.Kafka != devKafkaFake && cfg.Kafka != devKafkaApache {
		return fmt.Errorf("--kafka %q: want %s or %s", cfg.Kafka, devKafkaFake, devKafkaApache)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}

	// Stop what started, newest first, whatever happens below.
	var stops []func(context.Context) error
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			sctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout)
			if serr := stops[i](sctx); serr != nil {
				log.Error("stopping", "err", serr)
				err = errors.Join(err, serr)
			}
			cancel()
		}
		log.Info("sluice dev stopped")
	}()
	// A JVM broker formats its storage and starts in 4-10 s on an idle
	// machine, and took over a minute while the machine ran two chaos
	// suites beside the tests: give it more before calling it stuck.
	startBudget := time.Minute
	if cfg.Kafka == devKafkaApache {
		startBudget = 3 * time.Minute
	}
	startCtx, cancelStart := context.WithTimeout(ctx, startBudget)
	defer cancelStart()
	// Before any child starts: they read the token the parent wrote.
	adminToken, err := devAdminToken(cfg, dir)
	if err != nil {
		return err
	}

	// run starts a part in this process (inProc), or as a child process
	// (--split-processes), or not at all (a child that runs another part);
	// done is nil unless it runs in this process.
	children := newDevChildren(cfg.args, stdout, os.Stderr)
	run := func(part string, inProc func() (chan error, func(context.Context) error, error)) (done chan error, err error) {
		var stop func(context.Context) error
		switch {
		case cfg.inProcess(part):
			done, stop, err = inProc()
		case cfg.OnlyPart == "":
			stop, err = children.start(startCtx, part)
		default:
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		stops = append(stops, stop)
		return done, nil
	}

	_, kport, err := net.SplitHostPort(cfg.KafkaAddr)
	if err != nil {
		return fmt.Errorf("--kafka-addr %q: %w", cfg.KafkaAddr, err)
	}
	port, err := strconv.Atoi(kport)
	if err != nil {
		return fmt.Errorf("--kafka-addr %q: port: %w", cfg.KafkaAddr, err)
	}
	kafkaTopics := map[string]int32{}
	for _, t := range cfg.topicNames() {
		kafkaTopics[t] = int32(cfg.Partitions)
		kafkaTopics[kafka.RetryTopic(t)] = int32(cfg.Partitions)
		kafkaTopics[kafka.DLQTopic(t)] = 1
	}
	if _, err := run("kafka", func() (chan error, func(context.Context) error, error) {
		if cfg.Kafka == devKafkaApache {
			return startDevApacheKafka(startCtx, cfg, dir, port, kafkaTopics, log)
		}
		broker, err := stack.StartKafka(startCtx, stack.KafkaConfig{
			Ports:   []int{port},
			DataDir: filepath.Join(dir, "kafka"),
			Topics:  kafkaTopics,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("kafka: %w", err)
		}
		log.Info("kafka up", "addr", cfg.KafkaAddr, "data", filepath.Join(dir, "kafka"))
		return nil, func(context.Context) error { broker.Close(); return nil }, nil
	}); err != nil {
		return err
	}

	// Redis and Consul: children of the parent, whatever the layout.
	var redisExited, consulExited <-chan struct{}
	if cfg.OnlyPart == "" {
		redis, err := stack.StartRedis(startCtx, stack.RedisConfig{
			Addr: cfg.RedisAddr, Dir: filepath.Join(dir, "redis"), AOF: cfg.RedisAOF, MaxMemory: cfg.RedisMaxMemory,
		})
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		stops = append(stops, redis.Stop)
		redisExited = redis.Exited()
		log.Info("redis up", "addr", cfg.RedisAddr, "data", filepath.Join(dir, "redis"))
		if err := clearDevFences(startCtx, cfg); err != nil {
			return fmt.Errorf("redis: %w", err)
		}

		consul, err := stack.StartConsul(startCtx, stack.ConsulConfig{HTTPAddr: cfg.ConsulAddr, Dir: filepath.Join(dir, "consul")})
		if err != nil {
			return fmt.Errorf("consul: %w", err)
		}
		stops = append(stops, consul.Stop)
		consulExited = consul.Exited()
		log.Info("consul up", "addr", cfg.ConsulAddr)
		if err := relistDevTopics(startCtx, cfg, log); err != nil {
			return fmt.Errorf("listing the topics of an earlier run: %w", err)
		}
	}
	if cfg.Logging.Tracing {
		stop, err := devTracing(startCtx, cfg, dir, log)
		if err != nil {
			return err
		}
		stops = append(stops, stop)
	}

	// The relay, in process: it holds the topic's lock in the dev Consul
	// and moves jobs into the dev Redis.
	rcfg := relay.DefaultConfig()
	rcfg.Listen = cfg.RelayAddr
	rcfg.Topics = cfg.topicNames()
	rcfg.FollowTopics = true // sluice topics create: served without a restart
	rcfg.Kafka.Brokers = []string{cfg.KafkaAddr}
	rcfg.ConsulAddr = cfg.ConsulAddr
	rcfg.RedisAddr = cfg.RedisAddr
	rcfg.Partitions = cfg.RedisPartitions
	rcfg.LockDelay = 0 // one relay: nobody to protect from a stale holder
	relayDone, err := run("relay", func() (chan error, func(context.Context) error, error) {
		return startPart("relay", cfg.RelayAddr, func() (*relay.Relay, error) {
			return relay.New(startCtx, rcfg, log.With("part", "relay"))
		})
	})
	if err != nil {
		return err
	}

	// The worker, in process: every job type runs the noop handler, type
	// "sleep" sleeps for its payload's {"ms": N}.
	wcfg := worker.DefaultConfig()
	wcfg.Listen = cfg.WorkerAddr
	wcfg.RedisAddr = cfg.RedisAddr
	wcfg.Topics = nil
	for _, t := range cfg.topicNames() {
		wcfg.Topics = append(wcfg.Topics, worker.TopicWeight{Topic: t, Weight: 1})
	}
	wcfg.FollowTopics = true // the topics sluice topics create adds, too
	wcfg.Partitions = cfg.RedisPartitions
	wcfg.Serve = cfg.WorkerServe
	wcfg.Drain = cfg.StopTimeout
	wcfg.ConsulAddr = cfg.ConsulAddr // execution rate limits, followed live
	wcfg.ResultTTL = cfg.ResultTTL
	handlers := builtinHandlers{handle: "sleep=sleep", other: "noop", http: cfg.HTTP}
	var workerDone chan error // nil without the built-in worker: never ready
	if cfg.Worker {
		workerDone, err = run("worker", func() (chan error, func(context.Context) error, error) {
			return startPart("worker", cfg.WorkerAddr, func() (*worker.Worker, error) {
				w, err := worker.New(wcfg, log.With("part", "worker"))
				if err != nil {
					return nil, err
				}
				return w, handlers.apply(w)
			})
		})
		if err != nil {
			return err
		}
	}

	// The coordinator, in process: it holds its lock in the dev Consul,
	// delivers completed bulk groups' callbacks and scales the worker's
	// partitions from its pool size (the base) up to 8x.
	ccfg := coordinator.DefaultConfig()
	ccfg.Listen = cfg.CoordinatorAddr
	ccfg.RedisAddr, ccfg.Partitions, ccfg.ConsulAddr = cfg.RedisAddr, cfg.RedisPartitions, cfg.ConsulAddr
	ccfg.Scaling.Base = wcfg.Workers
	ccfg.LockDelay = 0                               // one coordinator: nobody to protect from a stale holder
	ccfg.Periodic.GateURL = "http://" + cfg.GateAddr // the dev gate takes no token
	ccfg.CallbackAllow = devCallbackAllow
	ccfg.CallbackSecretFile = cfg.CallbackSecretFile
	// Loopback is open to callbacks here, the stack's own listeners not:
	// a group's callback must not drive the gate, the relay or the worker
	// (the coordinator's own listener, with the console's admin API, is
	// refused by the coordinator itself).
	ccfg.CallbackRefuse = []string{cfg.GateAddr, cfg.RelayAddr, cfg.WorkerAddr}
	// The console on the coordinator's listener, as sluice coordinator
	// serves it (docs/admin.md): the dev Kafka for the DLQ and the relay's
	// lag, the dev gate's counters for the funnel.
	concfg := coordinatorConsoleConfig()
	concfg.StageRedis, concfg.ConsulAddr = ccfg.StageRedis, ccfg.ConsulAddr
	concfg.Kafka.Brokers = cli.ListFlag{cfg.KafkaAddr}
	concfg.GateMetrics = []string{"http://" + cfg.GateAddr + "/metrics"}
	concfg.AdminTokens, concfg.AdminInsecure = cfg.AdminTokens, cfg.AdminInsecure
	if adminToken != "" {
		concfg.AdminTokens = adminToken + " admin"
	}
	concfg.SettingName = devSettingNames
	if cfg.CanaryInterval > 0 {
		// Canaries through the dev gate into every partition; until the
		// gate (started last) answers, the monitor retries each round.
		ccfg.Canary.Topics = cfg.topicNames()
		ccfg.Canary.GateURL = "http://" + cfg.GateAddr
		ccfg.Canary.Interval = cfg.CanaryInterval
		ccfg.Canary.Grace = cfg.CanaryInterval / 2
	}
	coordDone, err := run("coordinator", func() (chan error, func(context.Context) error, error) {
		return startPart("coordinator", cfg.CoordinatorAddr, func() (*coordinatorProcess, error) {
			return newCoordinatorProcess(ccfg, &concfg, log.With("part", "coordinator"))
		})
	})
	if err != nil {
		return err
	}

	// The gate, in-process, started last: its own context ends first on
	// shutdown, so it drains requests while Kafka is still up.
	gcfg := gate.DefaultConfig()
	gcfg.Listen = cfg.GateAddr
	gcfg.Kafka.Brokers = []string{cfg.KafkaAddr}
	gcfg.AllowNoAuth = true
	gcfg.CallbackAllow = devCallbackAllow
	gcfg.DrainTimeout = cfg.StopTimeout
	gcfg.Pprof, gcfg.PprofListen = cfg.Pprof, cfg.PprofListen
	gcfg.RedisAddr, gcfg.Partitions = cfg.RedisAddr, cfg.RedisPartitions // GET/DELETE /v1/groups/{id}
	gateDone, err := run("gate", func() (chan error, func(context.Context) error, error) {
		return startPart("gate", cfg.GateAddr, func() (*gate.Gate, error) {
			return gate.New(startCtx, gcfg, log.With("part", "gate"))
		})
	})
	if err != nil {
		return err
	}
	cancelStart()

	if cfg.OnlyPart != "" {
		childReady(stdout, cfg.OnlyPart) // the parent waits for this line
	} else {
		printBanner(stdout, cfg, dir, adminToken)
		printTracing(stdout, cfg)
		if len(children.pids) > 0 {
			fmt.Fprintf(stdout, "Each part runs in a process of its own (--split-processes): %s.\n", strings.Join(children.pids, ", "))
		}
	}
	if ready != nil {
		ready()
	}

	select {
	case <-ctx.Done():
		return nil
	case err := <-gateDone:
		gateDone <- err // for the stop function
		return fmt.Errorf("gate stopped: %v", err)
	case err := <-relayDone:
		relayDone <- err // for the stop function
		return fmt.Errorf("relay stopped: %v", err)
	case err := <-workerDone:
		workerDone <- err // for the stop function
		return fmt.Errorf("worker stopped: %v", err)
	case err := <-coordDone:
		coordDone <- err // for the stop function
		return fmt.Errorf("coordinator stopped: %v", err)
	case err := <-children.died:
		return err
	case <-redisExited:
		return fmt.Errorf("redis-server exited unexpectedly; see %s", filepath.Join(dir, "redis", "redis.log"))
	case <-consulExited:
		return fmt.Errorf("consul exited unexpectedly; see %s", filepath.Join(dir, "consul", "consul.log"))
	}
}

// startPart listens on addr, builds an in-process part and serves it on its
// own context, so that parts stop one by one in reverse order. done reports
// the part's end; stop ends it and waits, up to the stop context.
func startPart[S ops.Server](name, addr string, build func() (S, error)) (done chan error, stop func(context.Context) error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	part, err := build()
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- part.Serve(ctx, ln) }()
	return done, func(sctx context.Context) error {
		cancel()
		select {
		case err := <-done:
			done <- err // for the select in devStack, if it comes later
			return err
		case <-sctx.Done():
			return fmt.Errorf("%s did not stop in time: %w", name, sctx.Err())
		}
	}, nil
}

// clearDevFences removes the relay's fencing tokens left in Redis by an
// earlier run. The dev Consul agent keeps no state, so its lock indexes
// start over on every start while Redis (AOF) remembers the last run's
// tokens, which would fence the new relay out. Here that is safe: the
// agent was just started empty and this process runs the only relay.
// Production Consul keeps its state, and its tokens only grow.
func clearDevFences(ctx context.Context, cfg devConfig) error {
	layout := queue.Keyspace{Stage: "dev", Partitions: cfg.RedisPartitions}
	// Through the pool, as every part builds its clients.
	pool, err := openRedis(queue.PoolConfig{Keyspace: layout, Addr: cfg.RedisAddr})
	if err != nil {
		return err
	}
	defer pool.Close()
	// Every topic relayed before, too: one created with sluice topics
	// create has a fence of the last run's.
	names, err := pool.Topics(ctx, cfg.topicNames()...)
	if err != nil {
		return err
	}
	// One DEL per key: a partition's keys hash to a slot of their own.
	for _, t := range names {
		for p := range cfg.RedisPartitions {
			if err := pool.Client(p).Del(ctx, layout.Keys(queue.Queue{Topic: t, Part: p}).Fence()).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// relistDevTopics puts back in the dev Consul's topic list the topics an
// earlier run created with sluice topics create: the dev agent starts
// empty, while Kafka (kfake on disk) and Redis (AOF) keep them, so without
// this a restart would leave them unserved. A topic counts when a relay
// registered it in Redis and Kafka still has it with its .dlq.
func relistDevTopics(ctx context.Context, cfg devConfig, log *slog.Logger) error {
	pool, err := openRedis(queue.PoolConfig{Keyspace: queue.Keyspace{Stage: "dev", Partitions: cfg.RedisPartitions}, Addr: cfg.RedisAddr})
	if err != nil {
		return err
	}
	defer pool.Close()
	registered, err := pool.Topics(ctx)
	if err != nil {
		return err
	}
	var earlier []string
	for _, t := range registered {
		if !slices.Contains(cfg.topicNames(), t) {
			earlier = append(earlier, t)
		}
	}
	if len(earlier) == 0 {
		return nil
	}
	kc := kafka.Config{Brokers: []string{cfg.KafkaAddr}, ClientID: "sluice-dev", Version: "3.6.0", Compression: "none"}
	sc, err := kc.Sarama()
	if err != nil {
		return err
	}
	client, err := kc.Connect(ctx, sc)
	if err != nil {
		return err
	}
	defer client.Close()
	cc := consulapi.DefaultConfig()
	cc.Address = cfg.ConsulAddr
	consulClient, err := consulapi.NewClient(cc)
	if err != nil {
		return err
	}
	for _, t := range earlier {
		parts, err := client.Partitions(t)
		if err != nil {
			continue // deleted, or never in this Kafka
		}
		if _, err := client.Partitions(kafka.DLQTopic(t)); err != nil {
			continue
		}
		key, err := topics.Key("dev", t)
		if err != nil {
			continue
		}
		v, err := json.Marshal(topics.Spec{Partitions: len(parts), Replication: 1, Created: time.Now().UTC()})
		if err != nil {
			return err
		}
		if _, err := consulClient.KV().Put(&consulapi.KVPair{Key: key, Value: v}, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
			return err
		}
		log.Info("topic of an earlier run listed again", "topic", t)
	}
	return nil
}

// topicNames are the job topics sluice dev creates and serves: --topics,
// else --topic.
func (c devConfig) topicNames() []string {
	if len(c.Topics) > 0 {
		return slices.Clone(c.Topics)
	}
	return []string{c.Topic}
}

// quotedTopics are the topics for the banner: "jobs", "mail".
func (c devConfig) quotedTopics() string {
	var q []string
	for _, t := range c.topicNames() {
		q = append(q, strconv.Quote(t))
	}
	return strings.Join(q, ", ")
}

// devSettingNames names the console's settings, in the admin API's fixes,
// by the sluice dev flags that set them.
func devSettingNames(field string) string {
	flags := map[string]string{"RedisAddr": "redis-addr", "PartitionAddrs": "redis-addr", "ConsulAddr": "consul-addr",
		"Kafka.Brokers": "kafka-addr", "AdminTokens": "admin-tokens", "AdminTokensFile": "admin-tokens", "AdminInsecure": "admin-insecure"}
	if name, ok := flags[field]; ok {
		return "sluice dev's --" + name
	}
	return "the console's Config." + field
}

// devAdminToken is the admin token sluice dev generates when no tokens
// are given and the API is not insecure: 32 random bytes, hex, written to
// <dir>/admin-token (0600) so that `sluice ... --admin-token-file` finds it, and
// the same across restarts (a dashboard tab keeps working). "" when the
// operator chose tokens or --admin-insecure.
func devAdminToken(cfg devConfig, dir string) (string, error) {
	if cfg.AdminTokens != "" || cfg.AdminInsecure {
		return "", nil
	}
	path := filepath.Join(dir, "admin-token")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(raw[:])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	return tok, nil
}

// adminCommands are the admin commands the banner suggests, the same
// whichever way the admin API authenticates.
const adminCommands = "sluice stats --api    sluice dlq ls --source redis    sluice rate get    sluice groups ls    sluice scale show    sluice canary status"

// adminLines is the banner's part on the admin API: how to use the CLI and
// the dashboard against this stack.
func adminLines(cfg devConfig, dir, token string) string {
	coord := "http://" + cfg.CoordinatorAddr
	env := ""
	if coord != admin.DefaultURL {
		env = "SLUICE_ADMIN_URL=" + coord + " "
	}
	switch {
	case token != "":
		return fmt.Sprintf(`The admin API, the dashboard and the admin commands (docs/admin.md); the admin token is in %[1]s:
  dashboard  %[2]s/#token=%[3]s
  export %[4]sSLUICE_ADMIN_TOKEN_FILE=%[1]s
  %[5]s
`, filepath.Join(dir, "admin-token"), coord, token, env, adminCommands)
	case cfg.AdminInsecure:
		return fmt.Sprintf(`The admin API, the dashboard and the admin commands (docs/admin.md), without authentication (--admin-insecure):
  dashboard  %s/
  %s%s
`, coord, env, adminCommands)
	}
	return fmt.Sprintf(`The admin API, the dashboard and the admin commands (docs/admin.md), with the tokens of --admin-tokens:
  dashboard  %s/#token=<token>
  %sSLUICE_ADMIN_TOKEN=<token> %s
`, coord, env, adminCommands)
}

func printBanner(w io.Writer, cfg devConfig, dir, adminToken string) {
	gateURL := "http://" + cfg.GateAddr
	fmt.Fprintf(w, `
sluice dev is running (data in %s). Ctrl-C stops everything; jobs survive a restart.

  gate     %s   (no authentication: development only)
  metrics  %s/metrics   health %s/healthz   ready %s/readyz
  kafka    %s   topic %s with %d partitions, plus %s (%s)
  redis    %s   (AOF %s; maxmemory %s)
  consul   http://%s   (dev agent; KV starts empty on each start)
  relay    http://%s/metrics   topic %s into %d Redis partitions (rate: sluice/dev/relay/%s/rate in Consul), and every topic sluice topics create adds
%s  coord    http://%s/metrics   the coordinator: admin API /api/v1/ and dashboard /; bulk groups' callbacks (lock sluice/dev/coordinator/lock in Consul)
           and per-partition scaling on PWQD; parameters: sluice/dev/scaling in Consul, e.g. {"threshold": 50}
           heartbeat canaries through every partition every %s (sluice_canary_* metrics)

The stage funnel, the partitions and the canaries:
  sluice stats --redis-addr %s --redis-partitions %d --kafka-brokers %s --gate-metrics %s/metrics

Enqueue a job:
  curl -sS -X POST %s/v1/topics/%s/jobs -H 'Content-Type: application/json' \
    -d '{"type":"hello","payload":{"greeting":"<hi> & welcome"}}'

%s
`, dir, gateURL, gateURL, gateURL, gateURL, cfg.KafkaAddr, cfg.quotedTopics(), cfg.Partitions, kafkaCompanions(cfg), devKafkaName(cfg),
		cfg.RedisAddr, onOff(cfg.RedisAOF), cfg.RedisMaxMemory, cfg.ConsulAddr, cfg.RelayAddr, cfg.quotedTopics(), cfg.RedisPartitions, cfg.topicNames()[0], workerLines(cfg), cfg.CoordinatorAddr,
		canaryEvery(cfg.CanaryInterval), cfg.RedisAddr, cfg.RedisPartitions, cfg.KafkaAddr, gateURL, gateURL, cfg.topicNames()[0], adminLines(cfg, dir, adminToken))
	if f, ok := w.(*os.File); ok {
		f.Sync()
	}
}

// workerLines is the banner's part on the worker: the built-in one, or,
// with --worker=false, how to attach one's own.
func workerLines(cfg devConfig) string {
	if cfg.Worker {
		http := ""
		if cfg.HTTP != "" {
			http = "\n           http handler (POSTs the payload): " + cfg.HTTP
		}
		return fmt.Sprintf(`  worker   http://%s/metrics   serves topic %s, and every topic sluice topics create adds; every job type runs "noop"; type "sleep" sleeps {"ms": N}%s
           rate limits per resource (else tenant, else type): sluice/dev/limits/<resource> in Consul, e.g. {"rate": 10}
`, cfg.WorkerAddr, cfg.quotedTopics(), http)
	}
	env := ""
	for _, kv := range devWorkerSettings(cfg) {
		env += " SLUICE_WORKER_" + strings.ToUpper(strings.ReplaceAll(kv[0], "-", "_")) + "=" + kv[1]
	}
	flags := ""
	for _, kv := range devWorkerSettings(cfg) {
		flags += " --" + kv[0] + " " + kv[1]
	}
	return fmt.Sprintf(`  worker   none (--worker=false): jobs wait in Redis for a worker of your own (docs/worker.md#embedding), e.g.
             %sgo run ./examples/worker
           or with the flags:%s
           rate limits per resource (else tenant, else type): sluice/dev/limits/<resource> in Consul, e.g. {"rate": 10}
`, strings.TrimPrefix(env, " ")+" ", flags)
}

// devWorkerSettings are the flags (and so the SLUICE_WORKER_* variables)
// a worker of one's own needs to serve this stack's queues: the stage and
// partitions of its Redis, its topic, the Consul of its rate limits, and
// the address the built-in worker would have had for its /metrics.
func devWorkerSettings(cfg devConfig) [][2]string {
	return [][2]string{
		{"redis-addr", cfg.RedisAddr}, {"redis-partitions", strconv.Itoa(cfg.RedisPartitions)}, {"stage", "dev"},
		{"topics", strings.Join(cfg.topicNames(), ",")}, {"consul-addr", cfg.ConsulAddr}, {"listen", cfg.WorkerAddr},
	}
}

// kafkaCompanions names the topics' .retry and .dlq for the banner.
func kafkaCompanions(cfg devConfig) string {
	names := cfg.topicNames()
	if len(names) == 1 {
		return names[0] + kafka.RetrySuffix + " and " + names[0] + kafka.DLQSuffix
	}
	return "each one's " + kafka.RetrySuffix + " and " + kafka.DLQSuffix
}

func canaryEvery(d time.Duration) string {
	if d <= 0 {
		return "(off: --canary-interval 0)"
	}
	return d.String()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off: jobs do not survive a restart"
}

// devCallbackAllow lets sluice dev's callbacks reach receivers on this
// machine, which a deployment's gate and coordinator refuse
// (docs/secure/callbacks.md): dev listens on loopback alone.
var devCallbackAllow = []string{"127.0.0.0/8", "::1", "localhost"}

// The Kafkas `sluice dev --kafka` runs.
const (
	devKafkaFake   = "kfake"
	devKafkaApache = "apache"
)

// devKafkaName is the banner's name of the Kafka running.
func devKafkaName(cfg devConfig) string {
	if cfg.Kafka != devKafkaApache {
		return "kfake"
	}
	if home, err := stack.FindApacheKafka(); err == nil {
		return "Apache Kafka " + stack.ApacheKafkaVersion(home) + ", from " + home
	}
	return "Apache Kafka"
}

// startDevApacheKafka runs one real broker on port, its data kept in
// <dir>/kafka-apache across restarts, with both JIT compilers (for
// measurements) and a 512 MiB heap; stopping shuts it down gracefully.
func startDevApacheKafka(ctx context.Context, cfg devConfig, dir string, port int, topics map[string]int32, log *slog.Logger) (chan error, func(context.Context) error, error) {
	data := filepath.Join(dir, "kafka-apache")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, nil, err
	}
	broker, err := stack.StartApacheKafka(ctx, stack.ApacheKafkaConfig{
		Dir: data, ClientPorts: []int{port}, Persist: true, FullJIT: true, HeapMB: 512, Topics: topics,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("kafka (--kafka %s): %w", devKafkaApache, err)
	}
	log.Info("kafka up", "addr", cfg.KafkaAddr, "kafka", devKafkaName(cfg), "data", data, "log", broker.LogFile(1))
	return nil, func(ctx context.Context) error {
		err := broker.Shutdown(ctx)
		broker.Close()
		return err
	}, nil
}
