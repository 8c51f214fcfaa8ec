package gate

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/callback"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// Config configures a gate. Start from DefaultConfig: its values are the
// defaults each field names, and sluice gate's flags (RegisterFlags).
type Config struct {
	// Listen is the address sluice gate serves the API, /healthz, /readyz
	// and /metrics on (Serve); a program that embeds the gate listens
	// itself. Default ":8080".
	Listen string
	// TLS, with a certificate and key, makes Serve answer HTTPS only on
	// its listener (the API, /healthz, /readyz and /metrics alike), with
	// a renewed certificate picked up from the same files without a
	// restart; with ClientCAFile, every client must show a certificate
	// that CA signed (mutual TLS). New fails on a file it cannot load.
	// Default: no files, plain HTTP.
	TLS tlsfiles.Server
	// Kafka is where jobs are written. Default: brokers 127.0.0.1:9092,
	// client id "sluice-gate", protocol version 3.6.0, no compression.
	// No TLS and no SASL unless the --kafka-tls* and --kafka-sasl-* flags
	// ask (docs/secure/kafka.md). No flag: TLS.InsecureSkipVerify (tests).
	Kafka kafka.Config
	// Topics are the topics clients may write. Default: none, meaning every
	// existing topic but internal ones (*.dlq, *.retry, __*).
	Topics []string
	// TokensFile is a file of bearer tokens, one per line: "<token>
	// <topic>[,<topic>...]" or "<token> *". Default "": none.
	TokensFile string
	// Tokens are bearer tokens inline, "<token> <topics>" separated by ';'.
	// Default "": none.
	Tokens string
	// TokensCheckEvery is how often TokensFile is looked at for a change
	// (SIGHUP reads it at once). Default 1s.
	TokensCheckEvery time.Duration
	// AllowNoAuth serves without bearer tokens (development only); without
	// it and without tokens New refuses. Default false.
	AllowNoAuth bool
	// MaxBodyBytes is the largest single-job request body (413 above).
	// Default 1 MiB.
	MaxBodyBytes int64
	// MaxBatchBytes is the largest batch request body (413 above).
	// Default 16 MiB.
	MaxBatchBytes int64
	// MaxBatchJobs is the most jobs in one batch request (413 above).
	// Default 1000.
	MaxBatchJobs int
	// MaxGroupItems is the most items in one bulk group; the submission is
	// cancelled above. Default 10,000,000.
	MaxGroupItems int
	// CallbackAllow opens addresses a job's or a group's callback_url may
	// reach besides public ones: CIDR prefixes, addresses and host names
	// (allowed whatever they resolve to), as the coordinator's. Default
	// none: a callback_url whose host is or resolves to a loopback,
	// private, link-local, unspecified, multicast or otherwise non-public
	// address is refused with a 400 (docs/secure/callbacks.md).
	CallbackAllow []string
	// CallbackResolveTimeout bounds the lookup of a callback_url's host.
	// Default 2s.
	CallbackResolveTimeout time.Duration
	// CallbackResolveBudget bounds all the callback_url lookups of one
	// batch (POST .../jobs:batch), each host looked up once: the jobs
	// whose lookup would start or run past it are rejected (400) with a
	// reason that says so, the others go on. Default 5s.
	CallbackResolveBudget time.Duration
	// CallbackResolver resolves callback_url hosts. No flag: set it in
	// code (tests). Default nil: net.DefaultResolver.
	CallbackResolver callback.Resolver
	// StageRedis is where GET and DELETE /v1/groups/{id} read and cancel
	// groups: the relay's stage and Redis partitions. Without a RedisAddr
	// those routes answer 501. Default: stage "dev", no RedisAddr, 8
	// partitions, no PartitionAddrs.
	queue.StageRedis
	// ProduceTimeout is the longest wait for Kafka's acknowledgement
	// before answering 504. Default 5s.
	ProduceTimeout time.Duration
	// ProduceLinger is how long a record may wait for others to share its
	// Kafka produce request (64 records go at once); 0: each request's
	// records at once. See kafka.ProducerOptions.Linger. Default 5ms: at a
	// tenth of the maximum rate a request then carries about six records
	// instead of one, which takes a quarter off the pipeline's CPU per
	// job (Kafka's and the relay's halve: they pay per request and per
	// fetched batch), for about 4 ms more from POST to start
	// (BENCHMARKS.md, "Steady loads").
	ProduceLinger time.Duration
	// ShortISRHold is how often the gate asks Kafka whether a partition
	// whose leader refused an acks=all write for too few in-sync replicas
	// is whole again; until then its acks=all jobs are answered 503 at
	// once, without a trip to Kafka. 0: every job goes to Kafka and waits
	// its turn behind the client's retries of the refused ones (up to the
	// produce timeout: a 504). See kafka.ProducerOptions.ShortISRHold.
	// Default 1s.
	ShortISRHold time.Duration
	// RetryAfter is the Retry-After sent with 503 while Kafka is
	// unreachable. Default 1s.
	RetryAfter time.Duration
	// DrainTimeout is how long in-flight requests may take to finish once
	// Serve's context ends. Default 15s.
	DrainTimeout time.Duration
	// MetadataRefresh is how often Kafka's topic list is read again.
	// Default 10s.
	MetadataRefresh time.Duration
	// Pprof serves Go's profiler under /debug/pprof/ on PprofListen
	// (diagnosis only): never on Listen, since it authenticates no one;
	// /debug/pprof/cmdline is not served (inline secrets). Serve only.
	// Default false.
	Pprof bool
	// PprofListen is the loopback address Pprof serves on; New refuses
	// any other. Default "127.0.0.1:6060".
	PprofListen string
	// HTTP bounds each connection of Serve's listener: header, body,
	// answer and keep-alive timeouts, header size (ops.HTTPLimits). A
	// bulk group's body extends the read deadline by HTTP.ReadTimeout
	// after each chunk of items it wrote. Default: ops.DefaultHTTPLimits,
	// WriteTimeout ProduceTimeout plus 1m (65s).
	HTTP ops.HTTPLimits
}

