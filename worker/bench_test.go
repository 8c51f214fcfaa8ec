package worker_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// BenchmarkWorkerNoop: one worker process (8 partitions, 8 jobs at once
// each) runs b.N no-op jobs already in Redis (100 groups); timed from the
// worker's start until Redis counts every job done. "prefetch=0" claims only
// for free slots (small claims). Reports the
// PING round trip of the same run and Redis's CPU per job: on this VM
// round trips, not commands, decide what Redis spends.
// SLUICE_BENCH_COMMANDSTATS=<file> writes Redis's INFO commandstats there.
//
//	go test ./worker -run '^$' -bench WorkerNoop -benchtime 100000x
func BenchmarkWorkerNoop(b *testing.B) {
	for _, c := range []struct{ prefetch, claim int }{{0, 32}, {64, 32}, {128, 64}} {
		b.Run("prefetch="+strconv.Itoa(c.prefetch)+"/claim="+strconv.Itoa(c.claim), func(b *testing.B) { benchWorkerNoop(b, c.prefetch, c.claim) })
	}
}

func benchWorkerNoop(b *testing.B, prefetch, claim int) {
	r, layout := enqueueNoops(b, nil)
	ctx := context.Background()
	r.Client().ConfigResetStat(ctx)
	pingStart := time.Now()
	for range 1000 {
		r.Client().Ping(ctx)
	}
	ping := float64(time.Since(pingStart).Microseconds()) / 1000

	cfg := worker.DefaultConfig()
	cfg.Prefetch, cfg.ClaimBatch = prefetch, claim
	redisCPU := r.CPUSeconds(b)
	runUntilAllDone(b, r, layout, cfg)
	if os.Getenv("SLUICE_BENCH_COMMANDSTATS") != "" {
		info, _ := r.Client().Info(ctx, "commandstats").Result()
		os.WriteFile(os.Getenv("SLUICE_BENCH_COMMANDSTATS"), []byte(info), 0o644)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(ping, "ping-µs")
	b.ReportMetric((r.CPUSeconds(b)-redisCPU)/float64(b.N)*1e6, "redis-cpu-µs/job")
}

// enqueueNoops puts b.N no-op jobs in 100 groups into a Redis of 8
// partitions, as the relay would; edit, when set, changes each job first.
func enqueueNoops(b *testing.B, edit func(*job.Job)) (*testenv.RedisServer, queue.Keyspace) {
	r := testenv.Redis(b)
	layout := queue.Keyspace{Stage: "bench", Partitions: 8}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	p.LoadScripts(ctx)
	items := make([]queue.Item, 0, 1000)
	for i := 0; i < b.N; i++ {
		id, g := "j"+strconv.Itoa(i), "g"+strconv.Itoa(i%100)
		j := &job.Job{ID: id, Type: "noop", Group: g, Topic: "jobs"}
		if edit != nil {
			edit(j)
		}
		items = append(items, queue.Item{ID: id, Group: g, Topic: "jobs", Weight: 1, Envelope: j.AppendJSON(nil)})
		if len(items) == cap(items) || i == b.N-1 {
			if _, err := p.Enqueue(ctx, 1, items, time.Now()); err != nil {
				b.Fatal(err)
			}
			items = items[:0]
		}
	}
	return r, layout
}

// runUntilAllDone runs a worker of cfg (its Redis, stage and partitions
// set here, 8 jobs at once per partition, every type a no-op) and times it
// from its start until Redis counts b.N jobs done; then stops it.
func runUntilAllDone(b *testing.B, r *testenv.RedisServer, layout queue.Keyspace, cfg worker.Config) {
	cfg.Stage, cfg.Partitions, cfg.RedisAddr = layout.Stage, layout.Partitions, r.Addr()
	cfg.Workers = 8
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	w.HandleOther(worker.Noop)
	ctx := context.Background()
	b.ResetTimer()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	testenv.WaitFor(b, 10*time.Minute, "every job done", func() bool {
		total := 0
		for part := range layout.Partitions {
			n, _ := r.Client().HGet(ctx, layout.Keys(queue.Queue{Topic: "jobs", Part: part}).Stats(), "done").Int()
			total += n
		}
		return total >= b.N
	})
	b.StopTimer()
	stop()
	<-done
}

// BenchmarkEnqueueToStart: a lightly loaded worker (one job in the system
// at a time, default config) and the time from the relay's enqueue call to
// the handler's start, as p50 and p99. The consumer is idle in BLPOP on
// the partition's wake list when each job arrives.
//
//	go test ./worker -run '^$' -bench EnqueueToStart -benchtime 500x
func BenchmarkEnqueueToStart(b *testing.B) {
	r := testenv.Redis(b)
	layout := queue.Keyspace{Stage: "bench", Partitions: 8}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	p.LoadScripts(ctx)
	cfg := worker.DefaultConfig()
	cfg.Stage, cfg.Partitions, cfg.RedisAddr = layout.Stage, layout.Partitions, r.Addr()
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	started := make(chan time.Time, 1)
	w.HandleOther(worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
		started <- time.Now()
		return nil, nil
	}))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	took := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		id, g := "j"+strconv.Itoa(i), "g"+strconv.Itoa(i)
		env := (&job.Job{ID: id, Type: "noop", Group: g, Topic: "jobs"}).AppendJSON(nil)
		sent := time.Now()
		if _, err := p.Enqueue(ctx, 1, []queue.Item{{ID: id, Group: g, Topic: "jobs", Weight: 1, Envelope: env}}, sent); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-started:
			took = append(took, at.Sub(sent))
		case <-time.After(10 * time.Second):
			b.Fatalf("job %d never started", i)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkSmallGroupDuringHugeGroup: issue 5's scheduling check. A
