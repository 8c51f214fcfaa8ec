// Command e2e compares sluice with asynq v0.26.0 end to end, on one Redis
// in one run (issue 17's targets: sluice at least 2x asynq's rate with
// single-job POSTs, at least 10x with 100-job POSTs):
//
//   - asynq: its client enqueues the jobs from 64 goroutines while its
//     server (concurrency 64) runs no-op handlers; timed from the first
//     enqueue to the last handler's return;
//   - sluice: `sluice dev` started on free loopback ports, the same number
//     of no-op jobs POSTed through its gate, single-job POSTs from 64
//     connections, then 100-job POSTs from 16; timed from the first POST
//     until Redis counts every job done (polled every 5 ms).
//
// asynq runs against sluice dev's own Redis, so that both use the same
// server, configuration and persistence. Run it from the repository's
// root with make (it builds bin/sluice first):
//
//	make bench-asynq-e2e
//	cd loadtest/asynqbench && go run ./e2e --sluice-bin ../../bin/sluice --jobs 100000
//
// It prints the report and writes it as JSON and HTML to --out.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/loadtest/scenario"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg       scenario.CompareConfig
		bin       = fs.String("sluice-bin", "../../bin/sluice", "the sluice binary (make build)")
		maxMemory = fs.String("redis-maxmemory", "4gb", "sluice dev's Redis maxmemory: both systems queue up to --jobs there")
		split     = fs.Bool("split-processes", true, "run sluice dev's parts each in a process of its own, so that each one's CPU is reported (false: one process)")
		out       = fs.String("out", "../../.sluice/loadtest", "directory for the JSON and HTML reports")
		timeout   = fs.Duration("timeout", 15*time.Minute, "the whole run's bound")
		check     = fs.Duration("asynq-task-check-interval", 0, "asynq's TaskCheckInterval, how long an idle worker sleeps (0: asynq's default, 1s)")
		strict    = fs.Bool("strict", false, "exit with status 3 when a verdict fails")
		steady    = fs.Bool("steady", false, "run the steady scenario instead (make bench-steady): open loops of single-job POSTs at 1%, 10%, 25% and 50% of the single-POST maximum, each followed by asynq at the same rate")
		st        scenario.SteadyConfig
	)
	fs.Float64Var(&st.Max, "max", 0, "--steady: the single-POST maximum in jobs/s (0: measured first, in the same run)")
	fs.DurationVar(&st.Duration, "steady-duration", 20*time.Second, "--steady: how long each load runs, per system")
	fs.IntVar(&cfg.Jobs, "jobs", 100000, "jobs per system and phase")
	fs.IntVar(&cfg.Conns, "conns", 64, "asynq's enqueueing goroutines and its server's concurrency; sluice's connections for single-job POSTs")
	fs.IntVar(&cfg.BatchConns, "batch-conns", 16, "sluice's connections for batched POSTs")
	fs.IntVar(&cfg.Batch, "batch", 100, "jobs per batched POST")
	fs.IntVar(&cfg.PayloadBytes, "payload", 100, "payload bytes of every job, both systems")
	fs.IntVar(&cfg.Groups, "groups", 0, "sluice: groups the jobs are spread over (0: none, as asynq's tasks share one queue)")
	fs.DurationVar(&cfg.DoneTimeout, "done-timeout", 5*time.Minute, "each phase's bound")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	progress := scenario.NewProgress(stderr, false)
	path, err := filepath.Abs(*bin)
	if err == nil {
		_, err = os.Stat(path)
	}
	if err != nil {
		fmt.Fprintf(stderr, "e2e: the sluice binary: %v (make build, or --sluice-bin)\n", err)
		return 1
	}
	progress.Printf("starting %s dev on free loopback ports...\n", path)
	dev, err := scenario.StartDev(ctx, scenario.DevConfig{Bin: path, RedisMaxMemory: *maxMemory, SplitProcesses: *split})
	if err != nil {
		fmt.Fprintf(stderr, "e2e: %v\n", err)
		return 1
	}
	defer func() {
		if err := dev.Stop(); err != nil {
			fmt.Fprintf(stderr, "e2e: stopping sluice dev: %v\n", err)
		}
	}()
	r, err := scenario.NewRunner(dev.Endpoints, progress)
	if err != nil {
		fmt.Fprintf(stderr, "e2e: %v\n", err)
		return 1
	}
	defer r.Close()
	if procs, err := dev.Processes(); err == nil {
		r.SetProcesses(procs)
	} else {
		progress.Printf("sluice dev's processes not found (%v): the phases report the sluice processes' CPU together\n", err)
	}
	if *steady {
		st.PayloadBytes = cfg.PayloadBytes
		rep, err := r.Steady(ctx, st, &asynqRival{checkInterval: *check})
		if rep != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("asynq v0.26.0 ran on sluice dev's Redis (%s) right after sluice at each load, its client and server in this process (TaskCheckInterval %s); its CPU per job is this process's and Redis's, sluice's its processes' and Redis's (the generator's and Consul's left out)", dev.Endpoints.Redis, or(*check, time.Second)),
				"sluice's enqueue-to-start and -done are the worker's histograms of every job (enqueued_at by the gate to the start, and to the ack recorded), interpolated in their buckets; asynq's are exact, from each job's due time to its handler's start and return")
			rep.Publish(stdout, stderr, *out, "e2e")
		}
		if err != nil {
			fmt.Fprintf(stderr, "e2e: %v\n", err)
			return 1
		}
		return 0
	}
	rep, err := r.Compare(ctx, &asynqRival{checkInterval: *check}, cfg)
	if rep != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("asynq v0.26.0 ran on sluice dev's Redis (%s): one Redis, one run; its client and server ran in this process (the generator's line of its phase), sluice's parts idle meanwhile", dev.Endpoints.Redis),
			"asynq is timed from its first enqueue to its last handler's return; sluice from its first POST until Redis counted every job done, polled every 5 ms")
		rep.Publish(stdout, stderr, *out, "e2e")
	}
	if err != nil {
		fmt.Fprintf(stderr, "e2e: %v\n", err)
		return 1
	}
	if *strict && !rep.Pass() {
		return 3
	}
	return 0
}

