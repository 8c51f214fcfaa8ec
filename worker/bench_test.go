package worker_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// BenchmarkWorkerNoop: one worker process (8 partitions, 64 jobs at once
// each) runs b.N no-op jobs already in Redis (100 groups); timed from the
// worker's start until Redis counts every job done. Reports the PING round
// trip of the same run: sequential Redis numbers on this VM follow it.
//
//	go test ./worker -run '^$' -bench WorkerNoop -benchtime 100000x
func BenchmarkWorkerNoop(b *testing.B) {
	r := testenv.Redis(b)
	layout := queue.Layout{Stage: "bench", Partitions: 8}
	p, err := queue.NewPool(queue.PoolConfig{Layout: layout, Addr: r.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	p.LoadScripts(ctx)
	items := make([]queue.Item, 0, 1000)
	for i := 0; i < b.N; i++ {
		id, g := "j"+strconv.Itoa(i), "g"+strconv.Itoa(i%100)
		env := (&job.Job{ID: id, Type: "noop", Group: g, Topic: "jobs"}).AppendJSON(nil)
		items = append(items, queue.Item{ID: id, Group: g, Topic: "jobs", Weight: 1, Envelope: env})
		if len(items) == cap(items) || i == b.N-1 {
			if _, err := p.Enqueue(ctx, 1, items, time.Now()); err != nil {
				b.Fatal(err)
			}
			items = items[:0]
		}
	}
	pingStart := time.Now()
	for range 1000 {
		r.Client().Ping(ctx)
	}
	ping := float64(time.Since(pingStart).Microseconds()) / 1000

	cfg := worker.DefaultConfig()
	cfg.Stage, cfg.Partitions, cfg.RedisAddr = layout.Stage, layout.Partitions, r.Addr()
	cfg.Workers, cfg.ClaimBatch = 64, 64
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	w.HandleOther(worker.Noop)
	b.ResetTimer()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	testenv.WaitFor(b, 10*time.Minute, "every job done", func() bool {
		total := 0
		for part := range layout.Partitions {
			n, _ := r.Client().HGet(ctx, layout.Keys(part).Stats(), "done").Int()
			total += n
		}
		return total >= b.N
	})
	b.StopTimer()
	stop()
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(ping, "ping-µs")
}