// DefaultConfig is the configuration sluice gate starts from.
func DefaultConfig() Config {
	loc := queue.DefaultStageRedis()
	loc.RedisAddr = "" // the group routes are optional
	return Config{
		Listen:                 ":8080",
		Kafka:                  kafka.Config{Brokers: cli.ListFlag{"127.0.0.1:9092"}, ClientID: "sluice-gate", Version: "3.6.0", Compression: "none"},
		MaxBodyBytes:           1 << 20,
		MaxBatchBytes:          16 << 20,
		MaxBatchJobs:           1000,
		CallbackResolveTimeout: 2 * time.Second,
		CallbackResolveBudget:  5 * time.Second,
		TokensCheckEvery:       time.Second,
		MaxGroupItems:          10_000_000,
		StageRedis:             loc,
		ProduceTimeout:         5 * time.Second,
		ProduceLinger:          5 * time.Millisecond,
		ShortISRHold:           time.Second,
		RetryAfter:             time.Second,
		DrainTimeout:           15 * time.Second,
		MetadataRefresh:        10 * time.Second,
		PprofListen:            "127.0.0.1:6060",
		HTTP:                   gateHTTPLimits(5 * time.Second),
	}
}

// gateHTTPLimits are the default limits with an answer's time for a
// produce's wait.
func gateHTTPLimits(produceTimeout time.Duration) ops.HTTPLimits {
	l := ops.DefaultHTTPLimits()
	l.WriteTimeout = produceTimeout + time.Minute
	return l
}

func init() {
	cli.Describe("gate", "The HTTP gate: validates job envelopes and writes them to Kafka, answering 202 once Kafka acknowledged.\n"+
		"API: POST /v1/topics/{topic}/jobs, POST /v1/topics/{topic}/jobs:batch, POST /v1/topics/{topic}/groups,\n"+
		"GET and DELETE /v1/topics/{topic}/groups/{id}, GET /v1/topics/{topic}/jobs/{id} (with --redis-addr); ops: /healthz, /readyz, /metrics.\n"+
		"Without --tokens or --tokens-file it refuses to start unless --allow-no-auth is given.\n"+
		"With --tls-cert-file and --tls-key-file it serves HTTPS only (a renewed certificate is read without a restart);\n"+
		"--tls-client-ca-file asks every client for a certificate (docs/secure/https.md).")
}

