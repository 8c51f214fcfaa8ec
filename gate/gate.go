package gate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/callback"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/reload"
)

// Gate serves the enqueue API.
type Gate struct {
	cfg      Config
	log      *slog.Logger
	producer *kafka.Producer
	catalog  *kafka.Catalog
	auth     atomic.Pointer[Auth] // swapped when TokensFile changes (followTokens)
	allowed  map[string]bool
	metrics  *metrics
	reg      *prometheus.Registry
	now      func() time.Time
	handler  http.Handler
	groups   redisSide // nil without Config.RedisAddr
	guard    *callback.Guard
	tls      *tls.Config // nil without Config.TLS: plain HTTP
}

// New connects to Kafka and returns a gate ready to serve. It fails when no
// broker answers, when the token configuration is invalid or missing
// without AllowNoAuth, or when Config.TLS names a file it cannot load.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Gate, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	guard, err := callback.NewGuard(cfg.CallbackAllow, cfg.CallbackResolver)
	if err != nil {
		return nil, fmt.Errorf("gate: Config.CallbackAllow: %w", err)
	}
	// Before Kafka: a bad certificate is the operator's to fix at once.
	tc, err := cfg.TLS.ForPart("gate", log)
	if err != nil {
		return nil, err
	}
	auth, err := LoadAuth(cfg.TokensFile, cfg.Tokens)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	if !auth.Enabled() && !cfg.AllowNoAuth {
		return nil, errors.New("gate: no bearer tokens: set Config.TokensFile or Config.Tokens, or Config.AllowNoAuth for development")
	}
	// The envelope adds the gate's fields (id, id_given, topic, enqueued_at) to the
	// client's body; leave room for them under Kafka's record limit.
	producer, err := kafka.NewProducer(&cfg.Kafka, kafka.ProducerOptions{MaxMessageBytes: int(cfg.MaxBodyBytes) + 4096, Linger: cfg.ProduceLinger, ShortISRHold: cfg.ShortISRHold,
		AckTimeout: ackTimeout(cfg.ProduceTimeout)}, log)
	if err != nil {
		return nil, err
	}
	g := &Gate{
		cfg:      cfg,
		log:      log,
		producer: producer,
		allowed:  map[string]bool{},
		reg:      ops.NewRegistry(),
		now:      time.Now,
		guard:    guard,
		tls:      tc,
	}
	g.auth.Store(auth)
	for _, t := range cfg.Topics {
		g.allowed[t] = true
	}
	if cfg.RedisAddr != "" {
		if g.groups, err = openRedis(cfg.PoolConfig()); err != nil {
			producer.Close()
			return nil, err
		}
	}
	g.catalog = kafka.NewCatalog(ctx, producer.Client(), cfg.MetadataRefresh, log)
	g.metrics = newMetrics(g.reg)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/topics/{topic}", g.instrument("topic", g.serveTopic))
	mux.HandleFunc("/v1/topics/{topic}/jobs", g.instrument("job", g.serveJob))
	mux.HandleFunc("/v1/topics/{topic}/jobs:batch", g.instrument("batch", g.serveBatch))
	mux.HandleFunc("/v1/topics/{topic}/groups", g.instrument("group", g.serveGroup))
	mux.HandleFunc("/v1/topics/{topic}/groups/{id}", g.instrument("group_status", g.serveGroupStatus))
	mux.HandleFunc("/v1/groups/{id}", g.instrument("group_status", g.serveGroupStatus))
	mux.HandleFunc("/v1/topics/{topic}/jobs/{id}", g.instrument("job_lookup", g.serveJobLookup))
	ops.Mount(mux, g.reg, g.catalog.Ready)
	g.handler = mux
	if !auth.Enabled() {
		log.Warn("authentication is off: any client may write any allowed topic (Config.AllowNoAuth)")
	}
	return g, nil
}

// Handler is the gate's HTTP handler: the API plus /healthz, /readyz and
// /metrics.
func (g *Gate) Handler() http.Handler { return g.handler }

// TLSConfig is the server TLS of Config.TLS, which Serve serves with: nil
// without it. It re-reads a renewed certificate. A program that serves
// Handler on a server of its own may serve it with this.
func (g *Gate) TLSConfig() *tls.Config { return g.tls }

// Registry holds the gate's metrics.
func (g *Gate) Registry() *prometheus.Registry { return g.reg }

// Run keeps the gate's list of Kafka topics fresh until ctx ends, then
// flushes and closes its Kafka producer and its Redis clients: for a
// program that serves Handler on a server of its own, which it must stop
// before ctx ends. Serve does both on a listener.
func (g *Gate) Run(ctx context.Context) error {
	g.catalog.Run(ctx)
	return g.close()
}

