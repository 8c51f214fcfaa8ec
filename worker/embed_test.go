package worker_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

func TestParseFlagsReadsSluiceWorkersFlagsAndVariables(t *testing.T) {
	t.Setenv("SLUICE_WORKER_REDIS_ADDR", "10.0.0.1:7000") // the part's own variable
	t.Setenv("SLUICE_REDIS_PARTITIONS", "4")              // the shared one
	t.Setenv("SLUICE_WORKER_TOPICS", "critical=6,low")
	t.Setenv("SLUICE_WORKER_WORKERS", "3") // the command line wins
	t.Setenv("SLUICE_WORKER_GREETING", "hello")
	fs := flag.NewFlagSet("myworker", flag.ContinueOnError)
	greeting := fs.String("greeting", "", "a flag of the program's own")
	cfg := worker.DefaultConfig()
	cfg.Drain = 5 * time.Second // the program's default, kept
	log, err := cfg.ParseFlags(fs, []string{"--workers", "7", "--log-level", "debug", "--timeout", "90s"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RedisAddr != "10.0.0.1:7000" || cfg.Partitions != 4 || cfg.Workers != 7 || cfg.Timeout != 90*time.Second || cfg.Drain != 5*time.Second {
		t.Fatalf("config: RedisAddr %s Partitions %d Workers %d Timeout %s Drain %s", cfg.RedisAddr, cfg.Partitions, cfg.Workers, cfg.Timeout, cfg.Drain)
	}
	if want := (worker.TopicWeights{{Topic: "critical", Weight: 6}, {Topic: "low", Weight: 1}}); !reflect.DeepEqual(cfg.Topics, want) {
		t.Fatalf("topics %v, want %v", cfg.Topics, want)
	}
	if *greeting != "hello" {
		t.Fatalf("the program's own flag: %q", *greeting)
	}
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("--log-level debug: the logger does not log debug")
	}

	// Every flag of sluice worker's Config, with its variable, in the help
	// that names the program.
	var help bytes.Buffer
	fs = flag.NewFlagSet("myworker", flag.ContinueOnError)
	fs.SetOutput(&help)
	cfg = worker.DefaultConfig()
	if _, err := cfg.ParseFlags(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	registered := flag.NewFlagSet("", flag.ContinueOnError)
	cfg.RegisterFlags(registered)
	registered.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(help.String(), "--"+f.Name+" ") || !strings.Contains(help.String(), "SLUICE_WORKER_"+strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))) {
			t.Errorf("help lacks --%s with its variable", f.Name)
		}
	})
	if !strings.HasPrefix(help.String(), "Usage: myworker [flags]") {
		t.Fatalf("help names another program:\n%s", help.String())
	}

	t.Setenv("SLUICE_WORKER_WORKERS", "many")
	cfg = worker.DefaultConfig()
	if _, err := cfg.ParseFlags(flag.NewFlagSet("myworker", flag.ContinueOnError), nil); err == nil || !strings.Contains(err.Error(), "SLUICE_WORKER_WORKERS") {
		t.Fatalf("a bad variable: %v, want an error naming it", err)
	}
}

// signalSeen is a log handler that closes seen when the worker logs the
// signal it got.
type signalSeen struct {
	once sync.Once
	seen chan struct{}
}

func (s *signalSeen) Enabled(context.Context, slog.Level) bool { return true }
func (s *signalSeen) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "signal received") {
		s.once.Do(func() { close(s.seen) })
	}
	return nil
}
func (s *signalSeen) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *signalSeen) WithGroup(string) slog.Handler      { return s }

// ListenAndServe serves the ops endpoints on Config.Listen, and on SIGTERM
// stops claiming and lets the running job finish: it is acked, not cut.
func TestListenAndServeDrainsOnSIGTERM(t *testing.T) {
	b := newBed(t)
	port, err := stack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config(func(c *worker.Config) {
		c.Listen = "127.0.0.1:" + strconv.Itoa(port)
		c.Drain = 30 * time.Second
	})
	logs := &signalSeen{seen: make(chan struct{})}
	w, err := worker.New(cfg, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	var ctxErrAtEnd error
	worker.HandleFunc(w, "hold", func(ctx context.Context, _ *worker.TypedJob[struct{}]) error {
		close(started)
		<-release
		ctxErrAtEnd = ctx.Err()
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- w.ListenAndServe(context.Background()) }()
	// Ready: the listener is up, so the signal handler is in place.
	testenv.WaitFor(t, 10*time.Second, "/readyz to answer 200", func() bool {
		resp, err := http.Get("http://" + cfg.Listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	b.enqueue(t, job.Job{ID: "held1", Type: "hold"})
	<-started
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-logs.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not log the signal")
	}
	select {
	case err := <-done:
		t.Fatalf("ListenAndServe returned %v with a job still running", err)
	default:
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ListenAndServe: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ListenAndServe did not return after the drain")
	}
	if ctxErrAtEnd != nil {
		t.Fatalf("the running job's context ended during the drain: %v", ctxErrAtEnd)
	}
	if h := b.jobHash(t, "held1", ""); h["state"] != "done" || h["attempts"] != "1" {
		t.Fatalf("the drained job: %v", h)
	}
	if _, err := http.Get("http://" + cfg.Listen + "/healthz"); err == nil {
		t.Fatal("the listener still answers after ListenAndServe returned")
	}
}

func TestListenAndServeNamesATakenAddress(t *testing.T) {
	b := newBed(t)
	taken := b.redis.Addr()
	w, err := worker.New(b.config(func(c *worker.Config) { c.Listen = taken }), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ListenAndServe(context.Background()); err == nil || !strings.Contains(err.Error(), "Config.Listen") || !strings.Contains(err.Error(), taken) {
		t.Fatalf("a taken address: %v", err)
	}
}