// asynqRival is asynq v0.26.0 as scenario.Compare runs it: its server
// (concurrency conns, no-op handlers) started first, then its client
// enqueueing from conns goroutines, each with a connection of its own.
type asynqRival struct {
	checkInterval time.Duration
	addr          string
	srv           *asynq.Server
	ran, want     atomic.Int64
	mu            sync.Mutex
	all           chan struct{} // closed when want jobs ran
	// The steady loads' latencies, from each job's due time (the first 8
	// bytes of its payload, Unix ns).
	hmu             sync.Mutex
	toStart, toDone *scenario.Hist
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (a *asynqRival) Name() string { return "asynq v0.26.0" }

func (a *asynqRival) Start(ctx context.Context, addr string) error {
	a.addr = addr
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
		if a.ran.Add(1) == a.want.Load() {
			a.mu.Lock()
			close(a.all)
			a.mu.Unlock()
		}
		return nil
	})
	mux.HandleFunc("steady", func(_ context.Context, t *asynq.Task) error {
		p := t.Payload()
		if len(p) < 8 {
			return fmt.Errorf("steady task without its due time")
		}
		due := time.Unix(0, int64(binary.BigEndian.Uint64(p)))
		started := time.Since(due)
		// A no-op: the handler returns at once.
		done := time.Since(due)
		a.hmu.Lock()
		a.toStart.Record(started)
		a.toDone.Record(done)
		a.hmu.Unlock()
		if a.ran.Add(1) == a.want.Load() {
			a.mu.Lock()
			close(a.all)
			a.mu.Unlock()
		}
		return nil
	})
	// The server's pool holds a connection per worker and a few for its
	// heartbeat, recoverer and forwarder: no worker waits for one.
	a.srv = asynq.NewServer(asynq.RedisClientOpt{Addr: addr, PoolSize: 80},
		asynq.Config{Concurrency: 64, LogLevel: asynq.ErrorLevel, TaskCheckInterval: a.checkInterval})
	return a.srv.Start(mux)
}

func (a *asynqRival) Run(ctx context.Context, jobs, conns int, payload []byte) (time.Time, error) {
	a.mu.Lock()
	a.all = make(chan struct{})
	all := a.all
	a.mu.Unlock()
	a.want.Store(int64(jobs))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: a.addr, PoolSize: conns})
	defer client.Close()
	var next atomic.Int64
	lasts := make([]time.Time, conns) // each goroutine's last enqueue's return
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for g := range conns {
		wg.Go(func() {
			for next.Add(1) <= int64(jobs) {
				if _, errs[g] = client.EnqueueContext(ctx, asynq.NewTask("noop", payload)); errs[g] != nil {
					return
				}
				lasts[g] = time.Now()
			}
		})
	}
	wg.Wait()
	var last time.Time
	for g := range conns {
		if errs[g] != nil {
			return time.Time{}, fmt.Errorf("asynq's client: %w", errs[g])
		}
		if lasts[g].After(last) {
			last = lasts[g]
		}
	}
	select {
	case <-all:
	case <-ctx.Done():
		return time.Time{}, fmt.Errorf("asynq ran %d of %d jobs: %w", a.ran.Load(), jobs, ctx.Err())
	}
	return last, nil
}

// OpenLoop enqueues rate tasks a second for d from 64 goroutines, each
// task when it is due (as the loadtest's open loop sends a POST), and
// waits until every one has run.
func (a *asynqRival) OpenLoop(ctx context.Context, rate float64, d time.Duration, payload []byte) (scenario.RivalLoad, error) {
	const conns = 64
	jobs := int(rate * d.Seconds())
	a.hmu.Lock()
	a.toStart, a.toDone = scenario.NewHist(), scenario.NewHist()
	a.hmu.Unlock()
	a.mu.Lock()
	a.all = make(chan struct{})
	all := a.all
	a.mu.Unlock()
	a.ran.Store(0)
	a.want.Store(int64(jobs))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: a.addr, PoolSize: conns})
	defer client.Close()
	due := make(chan time.Time, jobs)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for g := range conns {
		wg.Go(func() {
			buf := make([]byte, 8+len(payload))
			copy(buf[8:], payload)
			for at := range due {
				p := slices.Clone(buf)
				binary.BigEndian.PutUint64(p, uint64(at.UnixNano()))
				if _, err := client.EnqueueContext(ctx, asynq.NewTask("steady", p)); err != nil && errs[g] == nil {
					errs[g] = err
				}
			}
		})
	}
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; i < jobs && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			timer.Reset(w)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		due <- at
	}
	close(due)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return scenario.RivalLoad{}, fmt.Errorf("asynq's client: %w", err)
		}
	}
	wait := time.NewTimer(2 * time.Minute)
	defer wait.Stop()
	select {
	case <-all:
	case <-wait.C:
		return scenario.RivalLoad{}, fmt.Errorf("asynq ran %d of %d jobs within 2 minutes of the last enqueue", a.ran.Load(), jobs)
	case <-ctx.Done():
		return scenario.RivalLoad{}, ctx.Err()
	}
	a.hmu.Lock()
	defer a.hmu.Unlock()
	return scenario.RivalLoad{Jobs: jobs, ToStart: a.toStart, ToDone: a.toDone}, nil
}

func (a *asynqRival) Stop() {
	if a.srv != nil {
		a.srv.Shutdown()
	}
}
