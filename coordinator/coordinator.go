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

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
)

// Config configures a coordinator. DefaultConfig sets the defaults; the
// function fields are for programs that embed the coordinator, and tests.
type Config struct {
	Stage string
	// RedisAddr is the Redis of every partition not in PartitionAddrs.
	RedisAddr      string
	PartitionAddrs map[int]string
	Partitions     int
	ConsulAddr     string
	// LockTTL is the Consul session's TTL (Consul's minimum is 10s).
	LockTTL time.Duration
	// LockDelay is Consul's lock-delay after a holder's session expires; 0
	// for none.
	LockDelay time.Duration
	// LockRetryWait is the wait between failed attempts to reach Consul (0:
	// the consul package's default, 1s).
	LockRetryWait time.Duration
	// Holder names this process in the lock's value; default host/pid.
	Holder string

	// GroupWait is how long a watcher blocks on its partition's completed
	// list (BLMOVE) before it looks around; whole seconds. It also bounds
	// how long a stopping watcher takes to notice.
	GroupWait time.Duration
	// RescanEvery is how often a watcher looks for groups left on its
	// partition's completing list by an earlier holder.
	RescanEvery time.Duration
	// Deliveries is how many groups a partition's watcher delivers at once:
	// a receiver that keeps failing holds one slot, not the partition.
	Deliveries int
	// ReadChunk is how many items' states one Redis round trip reads.
	ReadChunk int
	// Keep is how long a delivered (or given-up) group's status is kept.
	Keep time.Duration

	// CallbackTimeout bounds one POST, from dial to the end of the answer.
	CallbackTimeout time.Duration
	// CallbackBackoff is the wait after the first failed attempt; it
	// doubles per attempt up to CallbackMaxBackoff, with ±20% jitter.
	CallbackBackoff    time.Duration
	CallbackMaxBackoff time.Duration
	// CallbackMaxAttempts gives up after that many attempts (0: no
	// limit); CallbackGiveUp gives up once the next attempt would start
	// more than that long after the first one (0: no limit). Attempts
	// count across coordinators: a new holder goes on where the last
	// one stopped.
	CallbackMaxAttempts int
	CallbackGiveUp      time.Duration

	// SpillAbove is the size above which the default reducer writes a
	// callback body to a temporary file in SpillDir ("": the system's)
	// instead of holding it in memory.
	SpillAbove int64
	SpillDir   string

	// ScaleEvery is the scaler's cycle: every partition's ready depth and
	// live workers are read, and SCALE_UP / SCALE_DOWN commands pushed,
	// this often. 0 turns the scaler off.
	ScaleEvery time.Duration
	// Scaling are the scaling parameters when the Consul key
	// sluice/<stage>/scaling is absent; its fields override them live.
	Scaling Params
	// ConsumerTTL is how old a consumer's heartbeat may be and still
	// count; heartbeats ten times as old are removed.
	ConsumerTTL time.Duration

	// StatsEvery is how often the partitions' in-flight, delayed and dead
	// jobs and the stage funnel are read into metrics (stats.go); 0: never.
	StatsEvery time.Duration
	// Canary configures the heartbeat canaries (canary.go); no topics:
	// none are sent.
	Canary CanaryConfig

	// Admin configures the admin API (admin.go, docs/admin.md).
	Admin AdminConfig

	// Reducer makes the reducer of each group; nil: JSONReducer.
	Reducer ReducerFactory
	// Now is the clock of the timestamps recorded; default time.Now.
	Now func() time.Time
	// Sleep waits between callback attempts; default a timer that ends
	// early with ctx (and then returns its error).
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
		return errors.New("deliveries per partition must be at least 1")
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
	cfg    Config
	log    *slog.Logger
	pool   *queue.Pool
	consul *consulapi.Client
	http   *http.Client
	reg    *prometheus.Registry
	m      *metrics
	held   atomic.Bool
	close  sync.Once
	params atomic.Pointer[Params] // in force: Consul's, else cfg.Scaling
	canary *CanaryMonitor         // nil: no canaries
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
	pool, err := queue.NewPool(queue.PoolConfig{
		Layout: queue.Layout{Stage: cfg.Stage, Partitions: cfg.Partitions},
		Addr:   cfg.RedisAddr, PartitionAddrs: cfg.PartitionAddrs,
	})
	if err != nil {
		return nil, err
	}
	ccfg := consulapi.DefaultConfig()
	ccfg.Address = cfg.ConsulAddr
	cc, err := consulapi.NewClient(ccfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("consul: %w", err)
	}
	reg := ops.NewRegistry()
	c := &Coordinator{
		cfg: cfg, log: log, pool: pool, consul: cc, http: newCallbackClient(cfg.CallbackTimeout),
		reg: reg, m: newMetrics(reg), targets: make([]atomic.Int64, cfg.Partitions),
	}
	c.admin = newAdminAPI(c)
	p := cfg.Scaling
	c.params.Store(&p)
	if len(cfg.Canary.Topics) > 0 {
		if c.canary, err = NewCanaryMonitor(cfg.Canary, pool, reg, cfg.Holder, log); err != nil {
			pool.Close()
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
	c.close.Do(func() { err = c.pool.Close() })
	return err
}

// Run contends for the coordinator lock until ctx ends. While it holds the
// lock it runs a group watcher per Redis partition and the scaler; when it
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
		for part := range c.cfg.Partitions {
			wg.Go(func() { c.newGroupWatcher(part, lease.Valid).run(lctx) })
		}
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
