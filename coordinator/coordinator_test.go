package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

var lease = time.Minute

// bed is the real Redis and Consul a coordinator runs against, and a pool
// for the test to play relay and worker with.
type bed struct {
	t      *testing.T
	redis  *testenv.RedisServer
	consul *testenv.ConsulServer
	pool   *queue.Pool
	layout queue.Keyspace
}

func newBed(t *testing.T, partitions int) *bed {
	t.Helper()
	b := &bed{t: t, redis: testenv.Redis(t), consul: testenv.Consul(t), layout: queue.Keyspace{Stage: "test", Partitions: partitions}}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: b.layout, Addr: b.redis.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The test plays a relay of topic jobs, which registers its topic
	// when it starts: the coordinator reads the queues of the registered
	// topics.
	if err := p.RegisterTopics(context.Background(), []string{"jobs"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	b.pool = p
	return b
}

// register registers topics, as a relay of them does when it starts.
func (b *bed) register(t *testing.T, topics ...string) {
	t.Helper()
	if err := b.pool.RegisterTopics(context.Background(), topics, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// outcome says how the test's "worker" ends item i: a result, or dead with
// an error; retry, if set, fails its first attempt with that error first
// (retried at once).
type outcome struct {
	result []byte
	dead   string
	retry  string
}

// completeGroup submits a bulk group of len(items) jobs of topic jobs with
// a callback URL (may be empty), then claims and ends every job as items
// says: the last end queues the group on its queue partition's completed
// list.
func (b *bed) completeGroup(t *testing.T, group, url string, items []outcome) {
	t.Helper()
	b.completeGroupOf(t, "jobs", group, url, items)
}

// completeGroupOf is completeGroup for a group of topic.
func (b *bed) completeGroupOf(t *testing.T, topic, group, url string, items []outcome) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	var batch []queue.Item
	for i := range items {
		id := job.BulkID(group, int64(i))
		batch = append(batch, queue.Item{ID: id, Group: group, Topic: topic, Weight: 1, GroupTotal: int64(len(items)),
			Envelope: []byte(`{"id":"` + id + `","type":"t","payload":{}}`)})
	}
	batch = append(batch, queue.Item{Close: true, Group: group, Topic: topic, GroupTotal: int64(len(items)), CallbackURL: url})
	if _, err := b.pool.Enqueue(ctx, 1, batch, now); err != nil {
		t.Fatal(err)
	}
	q := b.layout.QueueOf(topic, group, "")
	index := map[string]int{}
	for i := range items {
		index[job.BulkID(group, int64(i))] = i
	}
	var done []queue.Done
	for ended := 0; ended < len(items); {
		jobs, err := b.pool.Claim(ctx, q, 100, lease)
		if err != nil || len(jobs) == 0 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		retried := 0
		for _, j := range jobs {
			i, ok := index[j.ID]
			if !ok {
				t.Fatalf("claimed %s, not of group %s", j.ID, group)
			}
			if items[i].retry != "" && j.Attempt == 1 {
				f := queue.Failure{Job: j, Cause: items[i].retry, NextTry: now}
				if r, err := b.pool.Fail(ctx, q, f, now, queue.DeadLimits{Max: 1000, Keep: time.Hour}); r != queue.FailRetrying || err != nil {
					t.Fatalf("fail %s for a retry: %d %v", j.ID, r, err)
				}
				retried++
				continue
			}
			ended++
			if items[i].dead != "" {
				f := queue.Failure{Job: j, Cause: items[i].dead}
				if r, err := b.pool.Fail(ctx, q, f, now, queue.DeadLimits{Max: 1000, Keep: time.Hour}); r != queue.FailDead || err != nil {
					t.Fatalf("fail %s: %d %v", j.ID, r, err)
				}
				continue
			}
			done = append(done, queue.Done{Job: j, Result: items[i].result})
		}
		if retried > 0 {
			// The retries are due at once by Redis's clock, which has
			// moved past now: promote by the clock as it reads now.
			if n, err := b.pool.Promote(ctx, q, 100, time.Now()); n != retried || err != nil {
				t.Fatalf("promote: %d of %d retries, %v", n, retried, err)
			}
		}
	}
	if ok, err := b.pool.AckMany(ctx, q, done, now, time.Hour); err != nil || len(ok) != len(done) {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if st, _ := b.pool.GroupStatus(ctx, topic, group); st.CompletedAt.IsZero() {
		t.Fatalf("group %s did not complete: %+v", group, st)
	}
}

func allDone(n int) []outcome {
	out := make([]outcome, n)
	for i := range out {
		out[i].result = []byte(fmt.Sprintf(`{"n":%d}`, i))
	}
	return out
}

// receiver is a callback endpoint that records what it receives and answers
// what answer says (200 by default).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	calls  []call
	answer func(n int, r *http.Request) int // n counts this group's calls, from 1
	got    chan call
}

type call struct {
	group, attempt, contentType string
	body                        []byte
	at                          time.Time // when it came
}

func newReceiver(t *testing.T, answer func(n int, r *http.Request) int) *receiver {
	rc := &receiver{answer: answer, got: make(chan call, 100)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c := call{group: r.Header.Get("Sluice-Group"), attempt: r.Header.Get("Sluice-Attempt"), contentType: r.Header.Get("Content-Type"), body: body, at: time.Now()}
		rc.mu.Lock()
		rc.calls = append(rc.calls, c)
		n := 0
		for _, x := range rc.calls {
			if x.group == c.group {
				n++
			}
		}
		rc.mu.Unlock()
		code := http.StatusOK
		if rc.answer != nil {
			code = rc.answer(n, r)
		}
		if code == http.StatusFound {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "answer %d", code)
		rc.got <- c
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) callsFor(group string) []call {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []call
	for _, c := range rc.calls {
		if c.group == group {
			out = append(out, c)
		}
	}
	return out
}

// delays records the coordinator's waits between attempts and returns at
// once: backoff is checked, not waited for.
type delays struct {
	mu sync.Mutex
	d  []time.Duration
}

func (d *delays) sleep(ctx context.Context, dur time.Duration) error {
	d.mu.Lock()
	d.d = append(d.d, dur)
	d.mu.Unlock()
	return ctx.Err()
}

func (d *delays) all() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.d...)
}

func (b *bed) config(mutate func(*coordinator.Config)) coordinator.Config {
	cfg := coordinator.DefaultConfig()
	cfg.Stage = b.layout.Stage
	cfg.Partitions = b.layout.Partitions
	cfg.RedisAddr = b.redis.Addr()
	cfg.ConsulAddr = b.consul.Addr()
	cfg.LockDelay = 0
	cfg.LockRetryWait = 50 * time.Millisecond
	cfg.CallbackTimeout = 5 * time.Second
	cfg.Sleep = (&delays{}).sleep
	// The receivers listen on loopback, which callbacks may not reach by
	// default; nothing else may be dialled, or even looked up.
	cfg.CallbackAllow = []string{"127.0.0.0/8", "::1"}
	cfg.CallbackResolver = loopbackNames{}
	cfg.CallbackDial = b.loopbackDial
	if mutate != nil {
		mutate(&cfg)
	}
	return cfg
}

type running struct {
	c      *coordinator.Coordinator
	addr   string
	cancel context.CancelFunc
	done   chan error
	logs   *testenv.LogBuffer // what it logged, beside the test's log
}

func (b *bed) start(t *testing.T, name string, mutate func(*coordinator.Config)) *running {
	t.Helper()
	cfg := b.config(mutate)
	cfg.Holder = name
	logs := &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t, name}, logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := coordinator.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1), logs: logs}
	go func() { r.done <- c.Serve(ctx, ln) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("coordinator stopped with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("coordinator did not stop within 15s")
	}
}