// RegisterFlags adds the gate's flags to fs, bound to c's fields, with c's
// values as their defaults. internal/cli.Parse gives each its SLUICE_*
// fallbacks.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "address to serve the enqueue API, /healthz, /readyz and /metrics on")
	c.TLS.Register(fs, "", "the gate (its API, /healthz, /readyz and /metrics)")
	cli.KeepValues(fs, &c.Kafka, func() { c.Kafka.Register(fs, c.Kafka.ClientID) })
	cli.StringsVar(fs, &c.Topics, "topics", c.Topics, "topics clients may write, comma-separated (empty: every existing topic but internal ones: *.dlq, *.retry, __*)")
	fs.StringVar(&c.TokensFile, "tokens-file", c.TokensFile, "file of bearer tokens, one per line: \"<token> <topic>[,<topic>...] [<name>]\" or \"<token> *\"; re-read when it changes and on SIGHUP")
	fs.StringVar(&c.Tokens, "tokens", c.Tokens, "bearer tokens inline, \"<token> <topics>\" separated by ';' (prefer --tokens-file, or the environment: flags show in ps)")
	cli.DurationVar(fs, &c.TokensCheckEvery, "tokens-check-every", c.TokensCheckEvery, "how often --tokens-file is looked at for a change (SIGHUP reads it at once)")
	fs.BoolVar(&c.AllowNoAuth, "allow-no-auth", c.AllowNoAuth, "serve without bearer tokens (development only)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest single-job request body in bytes (413 above)")
	fs.Int64Var(&c.MaxBatchBytes, "max-batch-bytes", c.MaxBatchBytes, "largest batch request body in bytes (413 above)")
	fs.IntVar(&c.MaxBatchJobs, "max-batch-jobs", c.MaxBatchJobs, "most jobs in one batch request (413 above)")
	fs.IntVar(&c.MaxGroupItems, "max-group-items", c.MaxGroupItems, "most items in one bulk group (the submission is cancelled above)")
	cli.StringsVar(fs, &c.CallbackAllow, "callback-allow", c.CallbackAllow, "addresses a callback_url may reach besides public ones: CIDR prefixes, addresses and host names, comma-separated; beyond them loopback, private, link-local and the like are refused with a 400")
	cli.DurationVar(fs, &c.CallbackResolveTimeout, "callback-resolve-timeout", c.CallbackResolveTimeout, "time limit of the lookup of a callback_url's host")
	cli.DurationVar(fs, &c.CallbackResolveBudget, "callback-resolve-budget", c.CallbackResolveBudget, "time limit of all the callback_url lookups of one batch (each host once); jobs past it are rejected")
	c.StageRedis.RegisterFlags(fs)
	fs.Lookup("redis-addr").Usage = "Redis of the queue, for GET and DELETE /v1/groups/{id} (empty: those answer 501)"
	fs.Lookup("stage").Usage = "stage name (as the relay's), for the group routes"
	fs.Lookup("redis-partitions").Usage = "Redis partitions in the layout (as the relay's)"
	cli.DurationVar(fs, &c.ProduceTimeout, "produce-timeout", c.ProduceTimeout, "longest wait for Kafka's acknowledgement before answering 504")
	cli.DurationVar(fs, &c.ProduceLinger, "produce-linger", c.ProduceLinger, "how long a record may wait for others to share its Kafka produce request (64 records go at once); 0: each request's records at once")
	cli.DurationVar(fs, &c.ShortISRHold, "short-isr-hold", c.ShortISRHold, "after a partition's leader refused acks=all for too few in-sync replicas, its acks=all jobs are answered 503 at once, and Kafka is asked this often whether it is whole again (0: always sent, waiting behind the retries)")
	cli.DurationVar(fs, &c.RetryAfter, "retry-after", c.RetryAfter, "Retry-After sent with 503 while Kafka is unreachable")
	cli.DurationVar(fs, &c.DrainTimeout, "drain-timeout", c.DrainTimeout, "on SIGTERM, how long in-flight requests may take to finish")
	cli.DurationVar(fs, &c.MetadataRefresh, "metadata-refresh", c.MetadataRefresh, "how often to re-read Kafka's topic list")
	fs.BoolVar(&c.Pprof, "pprof", c.Pprof, "serve Go's profiler under /debug/pprof/ on --pprof-listen (diagnosis only; not on --listen: it authenticates no one)")
	fs.StringVar(&c.PprofListen, "pprof-listen", c.PprofListen, "loopback address --pprof serves on (127.0.0.1:PORT, [::1]:PORT or localhost:PORT; reach it from elsewhere with ssh -L)")
	c.HTTP.RegisterFlags(fs, "the gate's --listen")
}

// validate checks what New cannot do without; its errors name the field.
func (c *Config) validate() error {
	switch {
	case c.MaxBodyBytes <= 0:
		return errors.New("gate: Config.MaxBodyBytes: must be positive")
	case c.MaxBatchBytes <= 0:
		return errors.New("gate: Config.MaxBatchBytes: must be positive")
	case c.MaxBatchJobs <= 0:
		return errors.New("gate: Config.MaxBatchJobs: must be positive")
	case c.CallbackResolveTimeout <= 0:
		return errors.New("gate: Config.CallbackResolveTimeout: must be positive")
	case c.CallbackResolveBudget <= 0:
		return errors.New("gate: Config.CallbackResolveBudget: must be positive")
	case c.HTTP.OrDefaults().WriteTimeout <= c.ProduceTimeout:
		return fmt.Errorf("gate: Config.HTTP.WriteTimeout (%s) must be longer than Config.ProduceTimeout (%s): an answer waits for Kafka's", c.HTTP.OrDefaults().WriteTimeout, c.ProduceTimeout)
	}
	if c.Pprof {
		if err := ops.CheckLoopback(c.PprofListen); err != nil {
			return fmt.Errorf("gate: Config.PprofListen %w", err)
		}
	}
	if c.RedisAddr != "" {
		if err := c.StageRedis.Validate(); err != nil {
			return fmt.Errorf("gate: Config.%w", err)
		}
	}
	return nil
}
