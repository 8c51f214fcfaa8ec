package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/loadtest/openloop"
)

func init() {
	cli.Describe("loadtest", "Load generators and yardsticks for benchmarks (see BENCHMARKS.md):\n"+
		"  sluice loadtest gate [flags]         fixed-rate POSTs to a gate, latency percentiles from due time\n"+
		"  sluice loadtest body [--batch N]     print the envelope (or N as NDJSON) the gate benchmarks post\n"+
		"  sluice loadtest bare-server [flags]  an HTTP server that only reads the body and answers 202")
}

func runLoadtest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "sluice loadtest: want gate, body or bare-server")
		return errUsage
	}
	fs := flag.NewFlagSet("loadtest "+args[0], flag.ContinueOnError)
	var (
		url, listen, token string
		rate               float64
		duration           time.Duration
		conns, batch       int
	)
	fs.StringVar(&url, "url", "http://127.0.0.1:8080/v1/topics/jobs/jobs", "gate URL of the single-job route (the batch route is derived)")
	fs.StringVar(&listen, "listen", "127.0.0.1:8099", "bare-server: address to serve on")
	fs.StringVar(&token, "token", "", "bearer token for the gate")
	fs.Float64Var(&rate, "rate", 10000, "requests per second")
	cli.DurationVar(fs, &duration, "duration", 20*time.Second, "how long to send")
	fs.IntVar(&conns, "conns", 64, "connections (the most requests in flight)")
	fs.IntVar(&batch, "batch", 0, "jobs per request: 0 posts single jobs, N posts N as NDJSON to the batch route")
	if err := parse(fs, "loadtest", args[1:], stdout); err != nil {
		return err
	}
	body := openloop.Envelope(0)
	if batch > 0 {
		body = openloop.NDJSON(batch)
		url = strings.TrimSuffix(url, "/jobs") + "/jobs:batch"
	}
	switch args[0] {
	case "body":
		_, err := stdout.Write(body)
		return err
	case "bare-server":
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		ctx, stop := cli.SignalContext(ctx, discardLogger())
		defer stop()
		srv := ops.NewServer(openloop.BareHandler(), ops.DefaultHTTPLimits(), nil)
		go func() { <-ctx.Done(); srv.Close() }()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	case "gate":
		hdr := http.Header{}
		if token != "" {
			hdr.Set("Authorization", "Bearer "+token)
		}
		ctx, stop := cli.SignalContext(ctx, discardLogger())
		defer stop()
		rep, err := openloop.Run(ctx, openloop.Config{
			URL: url, Body: body, ContentType: "application/x-ndjson", Header: hdr,
			Rate: rate, Duration: duration, Conns: conns,
		})
		fmt.Fprintln(stdout, rep)
		return err
	}
	fmt.Fprintf(stderr, "sluice loadtest: unknown %q: want gate, body or bare-server\n", args[0])
	return errUsage
}
