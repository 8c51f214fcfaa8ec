package main

import (
	"context"
	"crypto/tls"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
)

// runConsole is sluice console: the admin API and the dashboard alone, on
// a listener of their own (sluice coordinator serves them on its own too).
func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	cfg := console.DefaultConfig()
	cfg.RegisterFlags(fs)
	var logging cli.Logging
	logging.Register(fs)
	ctx, log, stop, err := start(ctx, fs, "console", &logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	warnNoAdminTokens(log, cfg)
	cfg.SettingName = settingNames("console", cfg)
	return ops.ListenAndServe(ctx, "console", cfg.Listen, func() (*console.Console, error) {
		c, err := console.New(cfg, log)
		return c, flagHint(err, "console", cfg)
	})
}

func warnNoAdminTokens(log *slog.Logger, cfg console.Config) {
	if cfg.AdminTokens == "" && cfg.AdminTokensFile == "" && !cfg.AdminInsecure {
		log.Warn("the admin API has no tokens: it answers 403 until --admin-tokens or --admin-tokens-file is set")
	}
}

// settingNames names a console's Config fields, in the admin API's fixes,
// by the flag and variable of sluice <part> that set each.
func settingNames(part string, cfg console.Config) func(field string) string {
	byField := fieldFlags(cfg)
	return func(field string) string {
		if name, ok := byField[field]; ok {
			return "sluice " + part + "'s --" + name + " (" + cli.EnvName(part, name) + ")"
		}
		return "the console's Config." + field
	}
}

// coordinatorConsole is the console sluice coordinator runs in its process
// unless --console=false: its flags are sluice coordinator's too, so a
// deployment that ran the admin API inside the coordinator keeps every
// flag and variable (SLUICE_COORDINATOR_ADMIN_TOKENS, ...).
type coordinatorConsole struct {
	enabled bool
	cfg     console.Config
}

// coordinatorConsoleConfig is the console's configuration in sluice
// coordinator before its flags: DefaultConfig, with the Kafka client id the
// admin API had in the coordinator.
func coordinatorConsoleConfig() console.Config {
	cfg := console.DefaultConfig()
	cfg.Kafka.ClientID = "sluice-coordinator"
	return cfg
}

// sharedConsoleFlags are the console's flags that sluice coordinator's
// Config defines already: one flag sets both (share).
// Every flag of the embedded queue.StageRedis is one (share copies it whole).
// So is every flag of the embedded consul.Config (share copies it whole).
// So is every flag of the listener's ops.HTTPLimits: one listener, one set
// of limits (share copies them).
var sharedConsoleFlags = append(append(append([]string{"listen", "topics", "consumer-ttl"}, stageRedisFlags()...), consulFlags()...), httpFlags()...)

// httpFlags are the names of ops.HTTPLimits' flags.
func httpFlags() []string {
	var l ops.HTTPLimits
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	l.RegisterFlags(fs, "")
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// stageRedisFlags are the names of queue.StageRedis's flags.
func stageRedisFlags() []string {
	var loc queue.StageRedis
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	loc.RegisterFlags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// consulFlags are the names of consul.Config's flags.
func consulFlags() []string {
	var c consul.Config
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.RegisterFlags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// register adds --console and the console's flags that fs, sluice
// coordinator's, does not define yet (sharedConsoleFlags), bound to cc.cfg.
func (cc *coordinatorConsole) register(fs *flag.FlagSet) {
	cc.cfg = coordinatorConsoleConfig()
	own := flag.NewFlagSet("console", flag.ContinueOnError)
	cc.cfg.RegisterFlags(own)
	own.VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) == nil {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	// One listener, one TLS: the console's flags serve all of it.
	for _, name := range []string{"tls-cert-file", "tls-key-file", "tls-client-ca-file"} {
		f := fs.Lookup(name)
		f.Usage = strings.Replace(f.Usage, "the console (the admin API, the dashboard, /healthz, /readyz and /metrics)",
			"sluice coordinator's --listen (the console, /healthz, /readyz and /metrics; with --console=false too)", 1)
	}
	cc.enabled = true
	fs.BoolVar(&cc.enabled, "console", cc.enabled, "serve the console on --listen too, as sluice console does: the admin API under /api/v1/ and the dashboard at / (docs/admin.md); --console=false leaves them to a sluice console of their own")
}

// share gives the console the coordinator's values of the flags they share
// (sharedConsoleFlags).
func (cc *coordinatorConsole) share(cfg coordinator.Config) {
	cc.cfg.Listen = cfg.Listen
	cc.cfg.StageRedis = cfg.StageRedis
	cc.cfg.Topics = cfg.Topics
	cc.cfg.Config = cfg.Config // Consul: address, token, TLS
	cc.cfg.ConsumerTTL = cfg.ConsumerTTL
	cc.cfg.HTTP = cfg.HTTP // the coordinator's server serves the console
}

// coordinatorProcess is what sluice coordinator and sluice dev serve on the
// coordinator's listener: the coordinator's /healthz, /readyz and /metrics,
// and the console at every other path, if any. Parts import only
// internal/, so they are composed here.
type coordinatorProcess struct {
	co  *coordinator.Coordinator
	con *console.Console // nil: --console=false
	// tls serves the whole listener over HTTPS: the console's
	// Config.TLS. nil: plain HTTP.
	tls *tls.Config
}

// newCoordinatorProcess builds the coordinator of cfg and, when ccfg is
// not nil, the console of *ccfg beside it: on the coordinator's listener
// (Config.Handler), showing the coordinator's lock, targets and scaling
// parameters (Config.Coordinator), its metrics on the coordinator's
// registry. Errors name the part and the Config field.
func newCoordinatorProcess(cfg coordinator.Config, ccfg *console.Config, log *slog.Logger) (*coordinatorProcess, error) {
	var routes *http.ServeMux
	if ccfg != nil {
		// The console needs the coordinator, which needs its handler
		// first: a mux that gets the console's once it is built.
		routes = http.NewServeMux()
		cfg.Handler = routes
	}
	co, err := coordinator.New(cfg, log)
	if err != nil {
		return nil, err
	}
	if ccfg == nil {
		return &coordinatorProcess{co: co}, nil
	}
	c := *ccfg
	c.Coordinator, c.Registry = co, co.Registry()
	con, err := console.New(c, log)
	if err != nil {
		co.Close()
		return nil, err
	}
	routes.Handle("/", con.Handler())
	return &coordinatorProcess{co: co, con: con, tls: con.TLSConfig()}, nil
}

// Serve serves the coordinator (and the console) on ln until ctx ends,
// over HTTPS when the console's Config.TLS asks for it. The console's
// clients close once the coordinator's server has drained its requests.
func (p *coordinatorProcess) Serve(ctx context.Context, ln net.Listener) error {
	if p.tls != nil {
		ln = tls.NewListener(ln, p.tls)
	}
	if p.con == nil {
		return p.co.Serve(ctx, ln)
	}
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- p.con.Run(cctx) }()
	err := p.co.Serve(ctx, ln)
	stop()
	<-done
	return err
}
