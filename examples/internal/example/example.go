// Package example is the set-up the client examples share, so that each
// example's main.go shows only what it is an example of: Main (an
// interrupt cancels, -h prints the usage, an error exits 1) and the flags
// that reach the gate (GateFlags).
package example

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/sluicehq/sluice/client"
)

// Main runs run with the process's arguments and stdout, under a context
// that an interrupt cancels. An error is printed after name and exits 1;
// -h only prints the usage.
func Main(name string, run func(ctx context.Context, args []string, out io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed
		}
		fmt.Fprintln(os.Stderr, name+":", err)
		stop()
		os.Exit(1)
	}
}

// Gate holds the flags that reach the gate.
type Gate struct {
	url, token *string
}

// GateFlags registers --gate (env SLUICE_GATE_URL, default the gate of
// `sluice dev`) and --token (env SLUICE_GATE_TOKEN) on fs.
func GateFlags(fs *flag.FlagSet) *Gate {
	url := os.Getenv("SLUICE_GATE_URL")
	if url == "" {
		url = "http://127.0.0.1:8080"
	}
	return &Gate{
		url:   fs.String("gate", url, "the gate's base URL (env SLUICE_GATE_URL)"),
		token: fs.String("token", os.Getenv("SLUICE_GATE_TOKEN"), "bearer token, for a gate with --tokens (env SLUICE_GATE_TOKEN)"),
	}
}

// Client is a client of the gate the flags name; call it after fs.Parse.
func (g *Gate) Client() (*client.Client, error) {
	return client.New(client.Config{URL: *g.url, Token: *g.token})
}

// URL is the gate's base URL the flags name.
func (g *Gate) URL() string { return *g.url }
