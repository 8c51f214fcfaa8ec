package relay

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
)

// Config configures a relay. Start from DefaultConfig: its values are the
// defaults each field names, and sluice relay's flags (RegisterFlags).
type Config struct {
	// Listen is the address sluice relay serves /healthz, /readyz and
	// /metrics on (Serve); a program that embeds the relay listens
	// itself. Default ":8081".
	Listen string
	// HTTP bounds each connection of Serve's listener (/healthz, /readyz and /metrics): header,
	// body, answer and keep-alive timeouts, header size
	// (ops.HTTPLimits; a zero field: its default). Default:
	// ops.DefaultHTTPLimits.
	HTTP ops.HTTPLimits
	// StageRedis is where the Redis partitions live; its Stage also names
	// the relay's Consul keys (sluice/<stage>/relay/<topic>/). Default:
	// stage "dev", 8 partitions on 127.0.0.1:6379.
	queue.StageRedis
	// Topics are the topics relayed; each needs its <topic>.dlq. Default
	// "jobs". They are served whatever the stage's topic list says.
	Topics []string
	// FollowTopics also relays every topic of the stage's topic list
	// (Consul sluice/<stage>/topics/, `sluice topics create`), watched:
	// a topic added is taken up and one removed let go, without a
	// restart (docs/topics.md). Default true.
	FollowTopics bool
	// Kafka is where the topics are read and dead letters and requeues
	// written. Default: brokers 127.0.0.1:9092, client id "sluice-relay",
	// protocol version 3.6.0, no compression.
	// No TLS and no SASL unless the --kafka-tls* and --kafka-sasl-* flags
	// ask (docs/secure/kafka.md). No flag: TLS.InsecureSkipVerify (tests).
	Kafka kafka.Config
	// ConsumerGroup is the Kafka consumer group whose committed offsets
	// the relay keeps, one per topic: <group>.<topic>. Default
	// "sluice-relay".
	ConsumerGroup string
	// Consul holds the relay's locks and rates.
	// Config is how it reaches Consul: ConsulAddr (--consul-addr), the
	// ACL token ConsulToken (--consul-token, --consul-token-file: read
	// again when Consul refuses it) and ConsulTLS (--consul-tls*); `sluice
	// consul-policy relay` prints the least ACL policy it needs
	// (docs/secure/consul.md). Default: "127.0.0.1:8500", no token, plain HTTP.
	consul.Config
	// LockTTL is the TTL of the relay's Consul session (Consul's minimum
	// is 10s): a dead holder is replaced after TTL (up to 2x: Consul's
	// timer) + LockDelay. Default 10s.
	LockTTL time.Duration
	// LockDelay is Consul's lock-delay after a holder's session expires;
	// 0 for none. Default 5s.
	LockDelay time.Duration
	// BatchSize is the most jobs per Redis pipeline and per rate-limit
	// wait. Default 1024.
	BatchSize int
	// FetchWait is the longest a Kafka fetch waits at the broker while no
	// record arrives: a record ends it at once, so it costs no latency,
	// but the partitions handed to the relay (or taken from it) wait for
	// the fetch in flight. Default 2s (sarama's 500 ms made an idle relay
	// and its broker fetch 4 times a second: issue 34).
	FetchWait time.Duration
	// CommitEvery is how often Kafka offsets are committed (only of jobs
	// Redis accepted). Default 1s.
	CommitEvery time.Duration
	// IDDedupeTTL is how long a client-chosen job id (the envelope's
	// id_given) is remembered, so the client's resends of it are dropped.
	// Relay replays need no TTL: they are deduped by Kafka position.
	// Default 24h.
	IDDedupeTTL time.Duration
	// DurableAfter is how long Redis must have kept a write, without a
	// restart, before its Kafka offset is committed (durable.go); 0
	// commits as soon as Redis answers (for appendfsync always). Default
	// 3s. --durable-after replicas:N sets it to 0 and DurableReplicas to N.
	DurableAfter time.Duration
	// DurableReplicas, when above 0, is the replication form of the hold
	// (replicas.go): after each write the relay sends WAIT DurableReplicas
	// to the partition's master and settles the batch, so that its offset
	// may be committed, only once that many replicas have it; fewer, and
	// the batch is written again (deduplicated) and waited for again.
	// For Redis under Sentinel. Default 0 (off). No flag of its own:
	// --durable-after replicas:N sets DurableReplicas to N.
	DurableReplicas int
	// LagEvery is how often the lag gauges are read from Kafka's end
	// offsets while the relay cannot write, besides after each batch.
	// Default 5s.
	LagEvery time.Duration
	// HighWatermark pauses relaying above this fraction of Redis
	// maxmemory. Default 0.8.
	HighWatermark float64
	// LowWatermark resumes relaying below this fraction of Redis
	// maxmemory. Default 0.7.
	LowWatermark float64
	// MemorySample is how often Redis INFO memory is read. Default 250ms.
	MemorySample time.Duration
	// MaxRequeues is how many times a job Redis refused for a reason of
	// its own is produced to Kafka again before it goes to the DLQ.
	// Default 3.
	MaxRequeues int
	// Shadow reads and counts, but writes nothing to Redis and commits
	// nothing (roll-out mode). Default false.
	Shadow bool
	// DrainTimeout is read by nothing: a stopping relay does not wait for
	// the batch in hand. It stops reading at once, commits the offsets
	// Redis has durably kept (within 2s) and hands its lock over; the
	// next holder relays the rest again from those offsets, and the
	// Kafka-position watermark makes what Redis had already taken a
	// no-op. Waiting for the batch would hold the lock longer and save
	// nothing. Default 15s.
	//
	// Deprecated: it does nothing; --drain-timeout and
	// SLUICE_RELAY_DRAIN_TIMEOUT are still accepted, for one release.
	DrainTimeout time.Duration
}

