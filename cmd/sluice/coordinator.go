package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// runCoordinator is sluice coordinator: the coordinator, and by default the
// console on its listener (--console).
func runCoordinator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	cfg := coordinator.DefaultConfig()
	cfg.RegisterFlags(fs)
	var con coordinatorConsole
	con.register(fs)
	var logging cli.Logging
	logging.Register(fs)
	ctx, log, stop, err := start(ctx, fs, "coordinator", &logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	var ccfg *console.Config
	if con.enabled {
		con.share(cfg)
		warnNoAdminTokens(log, con.cfg)
		con.cfg.SettingName = settingNames("coordinator", con.cfg)
		ccfg = &con.cfg
	}
	return ops.ListenAndServe(ctx, "coordinator", cfg.Listen, func() (*coordinatorProcess, error) {
		p, err := newCoordinatorProcess(cfg, ccfg, log)
		if err == nil && ccfg == nil {
			// --console=false: the console's --tls-* still serve the
			// listener (/healthz, /readyz, /metrics).
			if p.tls, err = listenerTLS(con.cfg.TLS, log); err != nil {
				p.co.Close()
				p = nil
			}
		}
		if err != nil && strings.HasPrefix(err.Error(), "console: ") {
			// The console's errors name its Config's fields.
			return p, flagHint(err, "coordinator", con.cfg)
		}
		return p, flagHint(err, "coordinator", cfg)
	})
}

// listenerTLS is the server TLS of sluice coordinator's listener when no
// console runs there: what the console's would be (console.New checks it
// the same way when one does).
func listenerTLS(s tlsfiles.Server, log *slog.Logger) (*tls.Config, error) {
	tc, err := s.Config(func(err error) {
		log.Error("the renewed TLS certificate does not load: serving the last good one", "err", err)
	})
	if err != nil {
		return nil, fmt.Errorf("console: Config.TLS.CertFile, Config.TLS.KeyFile, Config.TLS.ClientCAFile: %w", err)
	}
	return tc, nil
}
