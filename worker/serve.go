package worker

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/ops"
)

// Serve runs the worker (Run) until ctx ends, serving /healthz, /readyz
// (every Redis answers) and /metrics on ln meanwhile. sluice worker listens
// on Config.Listen.
func (w *Worker) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	ops.Mount(mux, w.m.reg, w.ready)
	srv := ops.NewServer(mux, w.cfg.HTTP, w.log)
	opsDone := make(chan error, 1)
	go func() { opsDone <- ops.Serve(ctx, w.log, srv, ln, time.Second) }()
	w.log.Info("worker running", "partitions", fmt.Sprint(w.cfg.Serve), "topics", topicsValue{&w.cfg.Topics}.String(), "strict", w.cfg.Strict, "workers", w.cfg.Workers, "stage", w.cfg.Stage)
	err := w.Run(ctx)
	if oerr := <-opsDone; err == nil {
		err = oerr
	}
	w.log.Info("worker stopped")
	return err
}

func (w *Worker) ready(ctx context.Context) error {
	if err := w.pool.Ping(ctx); err != nil {
		return err
	}
	return nil
}
