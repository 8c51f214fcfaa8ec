package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// The admin commands (docs/admin.md): thin clients of the console's admin
// API. Every one takes the flags of adminFlags; their subcommands
// come first (sluice dlq ls ...), flags and arguments in any order after.

// adminFlags are every admin command's flags.
type adminFlags struct {
	url     string
	token   cli.Secret
	tls     tlsfiles.Client
	output  string
	timeout time.Duration
}

func (f *adminFlags) register(fs *flag.FlagSet) {
	f.registerConn(fs, "the admin API: the --listen address of sluice coordinator (its console) or sluice console, https:// when it serves HTTPS (SLUICE_ADMIN_URL)")
	fs.StringVar(&f.output, "o", "table", "output: table, or json (the API's answer)")
	cli.DurationVar(fs, &f.timeout, "timeout", 10*time.Second, "time limit of the request")
}

// registerConn adds the flags that reach the admin API: its URL, its
// token, its TLS. They are named admin-*, so that cli's shared fallbacks
// are SLUICE_ADMIN_* across commands, apart from any part's own (a
// SLUICE_TLS_CERT_FILE meant for a server is never a client's).
func (f *adminFlags) registerConn(fs *flag.FlagSet, urlUsage string) {
	fs.StringVar(&f.url, "admin-url", admin.DefaultURL, urlUsage)
	cli.SecretVar(fs, &f.token, "admin-token", "the admin API's bearer token")
	// An --admin-token given beside SLUICE_ADMIN_TOKEN_FILE (sluice dev's
	// banner exports it) is the one meant: the inline form wins here.
	fs.Lookup("admin-token-file").Usage = "file holding the admin API's bearer token (read by each command; --admin-token wins over it); sluice dev writes <its --dir>/admin-token"
	f.tls.Register(fs, "admin", "the admin API")
}

// adminTLSSettings name the flags that mend a TLS failure with the admin
// API.
var adminTLSSettings = tlsfiles.ClientSettings{
	CAFile:     "--admin-tls-ca-file (SLUICE_ADMIN_TLS_CA_FILE)",
	CertFile:   "--admin-tls-cert-file and --admin-tls-key-file (SLUICE_ADMIN_TLS_CERT_FILE, SLUICE_ADMIN_TLS_KEY_FILE)",
	ServerName: "--admin-tls-server-name",
}

// client resolves the token (--admin-token, else --admin-token-file's
// content, as before the file form was a cli.Secret; cli reads them from
// SLUICE_ADMIN_TOKEN and SLUICE_ADMIN_TOKEN_FILE: the API's token is one
// across commands) and the TLS, and checks the output.
func (f *adminFlags) client() (*admin.Client, error) {
	if f.output != "table" && f.output != "json" {
		return nil, usageErrorf("-o %q: want table or json", f.output)
	}
	tok := f.token.Value
	if tok == "" {
		var err error
		if tok, err = f.token.Read(); err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w (sluice dev writes the token to <its --dir>/admin-token)", err)
		}
	}
	hc := &http.Client{Timeout: f.timeout}
	tc, err := f.tls.Config()
	if err != nil {
		return nil, fmt.Errorf("--admin-tls-ca-file, --admin-tls-cert-file, --admin-tls-key-file: %w", err)
	}
	if tc != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		hc.Transport = t
	}
	return &admin.Client{BaseURL: f.url, Token: tok, HTTP: hc}, nil
}