func (r *running) waitHolding(t *testing.T) {
	t.Helper()
	testenv.WaitFor(t, 15*time.Second, "the coordinator to hold the lock", r.c.Holds)
}

type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.name + ": " + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// finished waits until the watcher is done with group of topic jobs: off
// the completing list, with the group's status kept for a while.
func (b *bed) finished(t *testing.T, group string) queue.GroupStatus {
	t.Helper()
	return b.finishedOf(t, "jobs", group)
}

// finishedOf is finished for a group of topic.
func (b *bed) finishedOf(t *testing.T, topic, group string) queue.GroupStatus {
	t.Helper()
	ctx := context.Background()
	k := b.layout.Keys(b.layout.QueueOf(topic, group, ""))
	testenv.WaitFor(t, 10*time.Second, "group "+group+" to be finished", func() bool {
		ttl, _ := b.redis.Client().TTL(ctx, k.Group(group)).Result()
		left, _ := b.redis.Client().LRange(ctx, k.Completing(), 0, -1).Result()
		for _, g := range left {
			if g == group {
				return false
			}
		}
		return ttl > 0
	})
	st, err := b.pool.GroupStatus(ctx, topic, group)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// loopbackNames resolves localhost alone: no lookup leaves the process.
type loopbackNames map[string][]string

func (n loopbackNames) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "localhost" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	for _, a := range n[host] {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host (the test resolves only its own names)", Name: host, IsNotFound: true}
}

// loopbackDial is the callbacks' dialer in tests: it fails the test, and
// opens nothing, for any address but a loopback one.
func (b *bed) loopbackDial(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
		b.t.Errorf("a callback dialled %s: only loopback may be dialled", address)
		return nil, errors.New("test guard: not a loopback address")
	}
	return (&net.Dialer{}).DialContext(ctx, network, address)
}
