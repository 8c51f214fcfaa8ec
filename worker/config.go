package worker

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
)

// Config configures a Worker. Start from DefaultConfig: its values are the
// defaults each field names, and sluice worker's flags (RegisterFlags).
// New also fills in those of Topics and Now when they are empty.
type Config struct {
	// Listen is the address sluice worker serves /healthz, /readyz and
	// /metrics on (Serve); a program that embeds the worker listens
	// itself, or calls Run, which serves no HTTP. Default ":8082".
	Listen string
	// HTTP bounds each connection of Serve's listener (/healthz, /readyz and /metrics): header,
	// body, answer and keep-alive timeouts, header size
	// (ops.HTTPLimits; a zero field: its default). Default:
	// ops.DefaultHTTPLimits.
	HTTP ops.HTTPLimits
	// StageRedis is where the Redis partitions live (Stage, RedisAddr,
	// Partitions, PartitionAddrs, as the relay's); Stage also names the
	// Consul keys of the rate limits. Default: stage "dev", 8 partitions
	// on 127.0.0.1:6379.
	queue.StageRedis
	// Serve lists the partitions this worker consumes. Default: none,
	// meaning all.
	Serve []int
	// Topics are the topics (queues) served, with their weights: a
	// partition's consumer claims from every topic's queue on it, weighted
	// fair by jobs served (see Strict). As a flag
	// "critical=6,default=3,low=1" (a topic without =w weighs 1). Default:
	// one topic, DefaultTopic, weight 1 (also when empty).
	Topics TopicWeights
	// Strict drains the topics in the order of Topics instead of weighing
	// them: a later topic is claimed from only when every earlier one has
	// nothing ready. Weights are then ignored. Default false.
	Strict bool
	// FollowTopics also serves, weight 1, every topic the stage's topic
	// list in Consul (sluice/<stage>/topics/, `sluice topics create`)
	// gains while the worker runs, without a restart; a topic leaving the
	// list stays served (its jobs in Redis still need running). Needs
	// ConsulAddr. Default false: a worker serves Topics, as its handlers
	// were written for them; sluice dev's built-in worker follows.
	FollowTopics bool
	// Workers is the number of jobs run at once per partition, across its
	// topics. Default 10.
	Workers int
	// Lease is how long a claimed job stays ours without a heartbeat; the
	// heartbeat extends it every Lease/3 while the handler runs. Default
	// 30s.
	Lease time.Duration
	// ClaimBatch is the most jobs claimed in one round trip. Default 256.
	ClaimBatch int
	// Prefetch is the most claimed jobs that may wait for a free slot, per
	// partition: claims are then batches, and a slot that frees finds its
	// next job already here. Fewer wait when jobs run long: about as many
	// as the slots run within PrefetchWait. 0 claims only for free slots.
	// At most 4,000. Default 512.
	Prefetch int
	// PrefetchWait is how long a prefetched job should wait for a slot, at
	// most. Default 50ms.
	PrefetchWait time.Duration
	// AckLinger is how long the acker waits for more successes before it
	// records those it has, while other claimed jobs of the partition still
	// run or wait: an ack call costs Redis per batch and per group it
	// touches, not per job, so acks that share a call cost far less. With
	// nothing else held, a success is recorded at once. 0: at once always.
	// Default 1ms.
	AckLinger time.Duration
	// MaxAttempts applies to jobs whose envelope says 0. Default 5.
	MaxAttempts int
	// Timeout bounds one attempt of jobs whose envelope says 0. Default
	// 1m.
	Timeout time.Duration
	// Backoff is the delay before the second attempt; each later one
	// doubles it, up to MaxBackoff, with ±20% jitter. Default 1s.
	Backoff time.Duration
	// MaxBackoff is the longest delay between attempts. Default 16s.
	MaxBackoff time.Duration
	// ResultTTL is how long the record of a job that failed an attempt
	// and then succeeded is kept, and a group once it ended. A plain job
	// that succeeded keeps nothing unless it asked for retain. Default 24h.
	ResultTTL time.Duration
	// Retain is the per-topic default of the envelope's retain: how long a
	// successful job's record and result are kept. A job's own retain
	// wins. As a flag "topic=24h,other=1h". Default: none, nothing is kept.
	Retain map[string]time.Duration
	// IdempotencyTTL is how long a completed idempotency key keeps other
	// jobs with the key from running. Default 24h.
	IdempotencyTTL time.Duration
	// DeadMax is the most jobs kept in a queue partition's dead set (per
	// topic and partition); the oldest go first. Default 100,000.
	DeadMax int
	// DeadTTL is how long a dead job is kept. Default 7 days.
	DeadTTL time.Duration
	// Drain is how long running jobs may take to finish on shutdown; the
	// rest go back to ready, not counted as failed. Default 30s.
	Drain time.Duration
	// Maintain is how often due delayed jobs (retries, deferrals, run_at)
	// are promoted and, under load, coordinator commands applied: a
	// maintenance round. Default 500ms.
	Maintain time.Duration
	// Liveness is how often a maintenance round also sends the consumer's
	// heartbeat (for the coordinator's scaler, answered with the
	// partition's checkpointed worker count) and looks for expired leases:
	// at most a quarter of Lease, at least every round. A heartbeat counts
	// for the coordinator's --consumer-ttl (15s: keep it several times
	// this, or consumers drop out of its count) and a lease lasts Lease,
	// so neither needs the delayed jobs' half second, and each look costs
	// an idle partition two scripts. Default 2s.
	Liveness time.Duration
	// IdleRecheck is how long an idle consumer blocks on its partition's
	// wake and command lists before it claims again anyway. Enqueues,
	// promotions, reaps and retries push a wake token, so this only bounds
	// how long a lost token (a Redis restarted without its AOF) can leave
	// ready jobs waiting; each recheck costs an idle partition a BLPOP and
	// a claim. A stop does not wait for it: the consumer's BLPOP also
	// waits on its own stop list, which the stop pushes to. Default 5s.
	IdleRecheck time.Duration
	// Consul's KV holds the execution rate limits
	// (sluice/<stage>/limits/<resource>); an empty ConsulAddr means no
	// limits.
	// Config is how it reaches Consul: ConsulAddr (--consul-addr), the
	// ACL token ConsulToken (--consul-token, --consul-token-file: read
	// again when Consul refuses it) and ConsulTLS (--consul-tls*); `sluice
	// consul-policy worker` prints the least ACL policy it needs
	// (docs/secure/consul.md). Default: ConsulAddr "" (no limits), no token, plain HTTP.
	consul.Config
	// RateLimitLead is how long before its slot a throttled job comes back
	// from delayed, to wait the rest in process (holding a slot): enough
	// to absorb the promotion and the claim. Default 25ms.
	RateLimitLead time.Duration
	// RateLimitMargin stretches a limit's slot spacing so that rate slots
	// span one second plus the margin: a job may start up to the margin
	// late without crowding a one-second window. A job later than that
	// reserves another slot. It costs margin/1s of a limited resource's
	// throughput. Default 5ms.
	RateLimitMargin time.Duration
	// Now is the clock. No flag: set it in code (tests). Default nil:
	// time.Now.
	Now func() time.Time
	// ClockSkew is a test knob: it moves Now by this much, as a host whose
	// clock is off would (the chaos suite runs a worker with 5m). Leases
	// are judged by Redis's clock, so it must change nothing about them.
	// Default 0.
	ClockSkew time.Duration
}

