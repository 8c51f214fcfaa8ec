package coordinator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/callback"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
)

// Config configures a coordinator. Start from DefaultConfig: its values
// are the defaults each field names, and sluice coordinator's flags
// (RegisterFlags). The fields without a flag say so; they are for
// programs that embed the coordinator, and tests.
type Config struct {
	// Listen is the address sluice coordinator serves /healthz, /readyz
	// and /metrics on (Serve), and Handler: sluice coordinator's console,
	// the admin API and the dashboard, unless --console=false. A program
	// that embeds the coordinator listens itself, or calls Run, which
	// serves no HTTP. Default ":8083".
	Listen string
	// HTTP bounds each connection of Serve's listener (and, with sluice coordinator, the console on it): header,
	// body, answer and keep-alive timeouts, header size
	// (ops.HTTPLimits; a zero field: its default). Default:
	// ops.DefaultHTTPLimits.
	HTTP ops.HTTPLimits
	// Handler serves every path of Serve's listener but /healthz, /readyz
	// and /metrics: sluice coordinator puts the console's there (package
	// console: the admin API under /api/v1/ and the dashboard at /), so a
	// deployment keeps one listener. No flag: set it in code (sluice's
	// --console). Default nil: those paths answer 404.
	Handler http.Handler
	// StageRedis is where the Redis partitions live (Stage, RedisAddr,
	// Partitions, PartitionAddrs, as the relays' and the workers'); Stage
	// also names the Consul keys (sluice/<stage>/). Default: stage "dev",
	// 8 partitions on 127.0.0.1:6379.
	queue.StageRedis
	// Topics are read besides the topics the stage's relays registered
	// (queue.Pool.Topics): for a topic whose relay has not started yet.
	// The registry is read again every watcher round, scaling cycle and
	// stats cycle, so a topic a relay registers later is picked up
	// without a restart. Default: none (only the registered topics).
	Topics []string
	// Consul holds the coordinator's lock, the scaling parameters and
	// the pins.
	// Config is how it reaches Consul: ConsulAddr (--consul-addr), the
	// ACL token ConsulToken (--consul-token, --consul-token-file: read
	// again when Consul refuses it) and ConsulTLS (--consul-tls*); `sluice
	// consul-policy coordinator` prints the least ACL policy it needs
	// (docs/secure/consul.md). Default: "127.0.0.1:8500", no token, plain HTTP.
	consul.Config
	// LockTTL is the Consul session's TTL (Consul's minimum is 10s).
	// Default 10s.
	LockTTL time.Duration
	// LockDelay is Consul's lock-delay after a holder's session expires; 0
	// for none. Default 5s.
	LockDelay time.Duration
	// LockRetryWait is the wait between failed attempts to reach Consul.
	// No flag: set it in code (tests). Default 0: the consul package's,
	// 1s.
	LockRetryWait time.Duration
	// Holder names this process in the lock's value. No flag: set it in
	// code. Default "": host/pid.
	Holder string

	// GroupWait is how long a watcher blocks on its queue partition's
	// completed list (BLMOVE) before it looks around; whole seconds. A
	// group that completes ends the wait at once, and so does a stop (the
	// term's wait clients are closed). It is also how often the topic
	// registry is read for new topics to watch. Default 5s (1s until issue
	// 34: 8 BLMOVEs a second on 8 idle partitions).
	GroupWait time.Duration
	// RescanEvery is how often a watcher looks for groups left on its
	// queue partition's completing list by an earlier holder. Default 1m.
	RescanEvery time.Duration
	// Deliveries is how many groups a queue partition's watcher
	// aggregates or POSTs at once. A callback waiting for its retry holds
	// no slot, so a receiver that keeps failing delays only its own
	// groups (CallbackHostDeliveries bounds what one receiver holds while
	// POSTs are in flight). Default 8.
	Deliveries int
	// WaitConns is how many watchers may block on one Redis server at
	// once: each blocked BLMOVE holds a connection of a client pool kept
	// for them (so waiting never takes the connections the scaler, the
	// deliveries and the admin API use). The watchers of a Redis that
	// serves more queue partitions (topics x its partitions) than this
	// take turns, each waiting up to GroupWait: logged once, and a group
	// may then wait that long per turn. Default 256.
	WaitConns int
	// ReadChunk is how many items' states one Redis round trip reads.
	// Default 1000.
	ReadChunk int
	// Keep is how long a delivered (or given-up) group's status is kept.
	// Default 7 days.
	Keep time.Duration

	// CallbackTimeout bounds one POST, from dial to the end of the
	// answer. Default 10s.
	CallbackTimeout time.Duration
	// CallbackBackoff is the wait after the first failed attempt; it
	// doubles per attempt up to CallbackMaxBackoff, with ±20% jitter.
	// Default 1s.
	CallbackBackoff time.Duration
	// CallbackMaxBackoff is the longest wait between attempts. Default 5m.
	CallbackMaxBackoff time.Duration
	// CallbackMaxAttempts gives up after that many attempts (0: no
	// limit). Attempts count across coordinators: a new holder goes on
	// where the last one stopped. Default 20.
	CallbackMaxAttempts int
	// CallbackGiveUp gives up once the next attempt would start more than
	// that long after the first one (0: no limit). Default 24h.
	CallbackGiveUp time.Duration

	// CallbackAllow opens addresses callbacks may reach besides public
	// ones: CIDR prefixes, addresses and host names (allowed whatever they
	// resolve to). Default none: a callback whose host is or resolves to a
	// loopback, private, link-local, unspecified, multicast or otherwise
	// non-public address is refused (docs/secure/callbacks.md).
	CallbackAllow []string
	// CallbackSecretFile holds the secrets callbacks are signed with
	// (header Sluice-Signature), one per line, at most two during a
	// rotation, each at least 32 bytes, the file readable by its owner
	// only (docs/security.md#secret-files). New reads it, and fails on a
	// content it refuses; it is re-read before every attempt, and a
	// content refused then (emptied, a short secret) is logged and the
	// last good secrets sign on. Default "": not signed.
	CallbackSecretFile string
	// CallbackSignV1 also signs each callback with v1 (the body and time
	// only) beside v2 (which covers the group and attempt too), for
	// receivers that verify v1 only: the transition
	// (docs/secure/callbacks.md#signatures). Default true; a later
	// release turns it off.
	CallbackSignV1 bool
	// CallbackHostDeliveries is how many callback POSTs may be in flight
	// at once to one receiver host, across every queue partition: a slow
	// receiver holds that many, and other receivers' callbacks go on.
	// Default 4.
	CallbackHostDeliveries int
	// CallbackRefuse are more listeners of this process (host:port)
	// that callbacks may not reach whatever CallbackAllow, besides the
	// listener Serve serves on. No flag: sluice dev sets its other
	// parts'. Default none.
	CallbackRefuse []string
	// CallbackResolver resolves callback hosts. No flag: set it in code
	// (tests). Default nil: net.DefaultResolver.
	CallbackResolver callback.Resolver
	// CallbackDial opens a callback's connection to the address the guard
	// checked. No flag: set it in code (tests). Default nil: a net.Dialer.
	CallbackDial callback.DialFunc

	// SpillAbove is the size above which the default reducer writes a
	// callback body to a temporary file in SpillDir instead of holding it
	// in memory. Default 4 MiB.
	SpillAbove int64
	// SpillDir is the directory of those files. Default "": the system's
	// temporary directory.
	SpillDir string

	// ScaleEvery is the scaler's cycle: every partition's ready depth
	// (summed over the topics) and live workers are read, and SCALE_UP /
	// SCALE_DOWN commands pushed, this often. 0 turns the scaler off.
	// Default 5s.
	ScaleEvery time.Duration
	// Scaling are the scaling parameters when the Consul key
	// sluice/<stage>/scaling is absent; its fields override them live.
	// No flag sets Scaling.Paused: pause in Consul (sluice scale). Default
	// DefaultParams().
	Scaling Params
	// ConsumerTTL is how old a consumer's heartbeat may be and still
	// count; heartbeats ten times as old are removed. Default 15s.
	ConsumerTTL time.Duration

	// StatsEvery is how often the queue partitions' in-flight, delayed and
	// dead jobs and the stage funnel are read into metrics (stats.go); 0:
	// never. Default 5s.
	StatsEvery time.Duration
	// Canary configures the heartbeat canaries (canary.go); no topics:
	// none are sent. No flag sets Canary.Replan or
	// Canary.GateTLS.InsecureSkipVerify (tests only). Default
	// DefaultCanaryConfig(), without topics.
	Canary CanaryConfig
	// Periodic configures the periodic scheduler (periodic.go). No flag
	// sets Periodic.Clock or Periodic.GateTLS.InsecureSkipVerify (tests
	// only). Default DefaultPeriodicConfig(): on, posting to the gate on
	// localhost.
	Periodic PeriodicConfig

	// Reducer makes the reducer of each group. No flag: set it in code.
	// Default nil: JSONReducer.
	Reducer ReducerFactory
	// Now is the clock of the timestamps recorded. No flag: set it in code
	// (tests). Default nil: time.Now.
	Now func() time.Time
	// Sleep waits between callback attempts. No flag: set it in code
	// (tests). Default nil: a timer that ends early with ctx (and then
	// returns its error).
	Sleep func(ctx context.Context, d time.Duration) error
}

