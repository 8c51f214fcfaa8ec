package worker

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/cli"
)

// ParseFlags gives a program that embeds the worker sluice worker's flags
// and SLUICE_* variables in one call. It registers every flag of the
// Config on fs (RegisterFlags, c's values as defaults) and --log-level and
// --log-format, then parses args. A flag not on the command line is read
// from SLUICE_WORKER_<FLAG>, then SLUICE_<FLAG> (SLUICE_WORKER_REDIS_ADDR,
// SLUICE_REDIS_ADDR), as sluice worker reads it; flags the program
// registered on fs before get the same fallbacks. It returns the logger
// the log flags describe (JSON by default), writing to stderr.
//
// A nil fs is a new FlagSet named after the program that returns its errors
// (flag.ContinueOnError). -h or --help prints every flag with its variable
// and default, and returns flag.ErrHelp; a bad flag is printed with the
// help, a bad variable only returned. sluice worker's built-in handlers
// (--handle, --http, --handle-other) are the binary's, not the Config's.
func (c *Config) ParseFlags(fs *flag.FlagSet, args []string) (*slog.Logger, error) {
	program := filepath.Base(os.Args[0])
	if fs == nil {
		fs = flag.NewFlagSet(program, flag.ContinueOnError)
	} else if fs.Name() != "" {
		program = fs.Name()
	}
	c.RegisterFlags(fs)
	var logging cli.Logging
	logging.Register(fs)
	if err := cli.ParseProgram(fs, program, "worker", args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	log, err := logging.Logger(os.Stderr)
	if err != nil {
		return nil, err
	}
	// --tracing: on until ListenAndServe returns, which flushes the spans.
	stop, err := logging.StartTracing(context.Background(), "worker", log)
	if err != nil {
		return nil, err
	}
	stopTracing.Store(&stop)
	return log, nil
}

// stopTracing flushes the tracing ParseFlags started, when it did.
var stopTracing atomic.Pointer[func()]

// ListenAndServe runs the worker as sluice worker does, for a program's
// main. It listens on Config.Listen for /healthz, /readyz and /metrics
// (empty: no listener, only Run), and consumes until ctx ends or the
// process gets SIGINT or SIGTERM. Then it drains: it stops claiming, lets
// running jobs finish for up to Config.Drain and hands the rest back to
// ready, their attempts not counted. A second signal exits the process at
// once (status 1), for an operator whose drain hangs. It returns nil after
// a stop, or an error naming the address it could not listen on.
func (w *Worker) ListenAndServe(ctx context.Context) error {
	ctx, stop := cli.SignalContext(ctx, w.log)
	defer stop()
	defer func() {
		if f := stopTracing.Swap(nil); f != nil {
			(*f)()
		}
	}()
	if w.cfg.Listen == "" {
		return w.Run(ctx)
	}
	ln, err := net.Listen("tcp", w.cfg.Listen)
	if err != nil {
		w.limits.close()
		w.pool.Close()
		return fmt.Errorf("worker: Config.Listen: %w", err)
	}
	return w.Serve(ctx, ln)
}
