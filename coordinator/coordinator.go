package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
)

// Config configures a coordinator. DefaultConfig sets the defaults each
// field names; the function fields are for programs that embed the
// coordinator, and tests.
type Config struct {
	// Stage names the stage's Consul keys (sluice/<stage>/) and Redis keys.
	// Default "dev".
	Stage string
	// RedisAddr is the Redis of every partition not in PartitionAddrs.
	// Default "127.0.0.1:6379".
	RedisAddr string
	// PartitionAddrs moves partitions to Redis servers of their own.
	// Default: none.
	PartitionAddrs map[int]string
	// Partitions is the layout's partition count, as the relays' and the
	// workers'. Default 8.
	Partitions int
	// Topics are read besides the topics the stage's relays registered
	// (queue.Pool.Topics): for a topic whose relay has not started yet.
	// The registry is read again every watcher round, scaling cycle and
	// stats cycle, so a topic a relay registers later is picked up
	// without a restart. Default: none (only the registered topics).
	Topics []string
	// ConsulAddr is the Consul agent's HTTP address. Default
	// "127.0.0.1:8500".
	ConsulAddr string
	// LockTTL is the Consul session's TTL (Consul's minimum is 10s).
	// Default 10s.
	LockTTL time.Duration
	// LockDelay is Consul's lock-delay after a holder's session expires; 0
	// for none. Default 5s.
	LockDelay time.Duration
	// LockRetryWait is the wait between failed attempts to reach Consul.
	// Default 0: the consul package's, 1s.
	LockRetryWait time.Duration
	// Holder names this process in the lock's value. Default "": host/pid.
	Holder string

	// GroupWait is how long a watcher blocks on its queue partition's
	// completed list (BLMOVE) before it looks around; whole seconds. It
	// also bounds how long a stopping watcher takes to notice, and is how
	// often the topic registry is read for new topics to watch. Default 1s.
	GroupWait time.Duration
	// RescanEvery is how often a watcher looks for groups left on its
	// queue partition's completing list by an earlier holder. Default 1m.
	RescanEvery time.Duration
	// Deliveries is how many groups a queue partition's watcher delivers
	// at once: a receiver that keeps failing holds one slot, not the
	// queue partition. Default 8.
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
	// Defaults 1s and 5m.
	CallbackBackoff    time.Duration
	CallbackMaxBackoff time.Duration
	// CallbackMaxAttempts gives up after that many attempts (0: no
	// limit); CallbackGiveUp gives up once the next attempt would start
	// more than that long after the first one (0: no limit). Attempts
	// count across coordinators: a new holder goes on where the last
	// one stopped. Defaults 20 and 24h.
	CallbackMaxAttempts int
	CallbackGiveUp      time.Duration

	// SpillAbove is the size above which the default reducer writes a
	// callback body to a temporary file in SpillDir instead of holding it
	// in memory. Defaults 4 MiB and "" (the system's temporary directory).
	SpillAbove int64
	SpillDir   string

	// ScaleEvery is the scaler's cycle: every partition's ready depth
	// (summed over the topics) and live workers are read, and SCALE_UP /
	// SCALE_DOWN commands pushed, this often. 0 turns the scaler off.
	// Default 5s.
	ScaleEvery time.Duration
	// Scaling are the scaling parameters when the Consul key
	// sluice/<stage>/scaling is absent; its fields override them live.
	// Default DefaultParams().
	Scaling Params
	// ConsumerTTL is how old a consumer's heartbeat may be and still
	// count; heartbeats ten times as old are removed. Default 15s.
	ConsumerTTL time.Duration

	// StatsEvery is how often the queue partitions' in-flight, delayed and
	// dead jobs and the stage funnel are read into metrics (stats.go); 0:
	// never. Default 5s.
	StatsEvery time.Duration
	// Canary configures the heartbeat canaries (canary.go); no topics:
	// none are sent. Default DefaultCanaryConfig(), without topics.
	Canary CanaryConfig

	// Admin configures the admin API (admin.go, docs/admin.md). Default:
	// no tokens (every request 403), no Kafka brokers, consumer group
	// "sluice-relay".
	Admin AdminConfig

	// Reducer makes the reducer of each group. Default nil: JSONReducer.
	Reducer ReducerFactory
	// Now is the clock of the timestamps recorded. Default nil: time.Now.
	Now func() time.Time
	// Sleep waits between callback attempts. Default nil: a timer that
	// ends early with ctx (and then returns its error).
	Sleep func(ctx context.Context, d time.Duration) error
}

// DefaultConfig is the configuration sluice coordinator starts from.
func DefaultConfig() Config {
	return Config{
		Stage:               "dev",
		RedisAddr:           "127.0.0.1:6379",
		Partitions:          8,
		ConsulAddr:          "127.0.0.1:8500",
		LockTTL:             10 * time.Second,
		LockDelay:           5 * time.Second,
		GroupWait:           time.Second,
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
		Admin: AdminConfig{ConsumerGroup: "sluice-relay",
			Kafka: kafka.Config{ClientID: "sluice-coordinator", Version: "3.6.0", Compression: "none"}},
	}
}