// DefaultConfig is the configuration sluice coordinator starts from.
func DefaultConfig() Config {
	return Config{
		HTTP:                ops.DefaultHTTPLimits(),
		Listen:              ":8083",
		StageRedis:          queue.DefaultStageRedis(),
		Config:              consul.DefaultConfig(),
		LockTTL:             10 * time.Second,
		LockDelay:           5 * time.Second,
		GroupWait:           5 * time.Second,
		RescanEvery:         time.Minute,
		Deliveries:          8,
		WaitConns:           256,
		ReadChunk:           1000,
		Keep:                7 * 24 * time.Hour,
		CallbackTimeout:     10 * time.Second,
		CallbackBackoff:     time.Second,
		CallbackMaxBackoff:  5 * time.Minute,
		CallbackMaxAttempts: 20,
		CallbackGiveUp:      24 * time.Hour,
		SpillAbove:          4 << 20,
		ScaleEvery:          5 * time.Second,
		Scaling:             DefaultParams(),
		ConsumerTTL:         15 * time.Second,
		StatsEvery:          5 * time.Second,
		Canary:              DefaultCanaryConfig(),
		Periodic:            DefaultPeriodicConfig(),

		// Callbacks' signatures and per-host deliveries (issue 31).
		CallbackSignV1: true, CallbackHostDeliveries: 4,
	}
}

