package scenario

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// The real worker under the real coordinator: a backlog in partition 1 of
// 4 scales partition 1 only, the others stay at the base; a restarted
// worker resumes partition 1's count from its checkpoint, and the
// coordinator has nothing to say about it.
func TestWorkerAndCoordinatorScaleOnlyTheLoadedPartition(t *testing.T) {
	r, c := testenv.Redis(t), testenv.Consul(t)
	layout := queue.Keyspace{Stage: "scaling-test", Partitions: 4}
	ctx := context.Background()

	ccfg := coordinator.DefaultConfig()
	ccfg.Stage, ccfg.Partitions, ccfg.RedisAddr, ccfg.ConsulAddr = layout.Stage, layout.Partitions, r.Addr(), c.Addr()
	ccfg.LockDelay, ccfg.LockRetryWait = 0, 50*time.Millisecond
	ccfg.ScaleEvery, ccfg.ConsumerTTL = 100*time.Millisecond, time.Second
	ccfg.Scaling = coordinator.Params{Threshold: 5, Cycles: 2, Base: 2, MaxFactor: 4, HalfLife: time.Hour}
	co, err := coordinator.New(ccfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cctx, stopCo := context.WithCancel(ctx)
	coDone := make(chan error, 1)
	go func() { defer co.Close(); coDone <- co.Run(cctx) }()
	t.Cleanup(func() { stopCo(); <-coDone })
	testenv.WaitFor(t, 15*time.Second, "the coordinator to lead", co.Holds)

	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	startWorker := func() (*worker.Worker, func()) {
		wcfg := worker.DefaultConfig()
		wcfg.Stage, wcfg.Partitions, wcfg.RedisAddr, wcfg.Workers = layout.Stage, layout.Partitions, r.Addr(), 2
		wcfg.Maintain, wcfg.Drain = 20*time.Millisecond, 100*time.Millisecond
		wcfg.Liveness = 20 * time.Millisecond // heartbeats well inside the coordinator's 1 s ConsumerTTL
		w, err := worker.New(wcfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("hold", worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}))
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		var stopOnce sync.Once
		stopFn := func() { stopOnce.Do(func() { stop(); <-done }) }
		t.Cleanup(stopFn)
		return w, stopFn
	}
	w, stopW := startWorker()

	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// As a relay does: the coordinator reads the ready depth of the
	// registered topics.
	if err := pool.RegisterTopics(ctx, []string{"jobs"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	items := make([]queue.Item, 200)
	for i := range items {
		g := ScalingGroup(layout, 1, i%4)
		id := "hold-" + strconv.Itoa(i)
		items[i] = queue.Item{ID: id, Group: g, Topic: "jobs", Weight: 1, Envelope: (&job.Job{ID: id, Type: "hold", Group: g}).AppendJSON(nil)}
	}
	if _, err := pool.Enqueue(ctx, 1, items, time.Now()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "partition 1 at the max of 8", func() bool { return w.Workers(1) == 8 })
	decisions := func() float64 {
		return testenv.Metric(t, co.Registry(), "sluice_coordinator_scaling_decisions_total")
	}
	cycles := func() float64 { return testenv.Metric(t, co.Registry(), "sluice_coordinator_scaling_cycles_total") }
	from := cycles()
	testenv.WaitFor(t, 10*time.Second, "5 more cycles", func() bool { return cycles() >= from+5 })
	for _, p := range []int{0, 2, 3} {
		if n := w.Workers(p); n != 2 {
			t.Errorf("partition %d runs %d workers, want the base 2", p, n)
		}
	}
	if n := decisions(); n != 2 {
		t.Fatalf("%v decisions, want 2 (2 -> 4 -> 8 on partition 1)", n)
	}

	// A restart: the held jobs go back to ready, the new worker resumes 8.
	stopW()
	w, _ = startWorker()
	testenv.WaitFor(t, 10*time.Second, "the restarted worker at 8 on partition 1", func() bool { return w.Workers(1) == 8 })
	from = cycles()
	testenv.WaitFor(t, 10*time.Second, "5 more cycles", func() bool { return cycles() >= from+5 })
	if n := decisions(); n != 2 || w.Workers(0) != 2 {
		t.Fatalf("after the worker's restart: %v decisions, partition 0 at %d", n, w.Workers(0))
	}
	once.Do(func() { close(release) })
}

// The picture is well-formed SVG with a line per partition and panel.
func TestWriteTraceSVG(t *testing.T) {
	cfg := ScaledScaling
	rep := ScalingReport{Config: cfg, Jobs: cfg.Jobs, Elapsed: 25 * time.Second}
	for i := range 100 {
		s := ScalingSample{At: time.Duration(i) * 250 * time.Millisecond, Workers: make([]int, 4), Ready: make([]int64, 4)}
		for p := range 4 {
			s.Workers[p] = min(16, 2<<(i/12))
			s.Ready[p] = int64(max(0, 2500-25*i))
		}
		rep.Trace = append(rep.Trace, s)
	}
	var buf bytes.Buffer
	if err := WriteTraceSVG(&buf, rep, "a <test> & trace"); err != nil {
		t.Fatal(err)
	}
	paths := 0
	dec := xml.NewDecoder(&buf)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "path" {
			paths++
		}
	}
	if paths != 8 {
		t.Fatalf("%d paths, want 8 (4 partitions x 2 panels)", paths)
	}
	if WriteTraceSVG(io.Discard, ScalingReport{}, "") == nil {
		t.Fatal("an empty trace was drawn")
	}
}
