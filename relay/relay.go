// Package relay is sluice's Kafka -> Redis relay (Slack's JQRelay). For each
// topic it serves, a relay contends for the topic's Consul lock; the holder
// consumes every partition of the topic and moves the jobs into their Redis
// partitions, at most at the rate set in Consul and never while Redis memory
// is above the high watermark, committing a Kafka offset only after Redis
// accepted every job before it. Standby relays wait for the lock. Every
// Redis write carries the lock's fencing token, so a deposed relay that
// still runs writes nothing.
package relay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
)

// Config configures a relay. Register sets the defaults.
type Config struct {
	Listen         string
	Stage          string
	Topics         cli.ListFlag
	Kafka          kafka.Config
	ConsumerGroup  string
	ConsulAddr     string
	RedisAddr      string
	PartitionAddrs string
	Partitions     int
	LockTTL        time.Duration
	LockDelay      time.Duration
	BatchSize      int
	CommitEvery    time.Duration
	// DurableAfter is how long Redis must have kept a write, without a
	// restart, before its Kafka offset is committed (durable.go); 0
	// commits as soon as Redis answers.
	DurableAfter time.Duration
	// IDDedupeTTL is how long a client-chosen job id (the envelope's
	// id_given) is remembered, so the client's resends of it are dropped.
	// Relay replays need no TTL: they are deduped by Kafka position.
	IDDedupeTTL time.Duration
	// LagEvery is how often the lag gauges are read from Kafka's end
	// offsets, besides after each batch.
	LagEvery      time.Duration
	HighWatermark float64
	LowWatermark  float64
	MemorySample  time.Duration
	MaxRequeues   int
	Shadow        bool
	DrainTimeout  time.Duration
	Logging       cli.Logging
}

func init() {
	cli.Describe("relay", "The relay: per topic, the holder of a Consul lock moves jobs from Kafka into partitioned Redis,\n"+
		"rate-limited by sluice/<stage>/relay/<topic>/rate in Consul, paused while Redis memory is high, fenced by the lock's token.\n"+
		"Poison messages go to <topic>.dlq. Ops: /healthz, /readyz, /metrics.")
}

