package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/internal/stack"
)

// sluice dev --tracing: a Jaeger v2 (bin/jaeger, built by `make deps`) as a
// child beside Redis and Consul, its traces in memory, and every part
// exporting to it (docs/tracing.md). An OTEL_EXPORTER_OTLP_ENDPOINT (or
// _TRACES_ENDPOINT) already set wins: then no Jaeger is started.

func (c *devConfig) registerTracing(fs *flag.FlagSet) {
	fs.StringVar(&c.JaegerAddr, "jaeger-addr", "127.0.0.1:16686", "with --tracing: the Jaeger UI and query API address")
	fs.StringVar(&c.OTLPAddr, "otlp-addr", "127.0.0.1:4318", "with --tracing: the Jaeger OTLP/HTTP receiver's address (its gRPC receiver takes a free port)")
}

// ownCollector reports whether the developer named an OTLP endpoint of
// their own.
func ownCollector() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// devTracing starts Jaeger (in the parent of a --split-processes stack
// only: the children inherit the endpoint) and turns tracing on.
func devTracing(ctx context.Context, cfg devConfig, dir string, log *slog.Logger) (func(context.Context) error, error) {
	var j *stack.Jaeger
	if cfg.OnlyPart == "" && !ownCollector() {
		for _, p := range []struct{ addr, what, flag string }{
			{cfg.JaegerAddr, "jaeger ui", "--jaeger-addr"}, {cfg.OTLPAddr, "jaeger otlp", "--otlp-addr"},
		} {
			if err := stack.CheckAddrFree(p.addr, p.what, p.flag); err != nil {
				return nil, err
			}
		}
		grpcPort, err := stack.FreePort()
		if err != nil {
			return nil, err
		}
		j, err = stack.StartJaeger(ctx, stack.JaegerConfig{
			OTLPHTTPAddr: cfg.OTLPAddr, OTLPGRPCAddr: fmt.Sprintf("127.0.0.1:%d", grpcPort), QueryAddr: cfg.JaegerAddr,
			Dir: filepath.Join(dir, "jaeger"),
		})
		if err != nil {
			return nil, fmt.Errorf("jaeger (--tracing): %w", err)
		}
		os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", j.OTLPEndpoint()) // the parts here and the children
		log.Info("jaeger up", "ui", j.QueryURL(), "otlp", j.OTLPEndpoint())
	}
	part := "dev"
	if cfg.OnlyPart != "" {
		part = "dev-" + cfg.OnlyPart
	}
	stopTracing, err := cfg.Logging.StartTracing(ctx, part, log)
	if err != nil {
		if j != nil {
			j.Stop(context.Background())
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		stopTracing() // flush the last spans while Jaeger still runs
		if j != nil {
			return j.Stop(ctx)
		}
		return nil
	}, nil
}

// printTracing tells where to look at the traces.
func printTracing(w io.Writer, cfg devConfig) {
	if !cfg.Logging.Tracing {
		return
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://"+cfg.OTLPAddr {
		fmt.Fprintf(w, `Tracing (--tracing, docs/tracing.md): every part exports its spans to Jaeger v2 (in memory: gone on restart).
  traces   http://%[1]s/api/traces?service=sluice-dev&limit=20   (Jaeger's query API, JSON)
           one job: POST it with -H 'traceparent: 00-<32 hex>-<16 hex>-01', then http://%[1]s/api/traces/<32 hex>
           UI: http://%[1]s/search?service=sluice-dev (bin/jaeger built by go carries no UI assets: Jaeger's release
           build, pointed at OTEL_EXPORTER_OTLP_ENDPOINT, shows the same traces in full)

`, cfg.JaegerAddr)
		return
	}
	fmt.Fprintf(w, "Tracing (--tracing, docs/tracing.md): spans export to your collector, OTEL_EXPORTER_OTLP_ENDPOINT / _TRACES_ENDPOINT.\n\n")
}
