package console

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/scaling"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// Config configures a console. Start from DefaultConfig: its values are
// the defaults each field names, and sluice console's flags
// (RegisterFlags). The fields without a flag say so; they are for
// programs that embed the console (sluice coordinator, which runs one in
// its process), and tests.
type Config struct {
	// Listen is the address sluice console serves the admin API, the
	// dashboard, /healthz, /readyz and /metrics on (Serve); a program that
	// embeds the console serves Handler itself. Default ":8084".
	Listen string
	// HTTP bounds each connection of Serve's listener (the admin API, the dashboard, /healthz, /readyz and /metrics): header,
	// body, answer and keep-alive timeouts, header size
	// (ops.HTTPLimits; a zero field: its default). Default:
	// ops.DefaultHTTPLimits.
	HTTP ops.HTTPLimits
	// TLS, with a certificate and key, makes Serve answer HTTPS only on
	// its listener (the admin API, the dashboard, /healthz, /readyz and
	// /metrics alike), with a renewed certificate picked up from the same
	// files without a restart; with ClientCAFile, every client (browser,
	// CLI) must show a certificate that CA signed (mutual TLS). New fails
	// on a file it cannot load. sluice coordinator serves its whole
	// listener with it. Default: no files, plain HTTP.
	TLS tlsfiles.Server
	// StageRedis is where the Redis partitions live (Stage, RedisAddr,
	// Partitions, PartitionAddrs, as the other parts'); Stage also names
	// the Consul keys (sluice/<stage>/). Default: stage "dev", 8
	// partitions on 127.0.0.1:6379.
	queue.StageRedis
	// Topics are read besides the topics the stage's relays registered
	// (queue.Pool.Topics), as the coordinator's Config.Topics: for a topic
	// whose relay has not started yet. Default: none.
	Topics []string
	// Consul holds the rates, limits and scale pins the console reads
	// and writes.
	// Config is how it reaches Consul: ConsulAddr (--consul-addr), the
	// ACL token ConsulToken (--consul-token, --consul-token-file: read
	// again when Consul refuses it) and ConsulTLS (--consul-tls*); `sluice
	// consul-policy console` prints the least ACL policy it needs
	// (docs/secure/consul.md). Default: "127.0.0.1:8500", no token, plain HTTP.
	consul.Config
	// ConsumerTTL is how old a worker consumer's heartbeat may be and
	// still count as live, as the coordinator's. Default 15s.
	ConsumerTTL time.Duration

	// AdminTokens are the admin API's bearer tokens with their roles:
	// "<token> admin;<token> read" (kept as SHA-256 hashes). Default "".
	AdminTokens string
	// AdminTokensFile is a file of admin API tokens, one "<token> <role>"
	// per line (role read or admin), # comments, readable by its owner
	// only (docs/security.md#secret-files). Re-read when it changes; a
	// content that leaves no token is refused and logged, and the last
	// good tokens stay in force. Default "".
	AdminTokensFile string
	// TokensCheckEvery is how often AdminTokensFile is looked at for a
	// change (SIGHUP reads it at once). Default 1s.
	TokensCheckEvery time.Duration
	// AdminInsecure, without tokens, serves the admin API to anyone as
	// admin (sluice dev on localhost only); without it and without tokens
	// the API answers 403. With AdminTokens or AdminTokensFile it is an
	// error of New. Default false.
	AdminInsecure bool
	// Auth checks the bearer tokens. No flag: New builds it from
	// AdminTokens, AdminTokensFile and AdminInsecure when it is nil.
	// Default nil.
	Auth *admin.Auth

	// Kafka, with brokers, is where the relay's <topic>.dlq is read and
	// replayed to the topic, and the relays' lag read; without brokers
	// those answer 503. Default: no brokers, client id "sluice-console",
	// protocol version 3.6.0, no compression.
	// No TLS and no SASL unless the --kafka-tls* and --kafka-sasl-* flags
	// ask (docs/secure/kafka.md). No flag: TLS.InsecureSkipVerify (tests).
	Kafka kafka.Config
	// ConsumerGroup is the relays' consumer group (relay
	// Config.ConsumerGroup): their lag is read as <group>.<topic>.
	// Default "sluice-relay".
	ConsumerGroup string
	// GateMetrics are the gates' /metrics URLs, for the gate's counts in
	// GET /api/v1/stats. Default: none.
	GateMetrics []string
	// GateMetricsTLS is the TLS of GateMetrics URLs that are https://:
	// the CA that signs the gates' certificates, a client certificate for
	// gates that ask for one. Default: no files, the system's roots.
	// No flag sets GateMetricsTLS.InsecureSkipVerify (tests only).
	GateMetricsTLS tlsfiles.Client

	// Coordinator is a coordinator that runs in the same process, for
	// what only its memory knows (Coordinator's methods). No flag: sluice
	// coordinator sets it to its coordinator. Default nil: the console
	// answers holder false and no scaler targets, and reads the scaling
	// parameters from Consul over scaling.DefaultParams.
	Coordinator Coordinator
	// Registry is where the console's metrics go. No flag: sluice
	// coordinator passes its coordinator's, so that one /metrics shows
	// both. Default nil: a registry of the console's own (Registry).
	Registry *prometheus.Registry
	// SettingName names a Config field ("RedisAddr") to an operator in
	// the API's fixes ("check that Redis runs at ..."). No flag: sluice
	// names the flag and variable that set it. Default nil: "the
	// console's Config.RedisAddr".
	SettingName func(field string) string
	// Now is the clock of the answers' times and of replays. No flag: set
	// it in code (tests). Default nil: time.Now.
	Now func() time.Time
}