func (c *Config) check() error {
	switch {
	case c.Deliveries < 1:
		return errors.New("deliveries per queue partition must be at least 1")
	case c.WaitConns < 1:
		return errors.New("wait connections must be at least 1")
	case c.ReadChunk < 1:
		return errors.New("read chunk must be at least 1")
	case c.Keep <= 0:
		return errors.New("keep must be positive")
	case c.CallbackTimeout <= 0:
		return errors.New("callback timeout must be positive")
	case c.CallbackBackoff <= 0 || c.CallbackMaxBackoff < c.CallbackBackoff:
		return fmt.Errorf("callback backoff %s and max backoff %s: want 0 < backoff <= max", c.CallbackBackoff, c.CallbackMaxBackoff)
	case c.CallbackMaxAttempts < 0:
		return errors.New("callback max attempts must not be negative")
	case c.GroupWait <= 0 || c.RescanEvery <= 0:
		return errors.New("group wait and rescan interval must be positive")
	case c.ScaleEvery < 0:
		return errors.New("scale interval must not be negative (0 turns scaling off)")
	case c.ScaleEvery > 0 && c.ConsumerTTL <= 0:
		return errors.New("consumer TTL must be positive")
	case c.StatsEvery < 0:
		return errors.New("stats interval must not be negative (0 turns it off)")
	}
	for _, t := range c.Topics {
		if err := queue.ValidTopic(t); err != nil {
			return fmt.Errorf("topics: %w", err)
		}
	}
	if err := c.Canary.check(); err != nil {
		return err
	}
	if c.ScaleEvery > 0 {
		if err := c.Scaling.Check(); err != nil {
			return fmt.Errorf("scaling: %w", err)
		}
	}
	return nil
}

// Coordinator is one coordinator process: it contends for the stage's
// coordinator lock and works while it holds it.
type Coordinator struct {
	cfg  Config
	log  *slog.Logger
	pool *queue.Pool
	// waits serves the watchers' blocking BLMOVEs only, with a connection
	// per WaitConns (see Config.WaitConns); waitTurns bounds the waits per
	// Redis server to its pool size.
	waits     *queue.Pool
	waitTurns map[*redis.Client]chan struct{}
	waitsFull atomic.Bool // the watchers took turns (logged once)
	consul    *consulapi.Client
	http      *http.Client
	reg       *prometheus.Registry
	m         *metrics
	held      atomic.Bool
	close     sync.Once
	params    atomic.Pointer[Params] // in force: Consul's, else cfg.Scaling
	canary    *CanaryMonitor         // nil: no canaries
	// pins are the operators' scale pins in force (pins.go); targets, the
	// scaler's target per partition while this process holds the lock (0:
	// unknown), for the admin API.
	pins    atomic.Pointer[map[int]admin.Pin]
	targets []atomic.Int64
	admin   *adminAPI
}