func init() {
	cli.Describe("coordinator", "The coordinator: the holder of the Consul lock sluice/<stage>/coordinator/lock watches every queue partition\n"+
		"(each topic's, on each Redis partition) for completed bulk groups, aggregates their items' results and POSTs each\n"+
		"group's callback, retried with backoff until a 2xx or given up (callback_state failed). It also scales each\n"+
		"partition's workers on its per-worker queue depth (PWQD = ready jobs of every topic / live workers): SCALE_UP /\n"+
		"SCALE_DOWN commands on the partition's cmd list. The topics are those the relays registered, plus --topics. The --scale-* flags are defaults; the JSON in Consul KV sluice/<stage>/scaling overrides them live.\n"+
		"With --canary-topics it also runs the heartbeat canary monitor (see sluice canary).\n"+
		"Other coordinators stand by. Ops: /healthz, /readyz, /metrics. Every coordinator, standby too, also serves the\n"+
		"console (as sluice console does) on --listen: the admin API under /api/v1/ (bearer tokens from --admin-tokens /\n"+
		"--admin-tokens-file; docs/admin.md) and the web dashboard at /, unless --console=false.")
}

// RegisterFlags adds the coordinator's flags to fs, bound to c's fields,
// with c's values as their defaults. internal/cli.Parse gives each its
// SLUICE_* fallbacks.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "address for /healthz, /readyz and /metrics (and the console's admin API and dashboard, with --console)")
	c.HTTP.RegisterFlags(fs, "the coordinator's --listen (and the console on it)")
	c.StageRedis.RegisterFlags(fs)
	fs.Lookup("redis-partitions").Usage = "Redis partitions in the layout (as the relay's and the workers')"
	cli.StringsVar(fs, &c.Topics, "topics", c.Topics, "topics whose queues are read besides those the relays registered (their relays have not started yet), comma-separated; default none")
	c.Config.RegisterFlags(fs)
	cli.DurationVar(fs, &c.LockTTL, "lock-ttl", c.LockTTL, "TTL of the coordinator's Consul session (Consul's minimum is 10s)")
	cli.DurationVar(fs, &c.LockDelay, "lock-delay", c.LockDelay, "Consul lock-delay after a holder's session expires; 0 for none")
	cli.DurationVar(fs, &c.GroupWait, "group-wait", c.GroupWait, "how long a queue partition's watcher blocks for a completed group (whole seconds; a group that completes, or a stop, ends the wait at once); also how often the registered topics are read for new ones to watch")
	cli.DurationVar(fs, &c.RescanEvery, "rescan-every", c.RescanEvery, "how often to look for groups an earlier coordinator left mid-delivery")
	fs.IntVar(&c.Deliveries, "deliveries", c.Deliveries, "groups aggregated or POSTed at once per queue partition (a callback waiting for its retry holds none)")
	fs.IntVar(&c.WaitConns, "wait-conns", c.WaitConns, "Redis connections per Redis server for the watchers' blocking waits, one per queue partition (topics x partitions) waiting; beyond that they take turns")
	fs.IntVar(&c.ReadChunk, "read-chunk", c.ReadChunk, "items' states read per Redis round trip when aggregating a group")
	cli.DurationVar(fs, &c.Keep, "keep", c.Keep, "how long a finished group's status (GET /v1/groups/{id}) is kept")
	cli.DurationVar(fs, &c.CallbackTimeout, "callback-timeout", c.CallbackTimeout, "time limit of one callback POST, answer included")
	cli.DurationVar(fs, &c.CallbackBackoff, "callback-backoff", c.CallbackBackoff, "wait after the first failed attempt; doubles per attempt, with ±20% jitter")
	cli.DurationVar(fs, &c.CallbackMaxBackoff, "callback-max-backoff", c.CallbackMaxBackoff, "longest wait between attempts")
	fs.IntVar(&c.CallbackMaxAttempts, "callback-max-attempts", c.CallbackMaxAttempts, "give up after this many attempts (0: no limit)")
	cli.DurationVar(fs, &c.CallbackGiveUp, "callback-give-up", c.CallbackGiveUp, "give up once the next attempt would start this long after the first (0: no limit)")
	cli.StringsVar(fs, &c.CallbackAllow, "callback-allow", c.CallbackAllow, "addresses callbacks may reach besides public ones: CIDR prefixes, addresses and host names, comma-separated; beyond them loopback, private, link-local and the like are refused")
	fs.StringVar(&c.CallbackSecretFile, "callback-secret-file", c.CallbackSecretFile, "file of the secrets callbacks are signed with (header Sluice-Signature), one per line, two during a rotation, each at least 32 bytes, the file mode 0600; re-read before every attempt (a refused content keeps the last good secrets)")
	fs.BoolVar(&c.CallbackSignV1, "callback-sign-v1", c.CallbackSignV1, "also sign callbacks with v1 (body and time only) beside v2, for receivers that verify v1 only (the transition; docs/secure/callbacks.md)")
	fs.IntVar(&c.CallbackHostDeliveries, "callback-host-deliveries", c.CallbackHostDeliveries, "callback POSTs in flight at once to one receiver host, across every queue partition")
	fs.Int64Var(&c.SpillAbove, "spill-above", c.SpillAbove, "callback bodies larger than this many bytes are built in a temporary file, not in memory")
	fs.StringVar(&c.SpillDir, "spill-dir", c.SpillDir, "directory for those files (default: the system's temporary directory)")
	cli.DurationVar(fs, &c.ScaleEvery, "scale-every", c.ScaleEvery, "scaling cycle: every partition's ready depth (summed over the topics) and live workers are read this often (0: no scaling)")
	fs.Float64Var(&c.Scaling.Threshold, "scale-threshold", c.Scaling.Threshold, "PWQD (ready jobs per live worker) above which a partition is under pressure")
	fs.IntVar(&c.Scaling.Cycles, "scale-cycles", c.Scaling.Cycles, "consecutive cycles above the threshold before the workers double (K)")
	fs.IntVar(&c.Scaling.Base, "scale-base", c.Scaling.Base, "workers per consumer the scaler never goes below; set it to the workers' --workers")
	fs.IntVar(&c.Scaling.MaxFactor, "scale-max-factor", c.Scaling.MaxFactor, "the most workers per consumer, as a multiple of the base")
	fs.IntVar(&c.Scaling.Max, "scale-max", c.Scaling.Max, "the most workers per consumer, instead of base x factor (0: base x factor)")
	cli.DurationVar(fs, &c.Scaling.HalfLife, "scale-half-life", c.Scaling.HalfLife, "once the load has fallen, the workers decay half the way to the base per half-life")
	cli.DurationVar(fs, &c.ConsumerTTL, "consumer-ttl", c.ConsumerTTL, "a consumer's heartbeat older than this no longer counts (ten times older: removed)")
	cli.DurationVar(fs, &c.StatsEvery, "stats-every", c.StatsEvery, "how often the queue partitions' in-flight, delayed and dead jobs and the stage funnel are read into metrics (0: never)")
	c.Canary.RegisterFlags(fs)
	c.Periodic.RegisterFlags(fs)
}

