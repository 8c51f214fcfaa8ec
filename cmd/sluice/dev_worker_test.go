package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

func TestDevWorkerFlagFallsBackToSLUICE_DEV_WORKER(t *testing.T) {
	t.Setenv("SLUICE_DEV_WORKER", "false")
	var cfg devConfig
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	cfg.register(fs)
	if err := cli.Parse(fs, "dev", nil); err != nil {
		t.Fatal(err)
	}
	if cfg.Worker {
		t.Fatal("SLUICE_DEV_WORKER=false left the built-in worker on")
	}
	cfg = devConfig{}
	fs = flag.NewFlagSet("dev", flag.ContinueOnError)
	cfg.register(fs)
	if err := cli.Parse(fs, "dev", []string{"--worker=true"}); err != nil || !cfg.Worker {
		t.Fatalf("the flag wins over the variable: %v, worker %v", err, cfg.Worker)
	}
}

// sluice dev --worker=false runs everything but the built-in worker, and
// a worker configured from nothing but the variables its banner prints
// serves the stack's queues.
func TestDevWithoutWorkerLeavesTheJobsToYourOwn(t *testing.T) {
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	cfg.Worker = false
	cfg.CanaryInterval = 0
	d := startDev(t, &cfg)
	banner := d.out.String()
	if !strings.Contains(banner, "--worker=false") || strings.Contains(banner, "every job type runs") {
		t.Fatalf("the banner does not say the worker is left out:\n%s", banner)
	}
	if c, err := net.Dial("tcp", cfg.WorkerAddr); err == nil {
		c.Close()
		t.Fatalf("something listens on the worker's address %s", cfg.WorkerAddr)
	}

	status, body := curlFromBanner(t, banner) // type "hello", {"greeting": "<hi> & welcome"}
	if status != 202 {
		t.Fatalf("printed curl: %d %s", status, body)
	}
	enqueueID(t, "http://"+cfg.GateAddr+"/v1/topics/jobs/jobs", `{"type":"hello","payload":{"greeting":"second"}}`)
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	defer rdb.Close()
	layout := queue.Keyspace{Stage: "dev", Partitions: cfg.RedisPartitions}
	funnel := func(stage string) int {
		n := 0
		for p := range layout.Partitions {
			v, _ := rdb.HGet(context.Background(), layout.Keys(queue.Queue{Topic: cfg.Topic, Part: p}).Stats(), queue.FunnelField(cfg.Topic, stage, false)).Int()
			n += v
		}
		return n
	}
	testenv.WaitFor(t, 30*time.Second, "both jobs to be relayed into Redis", func() bool { return funnel(queue.MilestoneRelayed) == 2 })
	if n := funnel(queue.MilestoneDequeued); n != 0 {
		t.Fatalf("%d jobs claimed without a worker", n)
	}

	// The banner's variables, and nothing else, configure our worker.
	vars := regexp.MustCompile(`SLUICE_WORKER_[A-Z_]+=\S+`).FindAllString(banner, -1)
	if len(vars) < 5 {
		t.Fatalf("the banner lists %d variables: %v\n%s", len(vars), vars, banner)
	}
	for _, kv := range vars {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	wcfg := worker.DefaultConfig()
	wcfg.Stage, wcfg.Partitions, wcfg.Topics = "x", 1, nil // what only the variables may set right
	if _, err := wcfg.ParseFlags(flag.NewFlagSet("myworker", flag.ContinueOnError), nil); err != nil {
		t.Fatal(err)
	}
	if wcfg.Listen != cfg.WorkerAddr {
		t.Fatalf("the worker would listen on %s, not the free worker address %s", wcfg.Listen, cfg.WorkerAddr)
	}
	w, err := worker.New(wcfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var greetings []string
	worker.HandleFunc(w, "hello", func(_ context.Context, j *worker.TypedJob[struct{ Greeting string }]) error {
		mu.Lock()
		greetings = append(greetings, j.Payload.Greeting)
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("our worker: %v", err)
		}
	}()
	testenv.WaitFor(t, 30*time.Second, "our worker to complete both jobs", func() bool { return funnel(queue.MilestoneCompleted) == 2 })
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(greetings)
	if want := []string{"<hi> & welcome", "second"}; !slices.Equal(greetings, want) {
		t.Fatalf("our handler saw %q, want %q", greetings, want)
	}
}
