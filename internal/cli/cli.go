// Package cli holds what every sluice command shares: flags with SLUICE_*
// environment fallbacks, the help text that names them, logging set-up and a
// context that ends on SIGINT or SIGTERM.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/tracing"
)

// EnvName is the environment variable that backs flag name of a part:
// SLUICE_<PART>_<FLAG>, upper case, dashes as underscores
// (gate, kafka-brokers -> SLUICE_GATE_KAFKA_BROKERS).
func EnvName(part, name string) string {
	return "SLUICE_" + envWord(part) + "_" + envWord(name)
}

// SharedEnvName is the part-independent fallback, SLUICE_<FLAG>, so that one
// SLUICE_KAFKA_BROKERS serves every part of a deployment.
func SharedEnvName(name string) string { return "SLUICE_" + envWord(name) }

func envWord(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// Parse parses args into fs. A flag not given on the command line takes its
// value from SLUICE_<PART>_<FLAG>, then from SLUICE_<FLAG>; the command line
// wins over both. A bad environment value is an error that names the
// variable. -h and --help print the help and return flag.ErrHelp.
func Parse(fs *flag.FlagSet, part string, args []string) error {
	return parse(fs, "sluice "+part, part, args)
}

// ParseProgram is Parse for a program of its own that embeds a part (the
// worker's Config.ParseFlags): the same flags and variables, and a help
// that names the program instead of sluice.
func ParseProgram(fs *flag.FlagSet, program, part string, args []string) error {
	return parse(fs, program, part, args)
}

func parse(fs *flag.FlagSet, program, part string, args []string) error {
	fs.Usage = func() { usage(fs.Output(), fs, program, part) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		for _, env := range []string{EnvName(part, f.Name), SharedEnvName(f.Name)} {
			if v, ok := os.LookupEnv(env); ok {
				if serr := fs.Set(f.Name, v); serr != nil {
					err = &EnvError{Name: env, Value: v, Err: serr}
				}
				return
			}
		}
	})
	return err
}

// EnvError is a bad value in a SLUICE_* environment variable.
type EnvError struct {
	Name, Value string
	Err         error
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("environment %s=%q: %v", e.Name, e.Value, e.Err)
}

// Usage writes the help for fs: every flag with its environment variable and
// default.
func Usage(w io.Writer, fs *flag.FlagSet, part string) { usage(w, fs, "sluice "+part, part) }

func usage(w io.Writer, fs *flag.FlagSet, program, part string) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n", program)
	if doc, ok := partDocs[part]; ok {
		fmt.Fprintf(w, "%s\n\n", doc)
	}
	fmt.Fprintf(w, "Flags (each also read from the environment: SLUICE_%s_<FLAG>, then SLUICE_<FLAG>):\n", envWord(part))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var flags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	for _, f := range flags {
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		dashes := "--"
		if len(f.Name) == 1 {
			dashes = "-" // -o, as people write one-letter flags
		}
		fmt.Fprintf(tw, "  %s%s\t%s\t%s%s\n", dashes, f.Name, EnvName(part, f.Name), f.Usage, def)
	}
	tw.Flush()
}

var partDocs = map[string]string{}

// Describe registers the one-paragraph description --help prints for a part.
func Describe(part, doc string) { partDocs[part] = doc }

// IsHelp reports whether err is the flag package's answer to -h / --help.
func IsHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

// Logging holds the log and trace flags every part has.
type Logging struct {
	Level  string
	Format string
	// Tracing turns on OpenTelemetry tracing, configured by the standard
	// OTEL_* variables (docs/tracing.md). Default off.
	Tracing bool
}

// Register adds --log-level, --log-format and --tracing to fs.
func (l *Logging) Register(fs *flag.FlagSet) {
	fs.StringVar(&l.Level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&l.Format, "log-format", "json", "log format: json or text")
	fs.BoolVar(&l.Tracing, "tracing", false, "export OpenTelemetry traces over OTLP/HTTP, configured by the OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER...; docs/tracing.md)")
}

// StartTracing turns tracing on for the process when --tracing is set (a
// no-op otherwise), the service named sluice-<part> unless
// OTEL_SERVICE_NAME says otherwise. Call stop before exiting: it flushes
// the spans still buffered.
func (l *Logging) StartTracing(ctx context.Context, part string, log *slog.Logger) (stop func(), err error) {
	if !l.Tracing {
		return func() {}, nil
	}
	shutdown, err := tracing.Setup(ctx, "sluice-"+part, log)
	if err != nil {
		return nil, fmt.Errorf("--tracing: %w", err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("flushing the last spans failed", "err", err)
		}
	}, nil
}

// Logger builds the slog.Logger the flags describe, writing to w.
func (l *Logging) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", l.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	// Records logged with a context that carries a span get its trace_id
	// and span_id (a job's lines, in the worker).
	switch l.Format {
	case "json":
		return slog.New(tracing.LogHandler(slog.NewJSONHandler(w, opts))), nil
	case "text":
		return slog.New(tracing.LogHandler(slog.NewTextHandler(w, opts))), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", l.Format)
}

// SignalContext returns a context that is cancelled on SIGINT or SIGTERM. A
// second signal exits at once, for an operator whose graceful stop hangs.
func SignalContext(parent context.Context, log *slog.Logger) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			log.Info("signal received, shutting down; send it again to exit at once", "signal", sig.String())
			cancel()
		case <-ctx.Done():
			signal.Stop(ch)
			return
		}
		sig := <-ch
		log.Error("second signal, exiting now", "signal", sig.String())
		os.Exit(1)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

// DefaultGCPercent is the GOGC the sluice binary runs with unless the
// environment sets GOGC. Its parts keep live heaps of a few MiB and allocate
// per request, so Go's default of 100 collects dozens of times a second;
// 400 cut the gate's CPU per batched job by about a fifth (BENCHMARKS.md)
// for a heap that stays in the tens of MiB.
const DefaultGCPercent = 400

// TuneGC applies DefaultGCPercent unless GOGC is set.
func TuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
}

// ListFlag is a comma-separated list flag ("a,b,c").
type ListFlag []string

func (l *ListFlag) String() string { return strings.Join(*l, ",") }

// Set replaces the list (a flag given twice keeps the last value, like every
// other flag, so environment and command line do not merge).
func (l *ListFlag) Set(s string) error {
	*l = nil
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}