// Serve serves Handler on ln until ctx ends, then drains in-flight
// requests for up to Config.DrainTimeout and closes the gate as Run does.
// With Config.TLS it serves HTTPS (only) on ln. sluice gate listens on
// Config.Listen.
func (g *Gate) Serve(ctx context.Context, ln net.Listener) error {
	if g.cfg.Pprof {
		stop, err := g.servePprof(ctx)
		if err != nil {
			ln.Close()
			g.close()
			return err
		}
		defer stop()
	}
	if g.tls != nil {
		ln = tls.NewListener(ln, g.tls)
	}
	// The topic list's refresh ends before the producer (whose client it
	// reads) closes, and before Serve returns: nothing of the gate runs,
	// or logs, after it.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	refreshing := make(chan struct{})
	go func() {
		defer close(refreshing)
		g.catalog.Run(cctx)
	}()
	following := make(chan struct{})
	go func() {
		defer close(following)
		g.followTokens(cctx)
	}()
	defer func() { <-following }()
	srv := ops.NewServer(g.handler, g.cfg.HTTP, g.log)
	g.log.Info("gate serving", "addr", ln.Addr().String(), "https", g.tls != nil, "client_certs", g.tls != nil && g.tls.ClientCAs != nil, "brokers", strings.Join(g.cfg.Kafka.Brokers, ","))
	err := ops.Serve(ctx, g.log, srv, ln, g.cfg.DrainTimeout)
	cancel()
	// A refresh under way while Kafka is away may take its client's
	// timeouts; it gets a drain's time, then the closing client ends it.
	drained := time.NewTimer(g.cfg.DrainTimeout)
	select {
	case <-refreshing:
	case <-drained.C:
	}
	drained.Stop()
	if cerr := g.close(); err == nil {
		err = cerr
	}
	g.log.Info("gate stopped")
	return err
}

// servePprof serves Go's profiler on Config.PprofListen, a loopback
// address, until ctx ends or stop, which waits for it.
func (g *Gate) servePprof(ctx context.Context) (stop func(), err error) {
	ln, err := ops.ListenLoopback(g.cfg.PprofListen)
	if err != nil {
		return nil, fmt.Errorf("gate: Config.PprofListen %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	g.log.Warn("serving Go's profiler without authentication on a loopback address (Config.Pprof)", "addr", ln.Addr().String())
	// Profiles take up to their ?seconds= (30 by default) to write.
	l := ops.DefaultHTTPLimits()
	l.WriteTimeout = 2 * time.Minute
	srv := ops.NewServer(ops.PprofHandler(), l, g.log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ops.Serve(ctx, g.log, srv, ln, time.Second)
	}()
	return func() { cancel(); <-done }, nil
}

// close flushes the producer and closes the Redis clients.
func (g *Gate) close() error {
	err := g.producer.Close()
	if g.groups != nil {
		g.groups.Close()
	}
	return err
}

// checkCallback refuses a callback_url the coordinator would refuse to
// deliver to (internal/callback): not http(s), or a host that is or
// resolves to a non-public address not in Config.CallbackAllow. Its error
// is a *job.FieldError, a 400.
func (g *Gate) checkCallback(ctx context.Context, url string) error {
	if url == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.CallbackResolveTimeout)
	defer cancel()
	if err := g.guard.CheckURL(ctx, url); err != nil {
		if errors.Is(context.Cause(ctx), errResolveBudget) {
			err = errResolveBudget
		}
		return &job.FieldError{Field: "callback_url", Reason: err.Error()}
	}
	return nil
}

// errResolveBudget is the cause of a batch's callback lookups running
// out of Config.CallbackResolveBudget.
var errResolveBudget = errors.New("the batch's callback host lookups ran out of their time (--callback-resolve-budget): send fewer distinct callback hosts per batch, or this job again")

// callbackChecks is the context of a batch's callback_url checks: each
// host looked up once (callback.WithLookupCache), all of them within
// Config.CallbackResolveBudget, so that a batch of slow hosts costs the
// gate that long at most, not a lookup timeout per job. cancel ends it.
func (g *Gate) callbackChecks(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeoutCause(ctx, g.cfg.CallbackResolveBudget, errResolveBudget)
	return callback.WithLookupCache(ctx), cancel
}

// validate is a job's checks at the gate: the envelope's, then where its
// callback_url goes (a lookup, so last).
func (g *Gate) validate(ctx context.Context, j *job.Job, topic string, now time.Time) error {
	if err := j.Validate(topic, now); err != nil {
		return err
	}
	return g.checkCallback(ctx, j.CallbackURL)
}

// followTokens re-reads TokensFile when it changes or on SIGHUP until ctx
// ends: a token added or revoked takes effect within TokensCheckEvery,
// without a restart. A file that no longer parses, or that would leave the
// gate with no token at all (which, with AllowNoAuth, would turn
// authentication off), is refused and the tokens in force stay
// (internal/reload). A gate that started without a token under
// AllowNoAuth stays open.
func (g *Gate) followTokens(ctx context.Context) {
	if g.cfg.TokensFile == "" {
		return
	}
	reload.Watch(ctx, g.cfg.TokensFile, "gate tokens", reload.Options{Every: g.cfg.TokensCheckEvery, Log: g.log},
		func(path string) (*Auth, error) {
			a, err := LoadAuth(path, g.cfg.Tokens)
			switch {
			case err != nil:
			case !a.Enabled() && !g.cfg.AllowNoAuth:
				err = errors.New("no token left, and the gate does not run without (Config.AllowNoAuth)")
			case !a.Enabled() && g.auth.Load().Enabled():
				err = errors.New("no token left: with Config.AllowNoAuth that would turn authentication off; restart the gate to run without tokens")
			}
			return a, err
		},
		func(a *Auth) { g.auth.Store(a) })
}

// ackTimeout is how long a Kafka leader may hold an acks=all produce request
// waiting for its in-sync replicas (kafka.ProducerOptions.AckTimeout): half
// the produce timeout, so that a request stuck behind a stopped follower is
// answered and retried (idempotently) while its client still waits, rather
// than holding every record for that broker past the deadline.
func ackTimeout(produce time.Duration) time.Duration {
	return max(produce/2, 250*time.Millisecond)
}