// Coordinator is what a console shows of a coordinator in its process.
// *coordinator.Coordinator has these methods.
type Coordinator interface {
	// Holds reports whether the coordinator holds the coordinator lock.
	Holds() bool
	// Target is its scaler's target workers per consumer for partition
	// part; 0 while unknown.
	Target(part int) int
	// Params are the scaling parameters in force: Consul's value over the
	// coordinator's flags.
	Params() scaling.Params
	// Pin is partition part's scale pin as the coordinator last read it
	// from Consul: what the console shows when Consul does not answer it.
	Pin(part int) (admin.Pin, bool)
}

// DefaultConfig is the configuration sluice console starts from.
func DefaultConfig() Config {
	return Config{
		HTTP:             ops.DefaultHTTPLimits(),
		Listen:           ":8084",
		StageRedis:       queue.DefaultStageRedis(),
		Config:           consul.DefaultConfig(),
		ConsumerTTL:      15 * time.Second,
		Kafka:            kafka.Config{ClientID: "sluice-console", Version: "3.6.0", Compression: "none"},
		ConsumerGroup:    kafka.RelayConsumerGroup,
		TokensCheckEvery: time.Second,
	}
}

func init() {
	cli.Describe("console", "The console, the operator's surface: the admin API under /api/v1/ (bearer tokens from --admin-tokens /\n"+
		"--admin-tokens-file, roles read and admin; docs/admin.md), which the sluice admin commands (stats, dlq, rate, limits,\n"+
		"groups, scale, canary status) call, and the web dashboard at / (docs/dashboard.md). It reads and writes Redis, Consul\n"+
		"and Kafka directly. sluice coordinator serves one on its own listener too, unless --console=false. Ops: /healthz,\n"+
		"/readyz, /metrics. With --tls-cert-file and --tls-key-file it serves HTTPS only (a renewed certificate is read\n"+
		"without a restart); --tls-client-ca-file asks every client for a certificate (docs/secure/https.md).")
}