// DefaultConfig is the configuration sluice relay starts from.
func DefaultConfig() Config {
	return Config{
		HTTP:          ops.DefaultHTTPLimits(),
		Listen:        ":8081",
		StageRedis:    queue.DefaultStageRedis(),
		Topics:        []string{"jobs"},
		FollowTopics:  true,
		Kafka:         kafka.Config{Brokers: cli.ListFlag{"127.0.0.1:9092"}, ClientID: "sluice-relay", Version: "3.6.0", Compression: "none"},
		ConsumerGroup: kafka.RelayConsumerGroup,
		Config:        consul.DefaultConfig(),
		LockTTL:       10 * time.Second,
		LockDelay:     5 * time.Second,
		BatchSize:     1024,
		FetchWait:     2 * time.Second,
		CommitEvery:   time.Second,
		IDDedupeTTL:   24 * time.Hour,
		DurableAfter:  3 * time.Second,
		LagEvery:      5 * time.Second,
		HighWatermark: 0.8,
		LowWatermark:  0.7,
		MemorySample:  250 * time.Millisecond,
		MaxRequeues:   3,
		DrainTimeout:  15 * time.Second,
	}
}

func init() {
	cli.Describe("relay", "The relay: per topic, the holder of a Consul lock moves jobs from Kafka into partitioned Redis,\n"+
		"rate-limited by sluice/<stage>/relay/<topic>/rate in Consul, paused while Redis memory is high, fenced by the lock's token.\n"+
		"Poison messages go to <topic>.dlq. Ops: /healthz, /readyz, /metrics.")
}