// Register adds the relay's flags to fs with their defaults.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", ":8081", "address for /healthz, /readyz and /metrics")
	fs.StringVar(&c.Stage, "stage", "dev", "stage name: Consul keys live under sluice/<stage>/, Redis keys under sluice:{<stage>:<topic>:p<N>}: and sluice:{<stage>:p<N>}:")
	c.Topics = cli.ListFlag{"jobs"}
	fs.Var(&c.Topics, "topics", "topics to relay, comma-separated; each needs its <topic>.dlq")
	c.Kafka.Register(fs, "sluice-relay")
	fs.StringVar(&c.ConsumerGroup, "consumer-group", "sluice-relay", "Kafka consumer group whose committed offsets the relay keeps (one per topic: <group>.<topic>)")
	fs.StringVar(&c.ConsulAddr, "consul-addr", "127.0.0.1:8500", "Consul HTTP address")
	fs.StringVar(&c.RedisAddr, "redis-addr", "127.0.0.1:6379", "Redis address of every partition not in --redis-partition-addrs")
	fs.StringVar(&c.PartitionAddrs, "redis-partition-addrs", "", "partitions on Redis servers of their own: \"0=host:port,3=host:port\"")
	fs.IntVar(&c.Partitions, "redis-partitions", 8, "Redis partitions (queue pool size N: partition = fnv1a32(group) % N); every part must agree")
	cli.DurationVar(fs, &c.LockTTL, "lock-ttl", 10*time.Second, "TTL of the relay's Consul session (Consul's minimum is 10s): a dead holder is replaced after TTL (up to 2x: Consul's timer) + lock-delay")
	cli.DurationVar(fs, &c.LockDelay, "lock-delay", 5*time.Second, "Consul lock-delay after a holder's session expires; 0 for none")
	fs.IntVar(&c.BatchSize, "batch-size", 1024, "most jobs per Redis pipeline and per rate-limit wait")
	cli.DurationVar(fs, &c.CommitEvery, "commit-every", time.Second, "how often to commit Kafka offsets (only of jobs Redis accepted)")
	cli.DurationVar(fs, &c.IDDedupeTTL, "id-dedupe-ttl", 24*time.Hour, "how long a job id the client chose is remembered: a resend of it within this time is dropped (replays of Kafka records are deduped by their position, whatever their age)")
	cli.DurationVar(fs, &c.DurableAfter, "durable-after", 3*time.Second, "commit a Kafka offset only once Redis has kept the writes before it this long without restarting (its AOF fsync, every second with appendfsync everysec, has run); a Redis restart under younger writes makes the relay go on from the committed offsets. 0: commit as soon as Redis answers (appendfsync always)")
	cli.DurationVar(fs, &c.LagEvery, "lag-every", 5*time.Second, "how often sluice_relay_lag_messages is read from Kafka's end offsets while the relay cannot write (it is also set after each batch)")
	fs.Float64Var(&c.HighWatermark, "memory-high", 0.8, "pause relaying above this fraction of Redis maxmemory")
	fs.Float64Var(&c.LowWatermark, "memory-low", 0.7, "resume relaying below this fraction of Redis maxmemory")
	cli.DurationVar(fs, &c.MemorySample, "memory-sample", 250*time.Millisecond, "how often to read Redis INFO memory")
	fs.IntVar(&c.MaxRequeues, "max-requeues", 3, "times a job Redis refused for a reason of its own is produced to Kafka again before it goes to the DLQ")
	fs.BoolVar(&c.Shadow, "shadow", false, "read and count, write nothing to Redis and commit nothing (roll-out mode)")
	cli.DurationVar(fs, &c.DrainTimeout, "drain-timeout", 15*time.Second, "on SIGTERM, how long the batch in hand may take to finish")
	c.Logging.Register(fs)
}

// Relay relays its topics while it runs.
type Relay struct {
	cfg      Config
	log      *slog.Logger
	pool     *queue.Pool
	consul   *consulapi.Client
	producer *kafka.Producer // dead letters and requeues
	reg      *prometheus.Registry
	m        *metrics
	guards   map[*redis.Client]*memGuard
	holder   string
	now      func() time.Time

	mu   sync.Mutex
	held map[string]bool
}

