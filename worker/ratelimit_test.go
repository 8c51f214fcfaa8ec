package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/limits"
	"github.com/sluicehq/sluice/internal/testenv"
	loadtest "github.com/sluicehq/sluice/loadtest/scenario"
	"github.com/sluicehq/sluice/worker"
)

// The values the worker reads from Consul (its parser lives in
// internal/limits, shared with the admin API).
func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want limits.Limit
		def  string
	}{
		{"10", limits.Limit{PerSecond: 10}, "10/s burst 1"},
		{" 2.5\n", limits.Limit{PerSecond: 2.5}, "2.5/s burst 1"},
		{`{"rate": 100, "burst": 5}`, limits.Limit{PerSecond: 100, Burst: 5}, "100/s burst 5"},
		{`{"rate": 10}`, limits.Limit{PerSecond: 10}, "10/s burst 1"},
	} {
		got, err := limits.ParseLimit([]byte(tc.in))
		if err != nil || got != tc.want || got.String() != tc.def {
			t.Errorf("ParseLimit(%q) = %+v (%s), %v; want %+v (%s)", tc.in, got, got, err, tc.want, tc.def)
		}
	}
	for _, bad := range []string{"", "0", "-1", "fast", "NaN", "Inf", "paused", `{"rate": 0}`, `{"rate": 10, "burst": -1}`, `{"rate": 10, "burts": 2}`, "2000000"} {
		if l, err := limits.ParseLimit([]byte(bad)); err == nil {
			t.Errorf("ParseLimit(%q) = %+v, want an error", bad, l)
		}
	}
}

// The seed scenario scaled down: 3 groups × 150 jobs already in Redis,
// each group's resource limited to 50/s in Consul. Every job runs exactly
// once, none is throttled more than once, and no one-second window of
// handler starts holds more than 50 of a resource.
func TestRateLimitedGroupsStayWithinEveryWindow(t *testing.T) {
	r := testenv.Redis(t)
	c := testenv.Consul(t)
	cfg := loadtest.SeedConfig{
		RedisAddr: r.Addr(), ConsulAddr: c.Addr(), Stage: "test", Partitions: 4,
		Groups: 3, JobsPerGroup: 150, Rate: 50, Burst: 1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := loadtest.RunSeed(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if rep.Ran != rep.Jobs || rep.RanTwice != 0 || rep.Done != rep.Jobs {
		t.Errorf("ran %d jobs, %d more than once, %d done; want all %d once", rep.Ran, rep.RanTwice, rep.Done, rep.Jobs)
	}
	if rep.MaxThrottles > 1 {
		t.Errorf("a job was throttled %d times, want at most once", rep.MaxThrottles)
	}
	for res, peak := range rep.PeakWindow {
		if peak > 50 {
			t.Errorf("%s: %d starts in a one-second window, over its limit of 50: %s", res, peak, loadtest.FirstCrowdedWindow(rep.Starts[res], 50))
		}
	}
}

// starts records the handler starts of a test's jobs.
type starts struct {
	mu    sync.Mutex
	at    []time.Time
	runs  map[string]int
	throt map[string]int
	ran   chan struct{} // a token per start
}

func newStarts() *starts {
	return &starts{runs: map[string]int{}, throt: map[string]int{}, ran: make(chan struct{}, 10000)}
}

func (s *starts) handler() worker.Handler {
	return worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
		now := time.Now()
		s.mu.Lock()
		s.at = append(s.at, now)
		s.runs[j.ID]++
		s.throt[j.ID] = j.Throttles
		s.mu.Unlock()
		s.ran <- struct{}{}
		return nil, nil
	})
}