// RegisterFlags adds the relay's flags to fs, bound to c's fields, with
// c's values as their defaults. internal/cli.Parse gives each its
// SLUICE_* fallbacks.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "address for /healthz, /readyz and /metrics")
	c.HTTP.RegisterFlags(fs, "the relay's --listen")
	c.StageRedis.RegisterFlags(fs)
	cli.StringsVar(fs, &c.Topics, "topics", c.Topics, "topics to relay, comma-separated; each needs its <topic>.dlq")
	fs.BoolVar(&c.FollowTopics, "follow-topics", c.FollowTopics, "also relay the stage's topic list in Consul (sluice/<stage>/topics/, `sluice topics create`), watched: new topics without a restart")
	cli.KeepValues(fs, &c.Kafka, func() { c.Kafka.Register(fs, c.Kafka.ClientID) })
	fs.StringVar(&c.ConsumerGroup, "consumer-group", c.ConsumerGroup, "Kafka consumer group whose committed offsets the relay keeps (one per topic: <group>.<topic>)")
	c.Config.RegisterFlags(fs)
	cli.DurationVar(fs, &c.LockTTL, "lock-ttl", c.LockTTL, "TTL of the relay's Consul session (Consul's minimum is 10s): a dead holder is replaced after TTL (up to 2x: Consul's timer) + lock-delay")
	cli.DurationVar(fs, &c.LockDelay, "lock-delay", c.LockDelay, "Consul lock-delay after a holder's session expires; 0 for none")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "most jobs per Redis pipeline and per rate-limit wait")
	cli.DurationVar(fs, &c.FetchWait, "fetch-wait", c.FetchWait, "longest a Kafka fetch waits at the broker while no record arrives (a record ends it at once); partitions handed to the relay or taken from it wait for the fetch in flight")
	cli.DurationVar(fs, &c.CommitEvery, "commit-every", c.CommitEvery, "how often to commit Kafka offsets (only of jobs Redis accepted)")
	cli.DurationVar(fs, &c.IDDedupeTTL, "id-dedupe-ttl", c.IDDedupeTTL, "how long a job id the client chose is remembered: a resend of it within this time is dropped (replays of Kafka records are deduped by their position, whatever their age)")
	fs.Var(durableValue{&c.DurableAfter, &c.DurableReplicas}, "durable-after", "commit a Kafka offset only once Redis has kept the writes before it this long without restarting (its AOF fsync, every second with appendfsync everysec, has run); a Redis restart under younger writes makes the relay go on from the committed offsets. 0: commit as soon as Redis answers (appendfsync always). replicas:N (Sentinel): commit only once N replicas acknowledged the writes (WAIT); fewer, and the batch is written again")
	cli.DurationVar(fs, &c.LagEvery, "lag-every", c.LagEvery, "how often sluice_relay_lag_messages is read from Kafka's end offsets while the relay cannot write (it is also set after each batch)")
	fs.Float64Var(&c.HighWatermark, "memory-high", c.HighWatermark, "pause relaying above this fraction of Redis maxmemory")
	fs.Float64Var(&c.LowWatermark, "memory-low", c.LowWatermark, "resume relaying below this fraction of Redis maxmemory")
	cli.DurationVar(fs, &c.MemorySample, "memory-sample", c.MemorySample, "how often to read Redis INFO memory")
	fs.IntVar(&c.MaxRequeues, "max-requeues", c.MaxRequeues, "times a job Redis refused for a reason of its own is produced to Kafka again before it goes to the DLQ")
	fs.BoolVar(&c.Shadow, "shadow", c.Shadow, "read and count, write nothing to Redis and commit nothing (roll-out mode)")
	cli.DurationVar(fs, &c.DrainTimeout, "drain-timeout", c.DrainTimeout, "deprecated, does nothing: a stopping relay commits what Redis kept and hands over at once (the next holder relays the rest, deduplicated); accepted for one release")
}

// durableValue is --durable-after: a duration (DurableAfter) or
// replicas:N (DurableReplicas; DurableAfter 0).
type durableValue struct {
	after    *time.Duration
	replicas *int
}

func (v durableValue) String() string {
	if v.after == nil {
		return ""
	}
	if *v.replicas > 0 {
		return "replicas:" + strconv.Itoa(*v.replicas)
	}
	return v.after.String()
}

func (v durableValue) Set(s string) error {
	if n, ok := strings.CutPrefix(s, "replicas:"); ok {
		r, err := strconv.Atoi(n)
		if err != nil || r < 1 {
			return fmt.Errorf("%q: want replicas:N with N at least 1", s)
		}
		*v.after, *v.replicas = 0, r
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q: want a duration (3s; 0 for none) or replicas:N", s)
	}
	*v.after, *v.replicas = d, 0
	return nil
}

// validate checks the configuration; its errors name the field.
func (c *Config) validate() error {
	if err := c.StageRedis.Validate(); err != nil {
		return fmt.Errorf("relay: Config.%w", err)
	}
	switch {
	case len(c.Topics) == 0 && !c.FollowTopics:
		return errors.New("relay: Config.Topics: empty: name at least one topic, or follow the stage's topic list (Config.FollowTopics)")
	case c.BatchSize < 1:
		return errors.New("relay: Config.BatchSize: must be at least 1")
	case c.LagEvery <= 0:
		return errors.New("relay: Config.LagEvery: must be positive")
	case c.FetchWait < time.Millisecond || c.FetchWait > 10*time.Second:
		return fmt.Errorf("relay: Config.FetchWait: %s: want 1ms to 10s", c.FetchWait)
	case c.DurableReplicas < 0:
		return fmt.Errorf("relay: Config.DurableReplicas: %d: want 0 (off) or the replicas to wait for", c.DurableReplicas)
	case c.LowWatermark <= 0 || c.HighWatermark > 1 || c.LowWatermark >= c.HighWatermark:
		return fmt.Errorf("relay: Config.LowWatermark %g and Config.HighWatermark %g: want 0 < low < high <= 1", c.LowWatermark, c.HighWatermark)
	}
	for _, t := range c.Topics {
		if err := queue.ValidTopic(t); err != nil {
			return fmt.Errorf("relay: Config.Topics: %w", err)
		}
	}
	return nil
}
