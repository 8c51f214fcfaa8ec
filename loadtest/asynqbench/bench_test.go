// Package asynqbench measures sluice's worker against asynq v0.26.0 side by
// side: one Redis, the same number of no-op jobs, the same total
// concurrency, one run. It is a module of its own so that asynq never
// becomes a dependency of sluice. Run:
//
//	make bench-asynq
//	cd loadtest/asynqbench && go test -run '^$' -bench NoopSluiceVsAsynq -benchtime 1x
//
// The end-to-end comparison (asynq's client and server against POSTs
// through sluice's gate) is the program in ./e2e (make bench-asynq-e2e).
package asynqbench

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

const (
	jobs        = 50000
	concurrency = 64 // in total, for both
)

func BenchmarkNoopSluiceVsAsynq(b *testing.B) {
	r := testenv.Redis(b)
	ctx := context.Background()
	pingStart := time.Now()
	for range 1000 {
		r.Client().Ping(ctx)
	}
	ping := float64(time.Since(pingStart).Microseconds()) / 1000

	asynqRate, asynqCPU := runAsynq(b, r)
	r.Client().FlushAll(ctx)
	// Jobs without a group, on their partitions' shared lanes, as asynq's
	// tasks share one queue; then the same jobs in 100 groups.
	sluiceRate, sluiceCPU := runSluice(b, r, 0)
	r.Client().FlushAll(ctx)
	groupsRate, groupsCPU := runSluice(b, r, 100)

	b.ReportMetric(sluiceRate, "sluice-jobs/s")
	b.ReportMetric(groupsRate, "sluice-100-groups-jobs/s")
	b.ReportMetric(asynqRate, "asynq-jobs/s")
	b.ReportMetric(sluiceRate/asynqRate, "x-asynq")
	b.ReportMetric(groupsRate/asynqRate, "x-asynq-100-groups")
	b.ReportMetric(ping, "ping-µs")
	b.ReportMetric(asynqCPU.redis, "asynq-redis-cpu-µs/job")
	b.ReportMetric(sluiceCPU.redis, "sluice-redis-cpu-µs/job")
	b.ReportMetric(groupsCPU.redis, "sluice-100-groups-redis-cpu-µs/job")
	b.ReportMetric(asynqCPU.own, "asynq-go-cpu-µs/job")
	b.ReportMetric(sluiceCPU.own, "sluice-go-cpu-µs/job")
	b.ReportMetric(groupsCPU.own, "sluice-100-groups-go-cpu-µs/job")
}

// cpuPerJob is what one job of a timed run cost in CPU: Redis's and this
// process's. On 2 shared cores, the rates follow these.
type cpuPerJob struct{ redis, own float64 }

// startCPU starts measuring; the function it returns ends it.
func startCPU(b *testing.B, r *testenv.RedisServer) func() cpuPerJob {
	redis0, own0 := r.CPUSeconds(b), processCPU()
	return func() cpuPerJob {
		return cpuPerJob{redis: (r.CPUSeconds(b) - redis0) / jobs * 1e6, own: (processCPU() - own0) / jobs * 1e6}
	}
}

// processCPU is the CPU time this process has used, user plus system.
// Enqueueing counts too: both systems enqueue before their timed run.
func processCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// runAsynq enqueues the jobs with asynq's client, then times its server
// until every one ran.
func runAsynq(b *testing.B, r *testenv.RedisServer) (float64, cpuPerJob) {
	opt := asynq.RedisClientOpt{Addr: r.Addr()}
	client := asynq.NewClient(opt)
	defer client.Close()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < jobs; i += 16 {
				if _, err := client.Enqueue(asynq.NewTask("noop", nil), asynq.MaxRetry(5)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var ran atomic.Int64
	done := make(chan struct{})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
		if ran.Add(1) == jobs {
			close(done)
		}
		return nil
	})
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: concurrency, LogLevel: asynq.ErrorLevel})
	cpu := startCPU(b, r)
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("asynq ran %d of %d", ran.Load(), jobs)
	}
	elapsed, used := time.Since(start), cpu()
	srv.Shutdown()
	return jobs / elapsed.Seconds(), used
}

// runSluice enqueues the jobs as the relay would (with their Kafka
// positions, the gate's ids, spread over groups groups or, with 0, without
// a group), then times one worker (8 partitions x 8 = 64 at once) until
// every one is done. Plain jobs: no retain, so nothing is kept once done.
func runSluice(b *testing.B, r *testenv.RedisServer, groups int) (float64, cpuPerJob) {
	ctx := context.Background()
	layout := queue.Keyspace{Stage: "bench", Partitions: 8}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	p.LoadScripts(ctx)
	items := make([]queue.Item, 0, 1000)
	now := time.Now()
	for i := range jobs {
		id, g := job.NewID(), ""
		if groups > 0 {
			g = "g" + strconv.Itoa(i%groups)
		}
		env := (&job.Job{ID: id, Type: "noop", Group: g, Topic: "jobs", EnqueuedAt: now}).AppendJSON(nil)
		items = append(items, queue.Item{ID: id, Group: g, Topic: "jobs", Weight: 1, Envelope: env,
			KafkaPartition: int32(i % 8), Offset: int64(i / 8), HasPosition: true})
		if len(items) == cap(items) || i == jobs-1 {
			res, err := p.Enqueue(ctx, 1, items, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			for _, x := range res {
				if x.Outcome != queue.Queued {
					b.Fatalf("enqueue: %v %v", x.Outcome, x.Err)
				}
			}
			items = items[:0]
		}
	}
	cfg := worker.DefaultConfig()
	cfg.Stage, cfg.Partitions, cfg.RedisAddr = layout.Stage, layout.Partitions, r.Addr()
	cfg.Workers, cfg.ClaimBatch = concurrency/layout.Partitions, 64
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	var ran atomic.Int64
	w.HandleOther(worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
		ran.Add(1)
		return nil, nil
	}))
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan error, 1)
	cpu := startCPU(b, r)
	start := time.Now()
	go func() { finished <- w.Run(runCtx) }()
	testenv.WaitFor(b, 10*time.Minute, "every sluice job done", func() bool {
		total := 0
		for part := range layout.Partitions {
			n, _ := r.Client().HGet(ctx, layout.Keys(queue.Queue{Topic: "jobs", Part: part}).Stats(), "done").Int()
			total += n
		}
		return total >= jobs
	})
	elapsed, used := time.Since(start), cpu()
	stop()
	<-finished
	return jobs / elapsed.Seconds(), used
}