// New connects to Kafka, Redis and Consul and checks what the relay needs:
// the topics and their DLQ topics exist, the Lua scripts load.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Relay, error) {
	if cfg.LowWatermark <= 0 || cfg.HighWatermark > 1 || cfg.LowWatermark >= cfg.HighWatermark {
		return nil, fmt.Errorf("--memory-low %g and --memory-high %g: want 0 < low < high <= 1", cfg.LowWatermark, cfg.HighWatermark)
	}
	if cfg.BatchSize < 1 || len(cfg.Topics) == 0 || cfg.LagEvery <= 0 {
		return nil, errors.New("--batch-size and --lag-every must be positive and --topics not empty")
	}
	partAddrs, err := queue.ParsePartitionAddrs(cfg.PartitionAddrs, cfg.Partitions)
	if err != nil {
		return nil, fmt.Errorf("--redis-partition-addrs: %w", err)
	}
	pool, err := queue.NewPool(queue.PoolConfig{
		Layout: queue.Layout{Stage: cfg.Stage, Partitions: cfg.Partitions},
		Addr:   cfg.RedisAddr, PartitionAddrs: partAddrs, IDDedupeTTL: cfg.IDDedupeTTL,
	})
	if err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, log: log, pool: pool, reg: ops.NewRegistry(), now: time.Now, held: map[string]bool{}}
	fail := func(err error) (*Relay, error) { r.close(); return nil, err }
	if !cfg.Shadow {
		if err := pool.LoadScripts(ctx); err != nil {
			return fail(err)
		}
		// Readers of every queue (stats, the admin API, the coordinator,
		// the gate's group lookup) list the topics from here.
		if err := pool.RegisterTopics(ctx, cfg.Topics, time.Now()); err != nil {
			return fail(err)
		}
	}
	ccfg := consulapi.DefaultConfig()
	ccfg.Address = cfg.ConsulAddr
	if r.consul, err = consulapi.NewClient(ccfg); err != nil {
		return fail(fmt.Errorf("consul: %w", err))
	}
	if r.producer, err = kafka.NewProducer(&cfg.Kafka, kafka.ProducerOptions{}, log); err != nil {
		return fail(err)
	}
	for _, t := range cfg.Topics {
		if err := queue.ValidTopic(t); err != nil {
			return fail(err)
		}
		for _, need := range []string{t, t + ".dlq"} {
			if _, err := r.producer.Client().Partitions(need); err != nil {
				return fail(fmt.Errorf("topic %s: %v (the relay needs each topic and its .dlq; create them)", need, err))
			}
		}
	}
	r.m = newMetrics(r.reg)
	host, _ := os.Hostname()
	r.holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	servers, addrs := pool.Servers()
	r.guards = map[*redis.Client]*memGuard{}
	for i, c := range servers {
		r.guards[c] = newMemGuard(c, addrs[i], cfg.HighWatermark, cfg.LowWatermark, cfg.MemorySample, log,
			func(addr string, paused bool, ratio float64) {
				r.m.memPaused.WithLabelValues(addr).Set(b2f(paused))
				r.m.memRatio.WithLabelValues(addr).Set(ratio)
			})
	}
	return r, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (r *Relay) close() {
	if r.producer != nil {
		r.producer.Close()
	}
	r.pool.Close()
}

// Registry holds the relay's metrics.
func (r *Relay) Registry() *prometheus.Registry { return r.reg }

// Holds reports whether this relay holds topic's lock now.
func (r *Relay) Holds(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[topic]
}

func (r *Relay) setHeld(topic string, held bool) {
	r.mu.Lock()
	r.held[topic] = held
	r.mu.Unlock()
	r.m.lockHeld.WithLabelValues(topic).Set(b2f(held))
}

// ready: Redis and Kafka answer. A standby is ready: it is ready to take over.
func (r *Relay) ready(ctx context.Context) error {
	if err := r.pool.Ping(ctx); err != nil {
		return err
	}
	if len(r.producer.Client().Brokers()) == 0 {
		return errors.New("no Kafka brokers")
	}
	return nil
}

// Serve runs the relay until ctx ends, serving /healthz, /readyz and
// /metrics on ln, then hands its locks over and closes.
func (r *Relay) Serve(ctx context.Context, ln net.Listener) error {
	defer r.close()
	mux := http.NewServeMux()
	ops.Mount(mux, r.reg, r.ready)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	opsDone := make(chan error, 1)
	go func() { opsDone <- ops.Serve(ctx, r.log, srv, ln, time.Second) }()

	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, g := range r.guards {
		wg.Add(1)
		go func() { defer wg.Done(); g.Run(gctx) }()
	}
	errs := make(chan error, len(r.cfg.Topics))
	for _, topic := range r.cfg.Topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.runTopic(ctx, topic)
		}()
	}
	r.log.Info("relay running", "topics", strings.Join(r.cfg.Topics, ","), "partitions", r.cfg.Partitions,
		"stage", r.cfg.Stage, "shadow", r.cfg.Shadow, "holder", r.holder)
	var first error
	for range r.cfg.Topics {
		if err := <-errs; err != nil && first == nil && ctx.Err() == nil {
			first = err
			cancel()
		}
	}
	cancel()
	wg.Wait()
	if err := <-opsDone; err != nil && first == nil {
		first = err
	}
	r.log.Info("relay stopped")
	return first
}

