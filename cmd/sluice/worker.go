package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"unicode"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/worker"
)

func init() {
	cli.Describe("worker", "The worker: claims jobs from its topics' queues on its Redis partitions (--topics, weighted or --strict) in fair order and runs them with built-in handlers:\n"+
		"  --handle \"type=noop,type2=sleep\"  --http \"type=https://host/path,...\"  --handle-other noop|sleep\n"+
		"Execution rate limits per resource key follow sluice/<stage>/limits/<resource> in Consul (--consul-addr).\n"+
		"Programs with handlers of their own embed the worker package instead. Ops: /healthz, /readyz, /metrics.")
}

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg := worker.DefaultConfig()
	cfg.RegisterFlags(fs)
	var handlers builtinHandlers
	handlers.register(fs)
	var logging cli.Logging
	logging.Register(fs)
	ctx, log, stop, err := start(ctx, fs, "worker", &logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	return ops.ListenAndServe(ctx, "worker", cfg.Listen, func() (*worker.Worker, error) {
		w, err := worker.New(cfg, log)
		if err != nil {
			return nil, flagHint(err, "worker", cfg)
		}
		return w, handlers.apply(w)
	})
}

// builtinHandlers are what sluice worker adds to the worker's flags: the
// handlers it runs, built in (a program with handlers of its own embeds
// the worker package instead).
type builtinHandlers struct {
	handle string // --handle "type=noop,type2=sleep"
	http   string // --http "type=https://host/path,..."
	other  string // --handle-other noop|sleep
}

func (h *builtinHandlers) register(fs *flag.FlagSet) {
	fs.StringVar(&h.handle, "handle", "", "built-in handlers by job type: \"type=noop,type2=sleep\"")
	fs.StringVar(&h.http, "http", "", "http handlers by job type: \"type=https://host/path,...\" (POST the payload)")
	fs.StringVar(&h.other, "handle-other", "", "built-in handler for every other job type: noop or sleep (empty: such jobs go dead)")
}

// apply registers the handlers on w.
func (h *builtinHandlers) apply(w *worker.Worker) error {
	builtin := map[string]worker.Handler{"noop": worker.Noop, "sleep": worker.Sleep}
	for _, def := range strings.Split(h.handle, ",") {
		if def = strings.TrimSpace(def); def == "" {
			continue
		}
		typ, name, ok := strings.Cut(def, "=")
		hd, known := builtin[strings.TrimSpace(name)]
		if !ok || !known || typ == "" {
			return fmt.Errorf("--handle %q: want type=noop or type=sleep", def)
		}
		w.Handle(strings.TrimSpace(typ), hd)
	}
	hs, err := parseHTTPHandlers(h.http)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	for typ, hd := range hs {
		w.Handle(typ, hd)
	}
	if h.other != "" {
		hd, known := builtin[h.other]
		if !known {
			return fmt.Errorf("--handle-other %q: want noop or sleep", h.other)
		}
		w.HandleOther(hd)
	}
	return nil
}

// parseHTTPHandlers parses --http, mapping job types to URLs:
//
//	email=https://mail.internal/send,sms=http://127.0.0.1:9000/sms
//
// Entries are separated by commas (write a comma inside a URL as %2C);
// blanks around entries and empty entries are ignored. Each entry is
// TYPE=URL, split at the first '='; the URL must be absolute http or https
// with a host. A type may appear once. The handlers use the default client
// and no extra headers. An empty spec yields an empty map.
func parseHTTPHandlers(spec string) (map[string]*worker.HTTPHandler, error) {
	out := make(map[string]*worker.HTTPHandler)
	for i, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		typ, raw, ok := strings.Cut(entry, "=")
		typ, raw = strings.TrimSpace(typ), strings.TrimSpace(raw)
		if !ok {
			return nil, fmt.Errorf("http handlers: entry %d %q: want TYPE=URL", i+1, entry)
		}
		if typ == "" {
			return nil, fmt.Errorf("http handlers: entry %d: empty job type before '='", i+1)
		}
		if strings.IndexFunc(typ, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return nil, fmt.Errorf("http handlers: entry %d: job type %q contains whitespace or control characters", i+1, typ)
		}
		if _, dup := out[typ]; dup {
			return nil, fmt.Errorf("http handlers: job type %q given more than once", typ)
		}
		if raw == "" {
			return nil, fmt.Errorf("http handlers: job type %q: empty URL", typ)
		}
		u, err := url.Parse(raw)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // without the URL itself: it may carry a password
			}
			return nil, fmt.Errorf("http handlers: job type %q: invalid URL: %v", typ, err)
		}
		switch strings.ToLower(u.Scheme) {
		case "http", "https":
		case "":
			return nil, fmt.Errorf("http handlers: job type %q: URL %s is not absolute: want http:// or https://", typ, cli.RedactURL(raw))
		default:
			return nil, fmt.Errorf("http handlers: job type %q: URL scheme %q not supported: want http or https", typ, u.Scheme)
		}
		if u.Host == "" || u.Hostname() == "" {
			return nil, fmt.Errorf("http handlers: job type %q: URL %s has no host", typ, cli.RedactURL(raw))
		}
		out[typ] = &worker.HTTPHandler{URL: raw}
	}
	return out, nil
}
