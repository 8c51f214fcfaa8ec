// Package ops is the operational surface every long-running part shares:
// /healthz, /readyz and /metrics, and an HTTP serve loop that drains in-flight
// requests on shutdown.
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyFunc reports whether a part can do its work now; a non-nil error says
// what is missing and makes /readyz answer 503.
type ReadyFunc func(ctx context.Context) error

// NewRegistry returns a registry with the Go runtime and process collectors.
// Each part has its own, so parts started in one process (sluice dev, tests)
// do not collide.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Notice is a ReadyFunc's answer for a part that is ready but has
// something for the operator to see (a worker serving a topic no relay
// registered): /readyz answers 200 "ready, but: <Msg>".
type Notice struct{ Msg string }

func (n *Notice) Error() string { return n.Msg }

// Mount adds /healthz, /readyz and /metrics to mux. /healthz answers 200 while
// the process serves; /readyz runs ready with a short deadline.
func Mount(mux *http.ServeMux, reg *prometheus.Registry, ready ReadyFunc) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(ctx); err != nil {
			var n *Notice
			if errors.As(err, &n) {
				w.Write([]byte("ready, but: " + n.Msg + "\n"))
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
}

// PprofHandler serves Go's profiler under /debug/pprof/, but for
// /debug/pprof/cmdline: a process's command line may hold secrets given
// inline (tokens), and it answers 404 like any unknown profile. It
// authenticates no one: serve it only on a loopback listener
// (ListenLoopback), never beside a part's API.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// CheckLoopback says why addr is not a loopback host (127.0.0.1, ::1 or
// localhost) and a port, or nil: for listeners that authenticate no one,
// reached from elsewhere only through what reaches the host (ssh -L,
// kubectl port-forward).
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%q: must be a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT): what it serves is not authenticated; reach it from elsewhere with ssh -L or kubectl port-forward", addr)
	}
	return nil
}

// ListenLoopback listens on addr, which CheckLoopback accepts, and makes
// sure the listener is on a loopback address.
func ListenLoopback(addr string) (net.Listener, error) {
	if err := CheckLoopback(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("%q: listens on %s, not a loopback address", addr, ln.Addr())
	}
	return ln, nil
}

// Server is a part that serves on a listener until its context ends.
type Server interface {
	Serve(ctx context.Context, ln net.Listener) error
}

// ListenAndServe listens on addr first, so a taken port is reported before
// anything connects to Kafka, Redis or Consul, then builds the part and
// serves it until ctx ends.
func ListenAndServe[S Server](ctx context.Context, part, addr string, build func() (S, error)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s --listen %s: %w", part, addr, err)
	}
	s, err := build()
	if err != nil {
		ln.Close()
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves srv on ln until ctx ends, then stops accepting and waits up to
// drain for in-flight requests before closing what is left. It returns nil
// after a clean drain.
func Serve(ctx context.Context, log *slog.Logger, srv *http.Server, ln net.Listener, drain time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("draining in-flight requests", "addr", ln.Addr().String(), "deadline", drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("drain deadline passed, closing remaining connections", "addr", ln.Addr().String())
		srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}
