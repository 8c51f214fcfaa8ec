package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

const (
	adminToken = "admin-token-for-tests"
	readToken  = "read-token-for-tests"
)

// bed is the real Redis and Consul a console runs against, and a pool for
// the test to play relay and worker with.
type bed struct {
	redis  *testenv.RedisServer
	consul *testenv.ConsulServer
	pool   *queue.Pool
	layout queue.Keyspace
}

func newBed(t *testing.T, partitions int) *bed {
	t.Helper()
	b := &bed{redis: testenv.Redis(t), consul: testenv.Consul(t), layout: queue.Keyspace{Stage: "test", Partitions: partitions}}
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: b.layout, Addr: b.redis.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.pool = p
	// The test plays a relay of topic jobs, which registers its topic when
	// it starts: the console reads the queues of the registered topics.
	b.register(t, "jobs")
	return b
}

// register registers topics, as a relay of them does when it starts.
func (b *bed) register(t *testing.T, topics ...string) {
	t.Helper()
	if err := b.pool.RegisterTopics(context.Background(), topics, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// config is a console's configuration on the bed, with an admin and a read
// token, then mutate.
func (b *bed) config(t *testing.T, mutate func(*console.Config)) console.Config {
	t.Helper()
	cfg := console.DefaultConfig()
	cfg.Stage = b.layout.Stage
	cfg.Partitions = b.layout.Partitions
	cfg.RedisAddr = b.redis.Addr()
	cfg.ConsulAddr = b.consul.Addr()
	cfg.AdminTokens = adminToken + " admin;" + readToken + " read"
	if mutate != nil {
		mutate(&cfg)
	}
	return cfg
}

// running is a console serving on a loopback port.
type running struct {
	c      *console.Console
	addr   string
	cancel context.CancelFunc
	done   chan error
	logs   *testenv.LogBuffer // what it logged, beside the test's log
}

// start serves a console with the bed's config (mutate changes it).
func (b *bed) start(t *testing.T, name string, mutate func(*console.Config)) *running {
	t.Helper()
	logs := &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t, name}, logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := console.New(b.config(t, mutate), log)
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
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("console %s stopped with %v", name, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("console %s did not stop within 15s", name)
		}
	})
	return r
}

type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.name + ": " + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// call sends method path to the console with token ("": none) and body
// (nil: none); it returns the status and the answer.
func (r *running) call(t *testing.T, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var in io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		in = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+r.addr+path, in)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json") // as the admin client sends
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(path, "/api/") && ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return resp.StatusCode, out
}

// must calls and decodes a 200 answer into out.
func (r *running) must(t *testing.T, method, path string, body, out any) {
	t.Helper()
	code, b := r.call(t, method, path, adminToken, body)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, code, b)
	}
	if out != nil {
		// Fresh: a field the answer leaves out must not keep an old value.
		if v := reflect.ValueOf(out); v.Kind() == reflect.Pointer {
			v.Elem().SetZero()
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

func apiError(t *testing.T, b []byte) admin.Error {
	t.Helper()
	var e admin.Error
	if err := json.Unmarshal(b, &e); err != nil || e.Message == "" {
		t.Fatalf("not an error answer: %s (%v)", b, err)
	}
	return e
}
