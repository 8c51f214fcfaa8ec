// Package gate is sluice's HTTP gateway (Slack's Kafkagate): it validates job
// envelopes and writes them synchronously to Kafka, answering only once Kafka
// acknowledged them. It keeps no state of its own, so any number of gates
// can run side by side.
package gate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
)

// Config configures a gate. Register sets the defaults.
type Config struct {
	Listen        string
	Kafka         kafka.Config
	Topics        cli.ListFlag
	TokensFile    string
	Tokens        string
	AllowNoAuth   bool
	MaxBodyBytes  int64
	MaxBatchBytes int64
	MaxBatchJobs  int
	MaxGroupItems int
	// Redis is where GET and DELETE /v1/groups/{id} read and cancel
	// groups; without an address those routes answer 501.
	Redis          queue.PoolConfig
	partitionAddrs string
	ProduceTimeout time.Duration
	// ProduceLinger is how long a record may wait for others to share its
	// Kafka produce request (default 1 ms; 0: sent at once). See
	// kafka.ProducerOptions.Linger.
	ProduceLinger   time.Duration
	RetryAfter      time.Duration
	DrainTimeout    time.Duration
	MetadataRefresh time.Duration
	Pprof           bool
	Logging         cli.Logging
}

func init() {
	cli.Describe("gate", "The HTTP gate: validates job envelopes and writes them to Kafka, answering 202 once Kafka acknowledged.\n"+
		"API: POST /v1/topics/{topic}/jobs, POST /v1/topics/{topic}/jobs:batch, POST /v1/topics/{topic}/groups,\n"+
		"GET and DELETE /v1/topics/{topic}/groups/{id} (with --redis-addr); ops: /healthz, /readyz, /metrics.\n"+
		"Without --tokens or --tokens-file it refuses to start unless --allow-no-auth is given.")
}

// Register adds the gate's flags to fs with their defaults.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", ":8080", "address to serve the enqueue API, /healthz, /readyz and /metrics on")
	c.Kafka.Register(fs, "sluice-gate")
	fs.Var(&c.Topics, "topics", "topics clients may write, comma-separated (empty: every existing topic but internal ones: *.dlq, *.retry, __*)")
	fs.StringVar(&c.TokensFile, "tokens-file", "", "file of bearer tokens, one per line: \"<token> <topic>[,<topic>...]\" or \"<token> *\"")
	fs.StringVar(&c.Tokens, "tokens", "", "bearer tokens inline, \"<token> <topics>\" separated by ';' (prefer the env variable or a file: flags show in ps)")
	fs.BoolVar(&c.AllowNoAuth, "allow-no-auth", false, "serve without bearer tokens (development only)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", 1<<20, "largest single-job request body in bytes (413 above)")
	fs.Int64Var(&c.MaxBatchBytes, "max-batch-bytes", 16<<20, "largest batch request body in bytes (413 above)")
	fs.IntVar(&c.MaxBatchJobs, "max-batch-jobs", 1000, "most jobs in one batch request (413 above)")
	fs.IntVar(&c.MaxGroupItems, "max-group-items", 10_000_000, "most items in one bulk group (the submission is cancelled above)")
	fs.StringVar(&c.Redis.Addr, "redis-addr", "", "Redis of the queue, for GET and DELETE /v1/groups/{id} (empty: those answer 501)")
	fs.StringVar(&c.Redis.Layout.Stage, "stage", "dev", "stage name (as the relay's), for the group routes")
	fs.IntVar(&c.Redis.Layout.Partitions, "redis-partitions", 8, "Redis partitions in the layout (as the relay's)")
	fs.StringVar(&c.partitionAddrs, "redis-partition-addrs", "", "partitions on Redis servers of their own: \"0=host:port,3=host:port\"")
	cli.DurationVar(fs, &c.ProduceTimeout, "produce-timeout", 5*time.Second, "longest wait for Kafka's acknowledgement before answering 504")
	cli.DurationVar(fs, &c.ProduceLinger, "produce-linger", time.Millisecond, "how long a record may wait for others to share its Kafka produce request (64 records go at once); 0: each request's records at once")
	cli.DurationVar(fs, &c.RetryAfter, "retry-after", time.Second, "Retry-After sent with 503 while Kafka is unreachable")
	cli.DurationVar(fs, &c.DrainTimeout, "drain-timeout", 15*time.Second, "on SIGTERM, how long in-flight requests may take to finish")
	cli.DurationVar(fs, &c.MetadataRefresh, "metadata-refresh", 10*time.Second, "how often to re-read Kafka's topic list")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go's profiler under /debug/pprof/ (diagnosis only)")
	c.Logging.Register(fs)
}

