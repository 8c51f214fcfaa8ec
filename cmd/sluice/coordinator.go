package main

import (
	"context"
	"flag"
	"io"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/ops"
)

func runCoordinator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	cfg := coordinator.DefaultConfig()
	cfg.RegisterFlags(fs)
	var logging cli.Logging
	logging.Register(fs)
	ctx, log, stop, err := start(ctx, fs, "coordinator", &logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	if cfg.AdminTokens == "" && cfg.AdminTokensFile == "" && !cfg.AdminInsecure {
		log.Warn("the admin API has no tokens: it answers 403 until --admin-tokens or --admin-tokens-file is set")
	}
	return ops.ListenAndServe(ctx, "coordinator", cfg.Listen, func() (*coordinator.Coordinator, error) {
		c, err := coordinator.New(cfg, log)
		return c, flagHint(err, "coordinator", cfg)
	})
}