// RegisterFlags adds the console's flags to fs, bound to c's fields, with
// c's values as their defaults. internal/cli.Parse gives each its SLUICE_*
// fallbacks.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "address to serve the admin API, the dashboard, /healthz, /readyz and /metrics on")
	c.HTTP.RegisterFlags(fs, "the console's --listen")
	c.TLS.Register(fs, "", "the console (the admin API, the dashboard, /healthz, /readyz and /metrics)")
	c.StageRedis.RegisterFlags(fs)
	fs.Lookup("redis-partitions").Usage = "Redis partitions in the layout (as the other parts')"
	cli.StringsVar(fs, &c.Topics, "topics", c.Topics, "topics whose queues are read besides those the relays registered (their relays have not started yet), comma-separated; default none")
	c.Config.RegisterFlags(fs)
	cli.DurationVar(fs, &c.ConsumerTTL, "consumer-ttl", c.ConsumerTTL, "a consumer's heartbeat older than this no longer counts (as the coordinator's)")
	fs.StringVar(&c.AdminTokens, "admin-tokens", c.AdminTokens, "admin API bearer tokens with their roles: \"<token> admin;<token> read\" (kept as SHA-256 hashes); prefer --admin-tokens-file, or the environment: flags show in ps")
	fs.StringVar(&c.AdminTokensFile, "admin-tokens-file", c.AdminTokensFile, "file of admin API tokens: one \"<token> <role> [<name>]\" per line (role read or admin; the name is what logs show of its uses), # comments; re-read when it changes and on SIGHUP")
	cli.DurationVar(fs, &c.TokensCheckEvery, "tokens-check-every", c.TokensCheckEvery, "how often --admin-tokens-file is looked at for a change (SIGHUP reads it at once)")
	fs.BoolVar(&c.AdminInsecure, "admin-insecure", c.AdminInsecure, "without tokens, serve the admin API to anyone as admin (sluice dev on localhost only); without it and without tokens the API answers 403")
	cli.KeepValues(fs, &c.Kafka, func() { c.Kafka.Register(fs, c.Kafka.ClientID) })
	fs.Lookup("kafka-brokers").Usage = "Kafka brokers, comma-separated host:port: the admin API reads and replays <topic>.dlq and reads the relays' lag (none: those answer 503)"
	fs.StringVar(&c.ConsumerGroup, "consumer-group", c.ConsumerGroup, "the relays' --consumer-group, for their lag in /api/v1/stats")
	cli.StringsVar(fs, &c.GateMetrics, "gate-metrics", c.GateMetrics, "the gates' /metrics URLs, comma-separated, for the gate's counts in /api/v1/stats")
	c.GateMetricsTLS.Register(fs, "gate-metrics", "the gate")
}

// check validates the configuration; its errors name the field.
func (c *Config) check() error {
	if err := c.StageRedis.Validate(); err != nil {
		return fmt.Errorf("console: Config.%w", err)
	}
	if _, err := consul.Key(c.Stage, "relay"); err != nil {
		return fmt.Errorf("console: Config.Stage: %w", err)
	}
	if c.ConsumerTTL <= 0 {
		return errors.New("console: Config.ConsumerTTL: must be positive")
	}
	for _, t := range c.Topics {
		if err := queue.ValidTopic(t); err != nil {
			return fmt.Errorf("console: Config.Topics: %w", err)
		}
	}
	if c.AdminInsecure && (c.AdminTokens != "" || c.AdminTokensFile != "") {
		// Insecure with tokens would open the API to anyone the moment
		// the tokens went (an emptied file): one or the other.
		return errors.New("console: Config.AdminInsecure with Config.AdminTokens or Config.AdminTokensFile: choose one; the insecure mode (anyone is admin, for sluice dev on localhost) and tokens do not mix")
	}
	return nil
}

// auth is the token checker the Config asks for: Auth, or one built from
// AdminTokens, AdminTokensFile and AdminInsecure (nil when none is set:
// every request is a 403).
func (c *Config) auth() (*admin.Auth, error) {
	if c.Auth != nil || c.AdminTokens == "" && c.AdminTokensFile == "" && !c.AdminInsecure {
		return c.Auth, nil
	}
	inline, err := admin.ParseTokens(c.AdminTokens)
	if err != nil {
		return nil, fmt.Errorf("console: Config.AdminTokens: %w", err)
	}
	file, err := admin.ReadTokens(c.AdminTokensFile)
	if err != nil {
		return nil, fmt.Errorf("console: Config.AdminTokensFile: %w", err)
	}
	return admin.NewAuth(c.AdminInsecure, inline, file), nil
}
