package console

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/reload"
)

// Console serves the admin API and the dashboard.
type Console struct {
	cfg Config
	log *slog.Logger
	// auth checks the tokens: swapped when AdminTokensFile changes
	// (follow); nil: no tokens, every request 403.
	auth     atomic.Pointer[admin.Auth]
	pool     redisSide
	consul   *consulapi.Client
	reg      *prometheus.Registry
	requests *prometheus.CounterVec // route, code
	handler  http.Handler
	tls      *tls.Config  // nil without Config.TLS: plain HTTP
	gateHTTP *http.Client // reads Config.GateMetrics, with GateMetricsTLS
	close    sync.Once
}

// New checks cfg and builds a console; it connects to nothing yet: each
// request reaches the stores it needs, and says which one failed.
func New(cfg Config, log *slog.Logger) (*Console, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	auth, err := cfg.auth()
	if err != nil {
		return nil, err
	}
	tc, err := cfg.TLS.ForPart("console", log)
	if err != nil {
		return nil, err
	}
	gateHTTP := &http.Client{Timeout: 10 * time.Second}
	if gtc, err := cfg.GateMetricsTLS.Config(); err != nil {
		return nil, fmt.Errorf("console: Config.GateMetricsTLS.CAFile, Config.GateMetricsTLS.CertFile, Config.GateMetricsTLS.KeyFile: %w", err)
	} else if gtc != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = gtc
		gateHTTP.Transport = t
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pool, err := openRedis(cfg.PoolConfig())
	if err != nil {
		return nil, err
	}
	cc, err := cfg.Config.Client("console")
	if err != nil {
		pool.Close()
		return nil, err
	}
	reg := cfg.Registry
	if reg == nil {
		reg = ops.NewRegistry()
	}
	con := &Console{cfg: cfg, log: log, pool: pool, consul: cc, reg: reg, tls: tc, gateHTTP: gateHTTP}
	con.auth.Store(auth)
	con.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		// The name the metric had when the coordinator served the API:
		// dashboards and alerts keep working (docs/admin.md#metrics).
		Name: "sluice_coordinator_admin_requests_total",
		Help: "Admin API requests by route pattern and status code (the console's, wherever it runs).",
	}, []string{"route", "code"})
	if err := reg.Register(con.requests); err != nil {
		pool.Close()
		return nil, fmt.Errorf("console: Config.Registry: %w", err)
	}
	mux := http.NewServeMux()
	con.mount(mux)
	con.handler = mux
	return con, nil
}

// Handler is the console's HTTP handler: the admin API under /api/v1/ and
// the dashboard at every other path. It serves no /healthz, /readyz or
// /metrics: Serve adds them, or the program that serves Handler has its
// own (sluice coordinator serves it on its listener beside the
// coordinator's).
func (con *Console) Handler() http.Handler { return con.handler }

// TLSConfig is the server TLS of Config.TLS, which Serve serves with: nil
// without it. It re-reads a renewed certificate. A program that serves
// Handler on a listener of its own serves it with this (sluice
// coordinator does).
func (con *Console) TLSConfig() *tls.Config { return con.tls }

// Registry holds the console's metrics: Config.Registry when set.
func (con *Console) Registry() *prometheus.Registry { return con.reg }

// Run keeps the console until ctx ends, then closes its Redis clients: for
// a program that serves Handler on a server of its own, which it must stop
// before ctx ends. The console has no work of its own between requests.
func (con *Console) Run(ctx context.Context) error {
	ctx, unsafe := con.checkSafe(ctx)
	go con.follow(ctx)
	<-ctx.Done()
	con.closeClients()
	return unsafe()
}

// Serve serves Handler, /healthz, /readyz and /metrics on ln until ctx
// ends, then drains the requests in flight for up to a second and closes
// the console. With Config.TLS it serves HTTPS (only) on ln. sluice
// console listens on Config.Listen.
func (con *Console) Serve(ctx context.Context, ln net.Listener) error {
	defer con.closeClients()
	ctx, unsafe := con.checkSafe(ctx)
	go con.follow(ctx)
	if con.tls != nil {
		ln = tls.NewListener(ln, con.tls)
	}
	mux := http.NewServeMux()
	ops.Mount(mux, con.reg, con.ready)
	mux.Handle("/", con.handler)
	// ErrorLog: refused handshakes (an untrusted client, plain HTTP to
	// HTTPS) go to the console's log, not the process's stderr.
	srv := ops.NewServer(mux, con.cfg.HTTP, con.log)
	con.log.Info("console serving", "addr", ln.Addr().String(), "https", con.tls != nil, "client_certs", con.tls != nil && con.tls.ClientCAs != nil, "stage", con.cfg.Stage, "partitions", con.cfg.Partitions)
	err := ops.Serve(ctx, con.log, srv, ln, time.Second)
	con.log.Info("console stopped")
	if uerr := unsafe(); uerr != nil {
		return uerr
	}
	return err
}

func (con *Console) closeClients() { con.close.Do(func() { con.pool.Close() }) }

// ready: every Redis and the Consul agent answer; Kafka is optional (its
// routes answer 503 without it).
func (con *Console) ready(ctx context.Context) error {
	if err := con.pool.Ping(ctx); err != nil {
		return err
	}
	if _, err := con.consul.Status().LeaderWithQueryOptions((&consulapi.QueryOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("Consul %s: %v", con.cfg.ConsulAddr, err)
	}
	return nil
}

// registered are the topics whose queues the console reads: those the
// stage's relays registered, and Config.Topics.
func (con *Console) registered(ctx context.Context) ([]string, error) {
	return con.pool.Topics(ctx, con.cfg.Topics...)
}

// follow re-reads AdminTokensFile when it changes or on SIGHUP until ctx
// ends, so that a token is added or revoked without a restart; a file that
// no longer parses, or that leaves the API with no token at all (emptied,
// or half written), keeps the tokens in force (internal/reload): the API
// must not lock every operator out on a truncated write.
func (con *Console) follow(ctx context.Context) {
	if con.cfg.AdminTokensFile == "" || con.cfg.Auth != nil {
		return
	}
	reload.Watch(ctx, con.cfg.AdminTokensFile, "admin tokens", reload.Options{Every: con.cfg.TokensCheckEvery, Log: con.log},
		func(string) (*admin.Auth, error) {
			a, err := con.cfg.auth()
			if err == nil && !a.Configured() {
				err = errors.New("no token left in the file nor in Config.AdminTokens; to revoke every token, give the file another one (or stop the console)")
			}
			return a, err
		},
		func(a *admin.Auth) { con.auth.Store(a) })
}

// checkSafe checks, beside the console's serving, that Redis answers and
// evicts no keys (queue.Pool.AwaitSafe): the console writes (a dead job
// replayed or purged, a group cancelled). It serves meanwhile, so that a
// Redis that is down can be looked into. The context it returns ends with
// ctx, or once the check found Redis unsafe; unsafe then says why (nil
// when ctx ended first), once the check is over.
func (con *Console) checkSafe(ctx context.Context) (context.Context, func() error) {
	ctx, stop := context.WithCancel(ctx)
	var found error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := con.pool.AwaitSafe(ctx, con.log); err != nil && ctx.Err() == nil {
			found = fmt.Errorf("console: %w", err)
			con.log.Error("refusing to serve", "err", found)
			stop()
		}
	}()
	return ctx, func() error { stop(); <-done; return found }
}
