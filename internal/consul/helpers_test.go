package consul

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/sluicehq/sluice/internal/testenv"
)

// shared is one agent for the tests that do not stop it; each test uses its
// own keys. Tests that stop or restart an agent start their own.
var shared struct {
	once sync.Once
	s    *testenv.ConsulServer
	err  error
}

func sharedConsul(t *testing.T) *testenv.ConsulServer {
	t.Helper()
	shared.once.Do(func() { shared.s, shared.err = testenv.StartConsul() })
	if shared.err != nil {
		t.Fatalf("starting the shared consul agent: %v", shared.err)
	}
	return shared.s
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.s != nil {
		if err := shared.s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the shared consul agent:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testCtx ends when the test does, or after a minute should it hang.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// lockKey is a key of the test's own.
func lockKey(t *testing.T) string {
	k, err := Key("test", strings.ReplaceAll(t.Name(), "/", "_"), "lock")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sessionsFor lists the sessions contending for key: every session our
// locks create is named after its key.
func sessionsFor(t *testing.T, c *api.Client, key string) []*api.SessionEntry {
	t.Helper()
	all, _, err := c.Session().List(nil)
	if err != nil {
		t.Fatalf("listing sessions: %v", err)
	}
	var out []*api.SessionEntry
	for _, s := range all {
		if strings.Contains(s.Name, " "+key+" ") {
			out = append(out, s)
		}
	}
	return out
}

type acquired struct {
	lease *Lease
	at    time.Time
	err   error
}

// acquireAsync runs Acquire in the background.
func acquireAsync(ctx context.Context, cfg LockConfig) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := Acquire(ctx, cfg)
		ch <- acquired{l, time.Now(), err}
	}()
	return ch
}

func receive[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
		panic("unreachable")
	}
}

func closedWithin(t *testing.T, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
		return
	default:
	}
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("%s did not happen within %s", what, timeout)
	}
}

func release(t *testing.T, l *Lease) {
	t.Helper()
	if err := l.Release(testCtx(t)); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// logRecorder is a slog handler that keeps the messages, so a test can wait
// for a state change the code reports; with -v it prints them too.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func newLog() (*slog.Logger, *logRecorder) {
	r := &logRecorder{}
	return slog.New(r), r
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	r.mu.Unlock()
	if testing.Verbose() {
		var b strings.Builder
		rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
		fmt.Fprintf(os.Stderr, "%s %s %s%s\n", rec.Time.Format("15:04:05.000"), rec.Level, rec.Message, b.String())
	}
	return nil
}

// count reports how many messages contain s.
func (r *logRecorder) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// blackhole is a proxy to a Consul agent (testenv.Proxy) that counts the
// KV reads its clients send. Once frozen it keeps every connection open
// and accepts new ones, but forwards nothing either way: a client behind
// it gets neither answers nor errors, like one whose agent hangs or whose
// packets are dropped.
type blackhole struct {
	*testenv.Proxy
	kvGets atomic.Int64 // KV reads the clients sent
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	b := &blackhole{}
	b.Proxy = testenv.NewWatchedProxy(t, target, func(sent []byte) {
		b.kvGets.Add(int64(bytes.Count(sent, []byte("GET /v1/kv/"))))
	})
	return b
}

// client returns a Consul client that talks through the proxy.
func (b *blackhole) client(t *testing.T) *api.Client {
	t.Helper()
	tr := cleanhttp.DefaultPooledTransport()
	c, err := api.NewClient(&api.Config{
		Address:    b.Addr(),
		Scheme:     "http",
		Transport:  tr,
		HttpClient: &http.Client{Transport: tr},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// offlineClient is a client for tests that never reach Consul.
func offlineClient() *api.Client {
	c, err := api.NewClient(&api.Config{Address: "127.0.0.1:1", Scheme: "http"})
	if err != nil {
		panic(err)
	}
	return c
}