// Gate serves the enqueue API.
type Gate struct {
	cfg      Config
	log      *slog.Logger
	producer *kafka.Producer
	catalog  *kafka.Catalog
	auth     *Auth
	allowed  map[string]bool
	metrics  *metrics
	reg      *prometheus.Registry
	now      func() time.Time
	handler  http.Handler
	groups   *queue.Pool // nil without Config.Redis.Addr
}

// New connects to Kafka and returns a gate ready to serve. It fails when no
// broker answers, or when the token configuration is invalid or missing
// without AllowNoAuth.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Gate, error) {
	auth, err := LoadAuth(cfg.TokensFile, cfg.Tokens)
	if err != nil {
		return nil, err
	}
	if !auth.Enabled() && !cfg.AllowNoAuth {
		return nil, errors.New("no bearer tokens configured: set --tokens-file or SLUICE_GATE_TOKENS, or pass --allow-no-auth for development")
	}
	if cfg.MaxBodyBytes <= 0 || cfg.MaxBatchBytes <= 0 || cfg.MaxBatchJobs <= 0 {
		return nil, errors.New("--max-body-bytes, --max-batch-bytes and --max-batch-jobs must be positive")
	}
	// The envelope adds the gate's fields (id, id_given, topic, enqueued_at) to the
	// client's body; leave room for them under Kafka's record limit.
	producer, err := kafka.NewProducer(&cfg.Kafka, kafka.ProducerOptions{MaxMessageBytes: int(cfg.MaxBodyBytes) + 4096, Linger: cfg.ProduceLinger}, log)
	if err != nil {
		return nil, err
	}
	g := &Gate{
		cfg:      cfg,
		log:      log,
		producer: producer,
		auth:     auth,
		allowed:  map[string]bool{},
		reg:      ops.NewRegistry(),
		now:      time.Now,
	}
	for _, t := range cfg.Topics {
		g.allowed[t] = true
	}
	if cfg.Redis.Addr != "" {
		if cfg.partitionAddrs != "" {
			if cfg.Redis.PartitionAddrs, err = queue.ParsePartitionAddrs(cfg.partitionAddrs, cfg.Redis.Layout.Partitions); err != nil {
				producer.Close()
				return nil, fmt.Errorf("--redis-partition-addrs: %w", err)
			}
		}
		if g.groups, err = queue.NewPool(cfg.Redis); err != nil {
			producer.Close()
			return nil, err
		}
	}
	g.catalog = kafka.NewCatalog(ctx, producer.Client(), cfg.MetadataRefresh, log)
	g.metrics = newMetrics(g.reg)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/topics/{topic}", g.instrument("topic", g.serveTopic))
	mux.HandleFunc("/v1/topics/{topic}/jobs", g.instrument("job", g.serveJob))
	mux.HandleFunc("/v1/topics/{topic}/jobs:batch", g.instrument("batch", g.serveBatch))
	mux.HandleFunc("/v1/topics/{topic}/groups", g.instrument("group", g.serveGroup))
	mux.HandleFunc("/v1/topics/{topic}/groups/{id}", g.instrument("group_status", g.serveGroupStatus))
	mux.HandleFunc("/v1/groups/{id}", g.instrument("group_status", g.serveGroupStatus))
	ops.Mount(mux, g.reg, g.catalog.Ready)
	if cfg.Pprof {
		ops.MountPprof(mux)
	}
	g.handler = mux
	if !auth.Enabled() {
		log.Warn("authentication is off: any client may write any allowed topic (--allow-no-auth)")
	}
	return g, nil
}

// Handler is the gate's HTTP handler: the API plus /healthz, /readyz and
// /metrics.
func (g *Gate) Handler() http.Handler { return g.handler }

// Registry holds the gate's metrics.
func (g *Gate) Registry() *prometheus.Registry { return g.reg }

// Serve serves on ln until ctx ends, then drains in-flight requests and
// flushes the producer.
func (g *Gate) Serve(ctx context.Context, ln net.Listener) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go g.catalog.Run(cctx)
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      g.cfg.ProduceTimeout + time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	g.log.Info("gate serving", "addr", ln.Addr().String(), "brokers", strings.Join(g.cfg.Kafka.Brokers, ","))
	err := ops.Serve(ctx, g.log, srv, ln, g.cfg.DrainTimeout)
	if cerr := g.producer.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if g.groups != nil {
		g.groups.Close()
	}
	g.log.Info("gate stopped")
	return err
}

// Run listens on cfg.Listen and serves until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	return ops.ListenAndServe(ctx, "gate", cfg.Listen, func() (*Gate, error) { return New(ctx, cfg, log) })
}
