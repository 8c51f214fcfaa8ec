package ops

import (
	"flag"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
)

// HTTPLimits bound what one connection may hold of an HTTP server, so a
// slow body, a trickle of headers or an idle keep-alive cannot keep a
// part's connections (and their memory) for ever, before any
// authentication. Every HTTP server of sluice is built by NewServer with
// them; docs/security.md ("Limits and timeouts") lists the defaults.
// A zero field takes its default.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included, from its
	// first byte. A route that takes a longer body extends it as the body
	// keeps coming (the gate's bulk groups). Default 1m.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the
	// end of its answer. Default 1m (the gate's: its ProduceTimeout plus
	// 1m).
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request. Default 2m.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (and its request line).
	// Default 64 KiB.
	MaxHeaderBytes int
}

// DefaultHTTPLimits are the limits a part's server has unless its flags
// say otherwise.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// RegisterFlags adds --http-read-header-timeout, --http-read-timeout,
// --http-write-timeout, --http-idle-timeout and --http-max-header-bytes
// to fs, bound to l's fields with l's values as defaults; what names the
// server in their usage ("the gate's listener").
func (l *HTTPLimits) RegisterFlags(fs *flag.FlagSet, what string) {
	cli.DurationVar(fs, &l.ReadHeaderTimeout, "http-read-header-timeout", l.ReadHeaderTimeout, "time limit of reading a request's headers on "+what)
	cli.DurationVar(fs, &l.ReadTimeout, "http-read-timeout", l.ReadTimeout, "time limit of reading a whole request, its body included, on "+what)
	cli.DurationVar(fs, &l.WriteTimeout, "http-write-timeout", l.WriteTimeout, "time limit of a request from the end of its headers to the end of its answer on "+what)
	cli.DurationVar(fs, &l.IdleTimeout, "http-idle-timeout", l.IdleTimeout, "how long a keep-alive connection to "+what+" may wait for its next request")
	fs.IntVar(&l.MaxHeaderBytes, "http-max-header-bytes", l.MaxHeaderBytes, "largest request headers in bytes on "+what+" (431 above)")
}

// OrDefaults is l with its zero fields filled from DefaultHTTPLimits:
// the limits NewServer serves with.
func (l HTTPLimits) OrDefaults() HTTPLimits {
	d := DefaultHTTPLimits()
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = d.WriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return l
}

// NewServer is an HTTP server of h with limits l (a zero field: its
// default). log, if not nil, gets the server's own errors (refused TLS
// handshakes, a panicking handler) as warnings instead of the process's
// stderr.
func NewServer(h http.Handler, l HTTPLimits, log *slog.Logger) *http.Server {
	l = l.OrDefaults()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	return srv
}