// DefaultConfig is the configuration sluice worker starts from, the
// defaults documented in docs/worker.md.
func DefaultConfig() Config {
	return Config{
		HTTP:       ops.DefaultHTTPLimits(),
		Listen:     ":8082",
		StageRedis: queue.DefaultStageRedis(),
		Workers:    10,
		Topics:     TopicWeights{{Topic: DefaultTopic, Weight: 1}},
		Lease:      30 * time.Second, ClaimBatch: 256, Prefetch: 512, PrefetchWait: 50 * time.Millisecond, AckLinger: time.Millisecond, MaxAttempts: 5, Timeout: time.Minute,
		Backoff: time.Second, MaxBackoff: 16 * time.Second, ResultTTL: 24 * time.Hour, IdempotencyTTL: 24 * time.Hour,
		DeadMax: 100000, DeadTTL: 7 * 24 * time.Hour,
		Drain: 30 * time.Second, Maintain: 500 * time.Millisecond, Liveness: 2 * time.Second, IdleRecheck: 5 * time.Second,
		RateLimitLead: 25 * time.Millisecond, RateLimitMargin: 5 * time.Millisecond,
	}
}

// RegisterFlags adds the worker's flags to fs, bound to c's fields, with
// c's values as their defaults. internal/cli.Parse gives each its SLUICE_*
// fallbacks. (sluice worker adds its built-in handlers' flags.)
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "address for /healthz, /readyz and /metrics")
	c.HTTP.RegisterFlags(fs, "the worker's --listen")
	c.StageRedis.RegisterFlags(fs)
	cli.IntRangesVar(fs, &c.Serve, "partitions", c.Serve, "partitions to consume: \"0-7\", \"0,2,4\"; empty: all")
	fs.Var(topicsValue{&c.Topics}, "topics", "topics (queues) to serve, with weights: \"critical=6,default=3,low=1\" (a topic without =w weighs 1); each partition's consumer claims from them weighted fair by jobs served")
	fs.BoolVar(&c.FollowTopics, "follow-topics", c.FollowTopics, "also serve (weight 1) every topic the stage's topic list in Consul gains (sluice topics create), without a restart")
	fs.BoolVar(&c.Strict, "strict", c.Strict, "drain --topics in the order given instead of by weight: a later topic only when every earlier one has nothing ready")
	fs.IntVar(&c.Workers, "workers", c.Workers, "jobs run at once per partition, across its topics")
	cli.DurationVar(fs, &c.Lease, "lease", c.Lease, "lease of a claimed job, extended every lease/3 while it is held")
	fs.IntVar(&c.ClaimBatch, "claim-batch", c.ClaimBatch, "most jobs claimed per round trip")
	fs.IntVar(&c.Prefetch, "prefetch", c.Prefetch, "most claimed jobs waiting for a free slot, per partition (0: claim only for free slots)")
	cli.DurationVar(fs, &c.PrefetchWait, "prefetch-wait", c.PrefetchWait, "prefetch only as many jobs as the slots run in this time, at the average run time")
	cli.DurationVar(fs, &c.AckLinger, "ack-linger", c.AckLinger, "how long the acker waits for more successes to record in one call while other claimed jobs still run (0: record each at once)")
	fs.IntVar(&c.MaxAttempts, "max-attempts", c.MaxAttempts, "attempts of jobs whose envelope sets none")
	cli.DurationVar(fs, &c.Timeout, "timeout", c.Timeout, "time limit of an attempt of jobs whose envelope sets none")
	cli.DurationVar(fs, &c.Backoff, "backoff", c.Backoff, "delay before the second attempt; doubles per attempt, with ±20% jitter")
	cli.DurationVar(fs, &c.MaxBackoff, "max-backoff", c.MaxBackoff, "longest delay between attempts")
	cli.DurationVar(fs, &c.ResultTTL, "result-ttl", c.ResultTTL, "how long an ended group, and the record of a job that failed an attempt and then succeeded, are kept (a plain job that succeeded keeps nothing)")
	cli.DurationMapVar(fs, &c.Retain, "retain", c.Retain, "per-topic default of the envelope's retain: \"topic=24h,other=1h\": how long a successful job's record and result are kept (a job's own retain wins)")
	cli.DurationVar(fs, &c.IdempotencyTTL, "idempotency-ttl", c.IdempotencyTTL, "how long a completed idempotency key keeps other jobs with it from running")
	fs.IntVar(&c.DeadMax, "dead-max", c.DeadMax, "most jobs kept in a queue's dead set, per topic and partition (oldest go first)")
	cli.DurationVar(fs, &c.DeadTTL, "dead-ttl", c.DeadTTL, "how long a dead job is kept")
	cli.DurationVar(fs, &c.Drain, "drain-timeout", c.Drain, "on SIGTERM, how long running jobs may take; the rest go back to ready")
	cli.DurationVar(fs, &c.Maintain, "maintain-every", c.Maintain, "how often due retries, deferrals and run_at jobs are promoted")
	cli.DurationVar(fs, &c.Liveness, "liveness-every", c.Liveness, "how often each consumer sends its heartbeat to the coordinator and looks for expired leases (at most a quarter of --lease, at least every --maintain-every)")
	cli.DurationVar(fs, &c.IdleRecheck, "idle-recheck", c.IdleRecheck, "how long an idle consumer waits for a wake token (pushed by every enqueue, promotion and reap) before it claims again anyway")
	c.Config.RegisterFlags(fs)
	fs.Lookup("consul-addr").Usage = "Consul HTTP address whose KV holds the execution rate limits, sluice/<stage>/limits/<resource>; empty: no limits"
	cli.DurationVar(fs, &c.RateLimitLead, "rate-limit-lead", c.RateLimitLead, "how long before its slot a throttled job comes back from delayed, to wait the rest in process")
	// Negative too: a clock behind. (cli.DurationVar refuses negatives.)
	fs.DurationVar(&c.ClockSkew, "clock-skew", c.ClockSkew, "test knob: run this worker's clock off by this much (e.g. 5m, -5m), as a host with a wrong clock would; leases go by Redis's clock, not the worker's")
	cli.DurationVar(fs, &c.RateLimitMargin, "rate-limit-margin", c.RateLimitMargin, "slack per second in a limit's slot spacing (costs margin/1s of the rate): lets a schedule delayed by late starts catch up")
}