func (s *starts) wait(t *testing.T, n int, what string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for range n {
		select {
		case <-s.ran:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// since returns the start times at or after from, as offsets from it, sorted.
func (s *starts) since(from time.Time) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for _, at := range s.at {
		if !at.Before(from) {
			out = append(out, at.Sub(from))
		}
	}
	slices.Sort(out)
	return out
}

func putLimit(t *testing.T, c *api.Client, resource, value string) {
	t.Helper()
	if _, err := c.KV().Put(&api.KVPair{Key: "sluice/test/limits/" + resource, Value: []byte(value)}, nil); err != nil {
		t.Fatal(err)
	}
}

func limitJobs(prefix, resource string, n int) []job.Job {
	jobs := make([]job.Job, n)
	for i := range jobs {
		jobs[i] = job.Job{ID: fmt.Sprintf("%s-%03d", prefix, i), Type: "call", Group: prefix + "-g" + fmt.Sprint(i%3), Resource: resource}
	}
	return jobs
}

// A limit changed in Consul is followed at once: the slots reserved under
// the old one are void, and the jobs waiting for them run under the new one
// (with one more throttle). A limit removed lets the resource's jobs run
// unthrottled.
func TestRateLimitFollowsConsul(t *testing.T) {
	b := newBed(t)
	srv := testenv.Consul(t)
	putLimit(t, srv.Client(), "api", `{"rate": 20}`)
	s := newStarts()
	var w *worker.Worker
	b.start(t, func(c *worker.Config) { c.ConsulAddr = srv.Addr() }, func(x *worker.Worker) {
		w = x
		w.Handle("call", s.handler())
	})
	limit := func() float64 {
		return testenv.Metric(t, w.Registry(), "sluice_worker_rate_limit_per_second", "resource", "api")
	}
	testenv.WaitFor(t, 10*time.Second, "the worker to read the limit", func() bool { return limit() == 20 })

	b.enqueue(t, limitJobs("a", "api", 24)...)
	s.wait(t, 6, "the first starts at 20/s")
	putLimit(t, srv.Client(), "api", "5")
	testenv.WaitFor(t, 5*time.Second, "the worker to follow the new limit", func() bool { return limit() == 5 })
	changed := time.Now()
	s.wait(t, 18, "the rest at 5/s")
	// Slots within the hold horizon when the limit changed were already
	// handed out; every start after those keeps to the new limit.
	after := s.since(changed.Add(100 * time.Millisecond))
	if peak := loadtest.PeakWindow(after, time.Second); peak > 5 {
		t.Errorf("%d starts in a one-second window after the limit went down to 5: %s", peak, loadtest.FirstCrowdedWindow(after, 5))
	}
	s.mu.Lock()
	twice := 0
	for id, n := range s.runs {
		if n != 1 || s.throt[id] > 2 {
			t.Errorf("job %s ran %d times, throttled %d times; want once, at most twice (once more for the change)", id, n, s.throt[id])
		}
		if s.throt[id] == 2 {
			twice++
		}
	}
	s.mu.Unlock()
	if twice == 0 {
		t.Error("no job waiting for a slot under the old limit reserved again under the new one")
	}

	if _, err := srv.Client().KV().Delete("sluice/test/limits/api", nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the worker to drop the limit", func() bool { return limit() == 0 })
	b.enqueue(t, limitJobs("b", "api", 20)...)
	s.wait(t, 20, "the jobs of a resource no longer limited")
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range 20 {
		if id := fmt.Sprintf("b-%03d", i); s.runs[id] != 1 || s.throt[id] != 0 {
			t.Errorf("unlimited job %s ran %d times, throttled %d times; want once, never", id, s.runs[id], s.throt[id])
		}
	}
}

// A worker told of no Consul runs every job unlimited, and says so.
func TestNoConsulMeansUnlimited(t *testing.T) {
	b := newBed(t)
	logs := &messages{}
	cfg := b.config(nil)
	w, err := worker.New(cfg, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	s := newStarts()
	w.Handle("call", s.handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	b.enqueue(t, limitJobs("a", "api", 10)...)
	s.wait(t, 10, "the jobs")
	if !logs.has("execution rate limits are off") {
		t.Error("the worker did not log that rate limits are off")
	}
}

// messages is a slog handler keeping the messages logged.
type messages struct {
	mu   sync.Mutex
	msgs []string
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m *messages) WithGroup(string) slog.Handler            { return m }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, r.Message)
	return nil
}

func (m *messages) has(sub string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.ContainsFunc(m.msgs, func(s string) bool { return strings.Contains(s, sub) })
}