// RegisterFlags adds the canary monitor's flags to fs, bound to c's
// fields, with c's values as their defaults: sluice coordinator's and
// sluice canary's.
func (c *CanaryConfig) RegisterFlags(fs *flag.FlagSet) {
	cli.StringsVar(fs, &c.Topics, "canary-topics", c.Topics, "topics to send heartbeat canaries through, comma-separated (none: no canaries)")
	fs.StringVar(&c.GateURL, "canary-gate", c.GateURL, "the gate canaries go through (https://host:port for a gate serving HTTPS)")
	c.GateTLS.Register(fs, "canary-gate", "the gate")
	cli.SecretVar(fs, &c.Token, "canary-token", "the gate's bearer token for canaries: its scope needs the topics and +canary (e.g. \"<token> *,+canary\")")
	cli.DurationVar(fs, &c.Interval, "canary-interval", c.Interval, "time between canaries along each path (at least 1s)")
	cli.DurationVar(fs, &c.Grace, "canary-grace", c.Grace, "a path alerts when its newest completed canary is older than 2 intervals plus this (0: half an interval)")
	fs.StringVar(&c.Webhook, "canary-webhook", c.Webhook, "URL that gets a JSON POST when canary alerts fire and when they clear")
	cli.DurationVar(fs, &c.Timeout, "canary-timeout", c.Timeout, "time limit of each call to the gate and the webhook")
}

