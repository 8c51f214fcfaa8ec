package main

import (
	"context"
	"flag"
	"io"
	"strings"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/ops"
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
		if err != nil && ccfg != nil && strings.HasPrefix(err.Error(), "console: ") {
			// The console's errors name its Config's fields.
			return p, flagHint(err, "coordinator", *ccfg)
		}
		return p, flagHint(err, "coordinator", cfg)
	})
}