// New checks cfg and builds a coordinator; it connects to nothing yet.
func New(cfg Config, log *slog.Logger) (*Coordinator, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = retry.Sleep
	}
	if cfg.Reducer == nil {
		cfg.Reducer = JSONReducer(cfg.SpillAbove, cfg.SpillDir)
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if _, err := consul.Key(cfg.Stage, "coordinator", "lock"); err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	pcfg := queue.PoolConfig{
		Layout: queue.Layout{Stage: cfg.Stage, Partitions: cfg.Partitions},
		Addr:   cfg.RedisAddr, PartitionAddrs: cfg.PartitionAddrs,
	}
	pool, err := queue.NewPool(pcfg)
	if err != nil {
		return nil, err
	}
	// The watchers' waits get clients of their own: a blocked BLMOVE holds
	// its connection for up to GroupWait, and a watcher per queue partition
	// would otherwise take the default pool's (10 per CPU) from the
	// scaler, the deliveries and the admin API.
	wcfg := pcfg
	wcfg.Options = func(o *redis.Options) { o.PoolSize = cfg.WaitConns }
	waits, err := queue.NewPool(wcfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	turns := map[*redis.Client]chan struct{}{}
	for part := range cfg.Partitions {
		if cl := waits.Client(part); turns[cl] == nil {
			turns[cl] = make(chan struct{}, cfg.WaitConns)
		}
	}
	ccfg := consulapi.DefaultConfig()
	ccfg.Address = cfg.ConsulAddr
	cc, err := consulapi.NewClient(ccfg)
	if err != nil {
		pool.Close()
		waits.Close()
		return nil, fmt.Errorf("consul: %w", err)
	}
	reg := ops.NewRegistry()
	c := &Coordinator{
		cfg: cfg, log: log, pool: pool, waits: waits, waitTurns: turns, consul: cc, http: newCallbackClient(cfg.CallbackTimeout),
		reg: reg, m: newMetrics(reg), targets: make([]atomic.Int64, cfg.Partitions),
	}
	c.admin = newAdminAPI(c)
	p := cfg.Scaling
	c.params.Store(&p)
	if len(cfg.Canary.Topics) > 0 {
		if c.canary, err = NewCanaryMonitor(cfg.Canary, pool, reg, cfg.Holder, log); err != nil {
			pool.Close()
			waits.Close()
			return nil, err
		}
	}
	return c, nil
}

// Registry holds the coordinator's metrics.
func (c *Coordinator) Registry() *prometheus.Registry { return c.reg }

// Holds reports whether this coordinator holds the lock and works now.
func (c *Coordinator) Holds() bool { return c.held.Load() }

// Close closes the Redis clients. Serve calls it when it returns.
func (c *Coordinator) Close() error {
	var err error
	c.close.Do(func() { err = errors.Join(c.pool.Close(), c.waits.Close()) })
	return err
}

// Run contends for the coordinator lock until ctx ends. While it holds the
// lock it runs a group watcher per queue partition (of every topic, as
// topics appear: watchGroups) and the scaler; when it
// loses the lock it stops them and contends again. It follows the scaling
// parameters in Consul all along, so that a standby that takes over knows
// them. It returns nil once ctx has ended and every watcher has stopped (a
// watcher blocked on Redis takes up to GroupWait), and an error only when
// contending cannot succeed.
func (c *Coordinator) Run(ctx context.Context) error {
	if c.cfg.ScaleEvery > 0 {
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() { defer close(watched); c.watchParams(wctx) }()
		pinsWatched := make(chan struct{})
		go func() { defer close(pinsWatched); c.watchPins(wctx) }()
		defer func() { stop(); <-watched; <-pinsWatched }()
	}
	key, _ := consul.Key(c.cfg.Stage, "coordinator", "lock")
	lockDelay := consul.FlagLockDelay(c.cfg.LockDelay)
	lock := consul.LockConfig{
		Client: c.consul, Key: key, Holder: c.cfg.Holder,
		TTL: c.cfg.LockTTL, LockDelay: lockDelay, RetryWait: c.cfg.LockRetryWait, Log: c.log,
	}
	c.log.Info("coordinator contending for its lock", "key", key, "holder", c.cfg.Holder,
		"stage", c.cfg.Stage, "partitions", c.cfg.Partitions)
	return consul.Hold(ctx, lock, func(lctx context.Context, lease *consul.Lease) error {
		c.m.lockAcquired.Inc()
		c.setHeld(true)
		defer c.setHeld(false)
		c.log.Info("coordinator lock held: watching groups", "token", lease.Token(), "scaling", c.cfg.ScaleEvery > 0)
		var wg sync.WaitGroup
		wg.Go(func() { c.watchGroups(lctx, lease.Valid) })
		if c.cfg.ScaleEvery > 0 {
			wg.Go(func() { c.newScaler(lease.Valid).run(lctx) })
		}
		if c.cfg.StatsEvery > 0 {
			wg.Go(func() { c.observe(lctx, lease.Valid) })
		}
		if c.canary != nil {
			wg.Go(func() { c.canary.Run(lctx, lease.Valid) })
		}
		wg.Wait()
		c.log.Info("coordinator stopped working", "token", lease.Token(), "cause", context.Cause(lctx))
		return nil
	})
}

func (c *Coordinator) setHeld(held bool) {
	c.held.Store(held)
	c.m.lockHeld.Set(b2f(held))
}

// Serve runs the coordinator until ctx ends, serving /healthz, /readyz and
// /metrics on ln, then closes it.
func (c *Coordinator) Serve(ctx context.Context, ln net.Listener) error {
	defer c.Close()
	mux := http.NewServeMux()
	ops.Mount(mux, c.reg, c.ready)
	c.admin.mount(mux) // /api/v1/ and the dashboard at /: admin.go
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	opsDone := make(chan error, 1)
	go func() { opsDone <- ops.Serve(ctx, c.log, srv, ln, time.Second) }()
	err := c.Run(ctx)
	if oerr := <-opsDone; err == nil {
		err = oerr
	}
	c.log.Info("coordinator stopped")
	return err
}

// ready: every Redis and the Consul agent answer. A standby is ready too:
// it is ready to take over.
func (c *Coordinator) ready(ctx context.Context) error {
	if err := c.pool.Ping(ctx); err != nil {
		return err
	}
	if _, err := c.consul.Status().LeaderWithQueryOptions((&consulapi.QueryOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("Consul %s: %v", c.cfg.ConsulAddr, err)
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