// check validates the configuration; its errors name the field.
func (c *Config) check() error {
	if err := c.StageRedis.Validate(); err != nil {
		return fmt.Errorf("coordinator: Config.%w", err)
	}
	switch {
	case c.Deliveries < 1:
		return errors.New("coordinator: Config.Deliveries: must be at least 1")
	case c.CallbackHostDeliveries < 1:
		return errors.New("coordinator: Config.CallbackHostDeliveries: must be at least 1")
	case c.WaitConns < 1:
		return errors.New("coordinator: Config.WaitConns: must be at least 1")
	case c.ReadChunk < 1:
		return errors.New("coordinator: Config.ReadChunk: must be at least 1")
	case c.Keep <= 0:
		return errors.New("coordinator: Config.Keep: must be positive")
	case c.CallbackTimeout <= 0:
		return errors.New("coordinator: Config.CallbackTimeout: must be positive")
	case c.CallbackBackoff <= 0 || c.CallbackMaxBackoff < c.CallbackBackoff:
		return fmt.Errorf("coordinator: Config.CallbackBackoff %s and Config.CallbackMaxBackoff %s: want 0 < backoff <= max", c.CallbackBackoff, c.CallbackMaxBackoff)
	case c.CallbackMaxAttempts < 0:
		return errors.New("coordinator: Config.CallbackMaxAttempts: must not be negative")
	case c.GroupWait <= 0:
		return errors.New("coordinator: Config.GroupWait: must be positive")
	case c.RescanEvery <= 0:
		return errors.New("coordinator: Config.RescanEvery: must be positive")
	case c.ScaleEvery < 0:
		return errors.New("coordinator: Config.ScaleEvery: must not be negative (0 turns scaling off)")
	case c.ScaleEvery > 0 && c.ConsumerTTL <= 0:
		return errors.New("coordinator: Config.ConsumerTTL: must be positive")
	case c.StatsEvery < 0:
		return errors.New("coordinator: Config.StatsEvery: must not be negative (0 turns it off)")
	}
	for _, t := range c.Topics {
		if err := queue.ValidTopic(t); err != nil {
			return fmt.Errorf("coordinator: Config.Topics: %w", err)
		}
	}
	if err := c.Canary.check(); err != nil {
		return fmt.Errorf("coordinator: Config.Canary.%w", err)
	}
	if err := c.Periodic.check(); err != nil {
		return fmt.Errorf("coordinator: Config.Periodic.%w", err)
	}
	if c.ScaleEvery > 0 {
		if err := c.Scaling.Check(); err != nil {
			return fmt.Errorf("coordinator: Config.Scaling: %w", err)
		}
	}
	return nil
}
