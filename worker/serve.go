package worker

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
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

// ready: every Redis answers. A served topic that no relay registered
// does not make the worker not ready (a new topic's relay may start after
// its workers, and the worker consumes it once it does), but /readyz says
// so (docs/worker.md#readiness).
func (w *Worker) ready(ctx context.Context) error {
	if err := w.pool.Ping(ctx); err != nil {
		return err
	}
	missing, registered, err := w.unregistered(ctx)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return &ops.Notice{Msg: fmt.Sprintf("no relay of stage %q registered the served topics %s, so no job of them reaches this worker (the stage's topics: %s): check --topics (SLUICE_WORKER_TOPICS) for a typo, or start their relay", w.cfg.Stage, strings.Join(missing, ", "), topicList(registered))}
	}
	return nil
}

// unregistered are the served topics that no relay of the stage
// registered (queue.Pool.RegisterTopics): a typo in --topics, or a topic
// whose relay has not started. The worker sees Redis only: whether the
// Kafka topic exists is the relay's to say.
func (w *Worker) unregistered(ctx context.Context) (missing, registered []string, err error) {
	registered, err = w.pool.Topics(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range w.cfg.Topics {
		if !slices.Contains(registered, t.Topic) {
			missing = append(missing, t.Topic)
		}
	}
	return missing, registered, nil
}

// warnUnregistered logs, once at start, each served topic no relay
// registered, with the fix.
func (w *Worker) warnUnregistered(ctx context.Context) {
	missing, registered, err := w.unregistered(ctx)
	if err != nil {
		w.log.Warn("reading the stage's registered topics failed; cannot check the served topics", "err", err)
		return
	}
	for _, t := range missing {
		w.log.Warn("no relay of this stage registered a served topic: no job of it reaches this worker until one does",
			"topic", t, "stage", w.cfg.Stage, "registered", topicList(registered),
			"fix", "check --topics (SLUICE_WORKER_TOPICS) for a typo; a new topic needs its Kafka topic and a relay serving it (sluice relay --topics)")
	}
}

func topicList(topics []string) string {
	if len(topics) == 0 {
		return "none yet"
	}
	return strings.Join(topics, ", ")
}