// Run listens on cfg.Listen and relays until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	return ops.ListenAndServe(ctx, "relay", cfg.Listen, func() (*Relay, error) { return New(ctx, cfg, log) })
}

// runTopic follows the topic's rate in Consul and relays the topic whenever
// it holds the topic's lock, until ctx ends.
func (r *Relay) runTopic(ctx context.Context, topic string) error {
	log := r.log.With("topic", topic)
	th := newThrottle()
	r.applyRate(topic, th, Rate{Unlimited: true})
	rateKey, err := consul.Key(r.cfg.Stage, "relay", topic, "rate")
	if err != nil {
		return err
	}
	lockKey, err := consul.Key(r.cfg.Stage, "relay", topic, "lock")
	if err != nil {
		return err
	}
	go consul.Watch(ctx, r.consul, rateKey, consul.WatchOptions{Log: log}, func(value []byte, exists bool) {
		if !exists {
			r.applyRate(topic, th, Rate{Unlimited: true})
			return
		}
		rate, err := ParseRate(value)
		if err != nil {
			// A bad value must not lift the limit: keep the last one.
			log.Error("ignoring an invalid relay rate; the last one stays in force", "key", rateKey, "err", err, "in_force", th.Current().String())
			return
		}
		r.applyRate(topic, th, rate)
	})
	lockDelay := consul.FlagLockDelay(r.cfg.LockDelay)
	lock := consul.LockConfig{
		Client:    r.consul,
		Key:       lockKey,
		Holder:    r.holder,
		TTL:       r.cfg.LockTTL,
		LockDelay: lockDelay,
		Log:       log,
	}
	return consul.Hold(ctx, lock, func(lctx context.Context, lease *consul.Lease) error {
		r.m.lockAcquired.WithLabelValues(topic).Inc()
		r.setHeld(topic, true)
		defer r.setHeld(topic, false)
		log.Info("relaying", "token", lease.Token())
		err := r.relayTopic(lctx, topic, lease, th, log)
		for errors.Is(err, errRedisRestarted) && lctx.Err() == nil {
			r.m.rewinds.WithLabelValues(topic).Inc()
			log.Warn("Redis restarted under writes not yet durable: relaying again from the committed offsets (what Redis kept is deduplicated by job id)")
			err = r.relayTopic(lctx, topic, lease, th, log)
		}
		if errors.Is(err, queue.ErrFenced) {
			log.Error("a newer lock holder wrote to Redis: this relay is deposed and stops writing", "token", lease.Token())
		}
		return err
	})
}

var inf = math.Inf(1)

func (r *Relay) applyRate(topic string, th *throttle, rate Rate) {
	th.Set(rate)
	r.m.ratePaused.WithLabelValues(topic).Set(b2f(rate.Paused))
	switch {
	case rate.Paused:
		r.m.rateLimit.WithLabelValues(topic).Set(0)
	case rate.Unlimited:
		r.m.rateLimit.WithLabelValues(topic).Set(inf)
	default:
		r.m.rateLimit.WithLabelValues(topic).Set(rate.PerSecond)
	}
	r.log.Info("relay rate in force", "topic", topic, "rate", rate.String())
}

// saramaConfig is the consumer's configuration: new groups start at the
// oldest offset (nothing accepted by the gate is skipped), and offsets are
// committed by hand, only for jobs Redis accepted.
func (r *Relay) saramaConfig() (*sarama.Config, error) {
	sc, err := r.cfg.Kafka.Sarama()
	if err != nil {
		return nil, err
	}
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.Offsets.AutoCommit.Enable = false
	sc.Consumer.Return.Errors = true
	sc.Consumer.Fetch.Default = 4 << 20
	sc.ChannelBufferSize = max(r.cfg.BatchSize, 256)
	return sc, nil
}