// parseArgs parses a command's flags wherever they are among its
// positional arguments (sluice rate set jobs 50 --burst 100), and returns
// the positional ones. program heads --help ("sluice periodic set <name>
// ..."); the environment variables are part's.
func parseArgs(fs *flag.FlagSet, program, part string, args []string, stdout io.Writer) ([]string, error) {
	fs.SetOutput(stdout)
	var pos []string
	for {
		if err := cli.ParseProgram(fs, program, part, args); err != nil {
			var envErr *cli.EnvError
			if cli.IsHelp(err) || errors.As(err, &envErr) {
				return nil, err
			}
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// adminCmd is one subcommand: its name, its arguments' synopsis, and what
// it does with the positional arguments.
type adminCmd struct {
	name, synopsis string
	register       func(fs *flag.FlagSet)
	run            func(ctx context.Context, c *admin.Client, args []string, out io.Writer, json bool) error
}

// runAdmin dispatches `sluice <part> <sub> ...` to sub.
func runAdmin(ctx context.Context, part string, subs []adminCmd, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stdout, "Usage: sluice %s <command> [flags] [arguments]\n\nCommands:\n", part)
		for _, s := range subs {
			fmt.Fprintf(stdout, "  sluice %s %s %s\n", part, s.name, s.synopsis)
		}
		fmt.Fprintf(stdout, "\nRun `sluice %s <command> --help` for the flags. See docs/admin.md.\n", part)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	for _, s := range subs {
		if s.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet(part+" "+s.name, flag.ContinueOnError)
		var f adminFlags
		f.register(fs)
		if s.register != nil {
			s.register(fs)
		}
		// --help heads with this subcommand and its arguments, not the parent.
		program := strings.TrimSpace("sluice " + part + " " + s.name + " " + s.synopsis)
		pos, err := parseArgs(fs, program, part, args[1:], stdout)
		if err != nil {
			return err
		}
		c, err := f.client()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		err = s.run(ctx, c, pos, stdout, f.output == "json")
		if errors.Is(err, errReported) {
			return err
		}
		return explain(err)
	}
	return usageErrorf("unknown command %q: want one of %s (sluice %s --help)", args[0], subNames(subs), part)
}

func subNames(subs []adminCmd) string {
	var n []string
	for _, s := range subs {
		n = append(n, s.name)
	}
	return strings.Join(n, ", ")
}

// explain adds what to check to an API error, or to a TLS failure on
// the way to the API.
func explain(err error) error {
	var un *admin.UnreachableError
	if errors.As(err, &un) {
		var he *tlsfiles.HandshakeError
		if errors.As(adminTLSSettings.Explain(un.Err), &he) {
			// The console answered the dial: it is there, and the
			// certificates are what to fix.
			return fmt.Errorf("the admin API at %s: %w", un.URL, he)
		}
	}
	var e *admin.Error
	if !errors.As(err, &e) {
		return err
	}
	msg := fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
	if e.Fix != "" {
		msg += "\n  fix: " + e.Fix
	}
	switch e.Status {
	case http.StatusBadRequest:
		if strings.Contains(e.Message, "HTTP request to an HTTPS server") {
			msg += "\n  the console serves HTTPS: give --admin-url as https://..., with --admin-tls-ca-file for a private CA"
		}
	case http.StatusUnauthorized:
		msg += "\n  give the admin API's token: --admin-token, --admin-token-file, SLUICE_ADMIN_TOKEN or SLUICE_ADMIN_TOKEN_FILE (sluice dev: .sluice/admin-token)"
	case http.StatusForbidden:
		msg += "\n  this needs a token with the admin role (read tokens may only look)"
	}
	return errors.New(msg)
}

// wantArgs checks the count of positional arguments: a wrong count is a
// usage error (exit 2).
func wantArgs(args []string, min, max int, synopsis string) error {
	if len(args) < min || (max >= 0 && len(args) > max) {
		return usageErrorf("want arguments %s, got %q", synopsis, args)
	}
	return nil
}

// show prints the API's answer: as JSON with json, else through table.
func show[T any](ctx context.Context, c *admin.Client, method, path string, body any, out io.Writer, asJSON bool, table func(w *tabwriter.Writer, v T)) error {
	var raw json.RawMessage
	if err := c.Do(ctx, method, path, body, &raw); err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, raw)
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("the answer of %s %s: %w", method, path, err)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	table(tw, v)
	return tw.Flush()
}

func printJSON(out io.Writer, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		_, err = out.Write(raw)
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// cell makes s fit a table cell: one line, at most n runes.
func cell(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}

func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}