// 1,000,000-job group runs on one partition; once it is under way, a
// 50-job group arrives. Reports how long the small group took from its
// enqueue to its last job done, and how many of the huge group's jobs
// ran meanwhile (it keeps moving: nothing starves).
//
//	go test ./worker -run '^$' -bench SmallGroupDuringHugeGroup -benchtime 1x -timeout 30m
func BenchmarkSmallGroupDuringHugeGroup(b *testing.B) {
	const huge, small = 1_000_000, 50
	r := testenv.Redis(b)
	layout := queue.Keyspace{Stage: "bench", Partitions: 8}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	p.LoadScripts(ctx)
	enqueue := func(group string, n int) {
		items := make([]queue.Item, 0, 1000)
		for i := range n {
			id := job.BulkID(group, int64(i))
			env := (&job.Job{ID: id, Type: "noop", Group: group, Topic: "jobs"}).AppendJSON(nil)
			items = append(items, queue.Item{ID: id, Group: group, Topic: "jobs", Weight: 1, Envelope: env})
			if len(items) == cap(items) || i == n-1 {
				if _, err := p.Enqueue(ctx, 1, items, time.Now()); err != nil {
					b.Fatal(err)
				}
				items = items[:0]
			}
		}
		if _, err := p.Enqueue(ctx, 1, []queue.Item{{Close: true, Group: group, Topic: "jobs", GroupTotal: int64(n)}}, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	// The small group must share the huge one's partition.
	smallGroup := ""
	for i := 0; smallGroup == ""; i++ {
		if g := "small" + strconv.Itoa(i); layout.PartitionOf(g) == layout.PartitionOf("huge") {
			smallGroup = g
		}
	}
	enqueue("huge", huge)
	cfg := worker.DefaultConfig()
	cfg.Stage, cfg.Partitions, cfg.RedisAddr = layout.Stage, layout.Partitions, r.Addr()
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	w.HandleOther(worker.Noop)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	part := layout.PartitionOf("huge")
	groupDone := func(g string) int {
		n, _ := r.Client().HGet(ctx, layout.Keys(queue.Queue{Topic: "jobs", Part: part}).Group(g), "done").Int()
		return n
	}
	testenv.WaitFor(b, 10*time.Minute, "the huge group under way", func() bool { return groupDone("huge") >= 10000 })
	b.ResetTimer()
	hugeBefore := groupDone("huge")
	start := time.Now()
	enqueue(smallGroup, small)
	testenv.WaitFor(b, time.Minute, "the small group done", func() bool {
		st, _ := p.GroupStatus(ctx, "jobs", smallGroup)
		return !st.CompletedAt.IsZero()
	})
	took := time.Since(start)
	hugeDuring := groupDone("huge") - hugeBefore
	b.StopTimer()
	b.ReportMetric(took.Seconds()*1000, "small-group-ms")
	b.ReportMetric(float64(hugeDuring), "huge-jobs-meanwhile")
	b.ReportMetric(float64(huge-groupDone("huge")), "huge-jobs-left")
}
