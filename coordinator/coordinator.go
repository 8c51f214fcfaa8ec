package coordinator

import (
	"context"
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
	"github.com/sluicehq/sluice/internal/callback"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
)

// Coordinator is one coordinator process: it contends for the stage's
// coordinator lock and works while it holds it.
type Coordinator struct {
	cfg  Config
	log  *slog.Logger
	pool redisSide
	// waitsConfig is the pool configuration of the watchers' blocking
	// BLMOVEs: clients of their own, a connection per WaitConns, opened
	// for each lock term (openWaits).
	waitsConfig queue.PoolConfig
	waitsFull   atomic.Bool // the watchers took turns (logged once)
	consul      *consulapi.Client
	guard       *callback.Guard       // where callbacks may go
	http        *http.Client          // the callbacks'
	secrets     *callback.SecretsFile // nil: callbacks unsigned
	hosts       *hostSlots            // POSTs in flight per receiver host
	reg         *prometheus.Registry
	m           *metrics
	held        atomic.Bool
	close       sync.Once
	params      atomic.Pointer[Params] // in force: Consul's, else cfg.Scaling
	canary      *CanaryMonitor         // nil: no canaries
	scheduler   *periodic.Scheduler    // nil: Config.Periodic.Enable is off
	// pins are the operators' scale pins in force (pins.go); targets, the
	// scaler's target per partition while this process holds the lock (0:
	// unknown), for a console in this process (Target).
	pins    atomic.Pointer[map[int]admin.Pin]
	targets []atomic.Int64
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
		return nil, fmt.Errorf("coordinator: Config.Stage: %w", err)
	}
	pcfg := cfg.PoolConfig()
	pool, err := openRedis(pcfg)
	if err != nil {
		return nil, err
	}
	// The watchers' waits get clients of their own: a blocked BLMOVE holds
	// its connection for up to GroupWait, and a watcher per queue partition
	// would otherwise take the default pool's (10 per CPU) from the
	// scaler and the deliveries.
	wcfg := pcfg
	wcfg.Options = func(o *redis.Options) { o.PoolSize = cfg.WaitConns }
	guard, err := callback.NewGuard(cfg.CallbackAllow, cfg.CallbackResolver)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("coordinator: Config.CallbackAllow: %w", err)
	}
	for _, addr := range cfg.CallbackRefuse {
		if err := guard.RefuseListener(addr); err != nil {
			pool.Close()
			return nil, fmt.Errorf("coordinator: Config.CallbackRefuse: %w", err)
		}
	}
	var secrets *callback.SecretsFile
	if cfg.CallbackSecretFile != "" {
		if secrets, err = callback.OpenSecrets(cfg.CallbackSecretFile, log); err != nil {
			pool.Close()
			return nil, fmt.Errorf("coordinator: Config.CallbackSecretFile: %w", err)
		}
	}
	cc, err := cfg.Config.Client("coordinator")
	if err != nil {
		pool.Close()
		return nil, err
	}
	reg := ops.NewRegistry()
	c := &Coordinator{
		cfg: cfg, log: log, pool: pool, waitsConfig: wcfg, consul: cc, guard: guard, http: newCallbackClient(cfg, guard),
		secrets: secrets, hosts: newHostSlots(cfg.CallbackHostDeliveries),
		reg: reg, m: newMetrics(reg), targets: make([]atomic.Int64, cfg.Partitions),
	}
	p := cfg.Scaling
	c.params.Store(&p)
	if cfg.Periodic.Enable {
		c.scheduler = c.newScheduler()
	}
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

// Target is the scaler's target workers per consumer for partition part,
// as its last cycle decided it; 0 while unknown: before the first cycle,
// on a standby, or for a partition outside the layout. A console in the
// same process shows it (package console's Config.Coordinator).
func (c *Coordinator) Target(part int) int {
	if part < 0 || part >= len(c.targets) || !c.Holds() {
		return 0
	}
	return int(c.targets[part].Load())
}

// Close closes the Redis clients. Serve calls it when it returns.
func (c *Coordinator) Close() error {
	var err error
	c.close.Do(func() { err = c.pool.Close() })
	return err
}

// Run contends for the coordinator lock until ctx ends. While it holds the
// lock it runs a group watcher per queue partition (of every topic, as
// topics appear: watchGroups) and the scaler; when it
// loses the lock it stops them and contends again. It follows the scaling
// parameters in Consul all along, so that a standby that takes over knows
// them. It returns nil once ctx has ended and every watcher has stopped (a
// watcher blocked on Redis takes up to GroupWait), and an error only when
// contending cannot succeed, or when a Redis evicts keys
// (queue.Pool.AwaitSafe: it waits for Redis to answer first).
func (c *Coordinator) Run(ctx context.Context) error {
	// It writes to Redis (commands, group results, canaries): a Redis
	// that evicts keys is refused before it contends for the lock.
	if err := c.pool.AwaitSafe(ctx, c.log); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if c.cfg.ScaleEvery > 0 {
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() { defer close(watched); c.watchParams(wctx) }()
		pinsWatched := make(chan struct{})
		go func() { defer close(pinsWatched); c.watchPins(wctx) }()
		defer func() { stop(); <-watched; <-pinsWatched }()
	}
	if c.scheduler != nil {
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() { defer close(watched); c.watchSchedules(wctx) }()
		defer func() { stop(); <-watched }()
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
		if c.scheduler != nil {
			wg.Go(func() { _ = c.scheduler.Run(lctx) })
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

// Serve runs the coordinator (Run) until ctx ends, serving /healthz,
// /readyz and /metrics on ln meanwhile, and Config.Handler at every other
// path, then closes it. sluice coordinator listens on Config.Listen.
func (c *Coordinator) Serve(ctx context.Context, ln net.Listener) error {
	defer c.Close()
	// A callback aimed at this listener would drive the console's admin
	// API with the coordinator's own hands (sluice dev allows loopback).
	if err := c.guard.RefuseListener(ln.Addr().String()); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	mux := http.NewServeMux()
	ops.Mount(mux, c.reg, c.ready)
	if c.cfg.Handler != nil {
		mux.Handle("/", c.cfg.Handler) // sluice coordinator: the console
	}
	// ErrorLog: refused TLS handshakes (sluice coordinator serves ln over
	// HTTPS with the console's --tls-*) go to the coordinator's log.
	srv := ops.NewServer(mux, c.cfg.HTTP, c.log)
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