// validate checks the configuration; its errors name the field.
func (c *Config) validate() error {
	if err := c.StageRedis.Validate(); err != nil {
		return fmt.Errorf("worker: Config.%w", err)
	}
	switch {
	case c.Workers < 1:
		return errors.New("worker: Config.Workers: must be at least 1")
	case c.ClaimBatch < 1 || c.ClaimBatch > queue.MaxBatch:
		return fmt.Errorf("worker: Config.ClaimBatch: %d, want 1..%d", c.ClaimBatch, queue.MaxBatch)
	case c.Prefetch < 0 || c.Prefetch > maxPrefetch:
		return fmt.Errorf("worker: Config.Prefetch: %d, want 0..%d", c.Prefetch, maxPrefetch)
	case c.PrefetchWait < 0:
		return errors.New("worker: Config.PrefetchWait: must not be negative")
	case c.AckLinger < 0:
		return errors.New("worker: Config.AckLinger: must not be negative")
	case c.Liveness <= 0:
		return errors.New("worker: Config.Liveness: must be positive")
	case c.IdleRecheck < time.Second:
		return fmt.Errorf("worker: Config.IdleRecheck: %s, want at least 1s (--idle-recheck; BLPOP waits whole seconds)", c.IdleRecheck)
	case c.Lease < time.Second:
		return fmt.Errorf("worker: Config.Lease: %s, want at least 1s", c.Lease)
	case c.MaxAttempts < 1:
		return errors.New("worker: Config.MaxAttempts: must be at least 1")
	case c.RateLimitLead < 0:
		return errors.New("worker: Config.RateLimitLead: must not be negative")
	case c.RateLimitMargin < 0 || c.RateLimitMargin >= time.Second:
		return fmt.Errorf("worker: Config.RateLimitMargin: %s, want 0 up to 1s", c.RateLimitMargin)
	}
	for _, p := range c.Serve {
		if p < 0 || p >= c.Partitions {
			return fmt.Errorf("worker: Config.Serve: partition %d out of range 0..%d", p, c.Partitions-1)
		}
	}
	return nil
}

// deadLimits bound each queue partition's dead set.
func (c *Config) deadLimits() queue.DeadLimits {
	return queue.DeadLimits{Max: c.DeadMax, Keep: c.DeadTTL}
}

// maxPrefetch bounds Config.Prefetch: claimed jobs waiting for a slot are
// leased and out of other workers' reach.
const maxPrefetch = 4 * queue.MaxBatch
