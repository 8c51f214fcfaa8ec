package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
)

// devOnFreePorts is sluice dev's default configuration with every address
// moved to a free port and the data in dir.
func devOnFreePorts(t *testing.T, dir string) devConfig {
	t.Helper()
	var cfg devConfig
	cfg.register(flag.NewFlagSet("dev", flag.ContinueOnError))
	cfg.Dir = dir
	moveToFreePorts(t, &cfg)
	return cfg
}

// moveToFreePorts moves every address of cfg to a port free a moment ago.
func moveToFreePorts(t *testing.T, cfg *devConfig) {
	t.Helper()
	for _, addr := range []*string{&cfg.GateAddr, &cfg.KafkaAddr, &cfg.RedisAddr, &cfg.ConsulAddr, &cfg.RelayAddr, &cfg.WorkerAddr, &cfg.CoordinatorAddr} {
		port, err := stack.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		*addr = "127.0.0.1:" + strconv.Itoa(port)
	}
}

// devConsul is a client of the dev stack's Consul.
func devConsul(t *testing.T, cfg devConfig) *consulapi.Client {
	t.Helper()
	ccfg := consulapi.DefaultConfig()
	ccfg.Address = cfg.ConsulAddr
	c, err := consulapi.NewClient(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type runningDev struct {
	out    bytes.Buffer
	cancel context.CancelFunc
	done   chan error
}

func startDev(t *testing.T, cfg *devConfig) *runningDev {
	t.Helper()
	for attempt := 1; ; attempt++ {
		d, err := tryStartDev(*cfg)
		if err == nil {
			t.Cleanup(func() { d.stop(t) })
			return d
		}
		// The ports were free when devOnFreePorts chose them, but another
		// package's test bed (go test -p 2) may take one before sluice dev
		// listens on it: choose again.
		if attempt < 3 && (errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, stack.ErrAddrInUse)) {
			t.Logf("sluice dev did not start (%v); choosing other ports", err)
			moveToFreePorts(t, cfg)
			continue
		}
		t.Fatalf("sluice dev did not start: %v", err)
	}
}

// tryStartDev starts sluice dev and waits until it is ready or has failed.
func tryStartDev(cfg devConfig) (*runningDev, error) {
	ctx, cancel := context.WithCancel(context.Background())
	d := &runningDev{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { d.done <- devStack(ctx, cfg, log, &d.out, func() { close(ready) }) }()
	select {
	case <-ready:
		return d, nil
	case err := <-d.done:
		cancel()
		return nil, err
	case <-time.After(2 * time.Minute):
		cancel()
		<-d.done
		return nil, errors.New("not ready within 2 minutes")
	}
}

func (d *runningDev) stop(t *testing.T) {
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	if err := <-d.done; err != nil {
		t.Errorf("sluice dev stopped with %v", err)
	}
}

// curlFromBanner runs the curl example sluice dev printed, as an HTTP request.
func curlFromBanner(t *testing.T, banner string) (status int, body []byte) {
	t.Helper()
	m := regexp.MustCompile(`(?s)curl -sS -X POST (\S+) -H '([^']+)' \\\s+-d '([^']+)'`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no curl example in the banner:\n%s", banner)
	}
	req, _ := http.NewRequest(http.MethodPost, m[1], strings.NewReader(m[3]))
	name, value, _ := strings.Cut(m[2], ": ")
	req.Header.Set(name, value)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the printed curl: %v", err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func readBack(t *testing.T, broker, topic string, partition int32, offset int64) []byte {
	t.Helper()
	return testenv.ReadRecords(t, []string{broker}, topic, partition, offset, 1)[0].Value
}

func TestDevRunsThePrintedCurlAndKeepsJobsAcrossRestarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".sluice")
	cfg := devOnFreePorts(t, dir)
	d := startDev(t, &cfg)
	banner := d.out.String()
	for _, want := range []string{cfg.GateAddr, cfg.KafkaAddr, cfg.RedisAddr, cfg.ConsulAddr, "no authentication"} {
		if !strings.Contains(banner, want) {
			t.Fatalf("banner lacks %q:\n%s", want, banner)
		}
	}
	status, body := curlFromBanner(t, banner)
	if status != http.StatusAccepted {
		t.Fatalf("printed curl: %d %s", status, body)
	}
	var partition int32
	var offset int64
	var id string
	if _, err := fmt.Sscanf(string(body), `{"id":%q,"topic":"jobs","partition":%d,"offset":%d}`, &id, &partition, &offset); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	wantPayload := []byte(`"payload":{"greeting":"<hi> & welcome"}`)
	if v := readBack(t, cfg.KafkaAddr, "jobs", partition, offset); !bytes.Contains(v, wantPayload) {
		t.Fatalf("record %s lacks %s", v, wantPayload)
	}
	// The relay moves it into its Redis partition, and the worker runs it
	// (noop): the whole path, gate to done. A plain job leaves no record,
	// only counters.
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	defer rdb.Close()
	layout := queue.Keyspace{Stage: "dev", Partitions: cfg.RedisPartitions}
	testenv.WaitFor(t, 30*time.Second, "the job to be relayed and run", func() bool {
		done := 0
		for p := range layout.Partitions {
			n, _ := rdb.HGet(context.Background(), layout.Keys(queue.Queue{Topic: "jobs", Part: p}).Stats(), "funnel:jobs:completed").Int()
			done += n
		}
		return done == 1
	})
	if n, _ := rdb.Exists(context.Background(), layout.Keys(layout.QueueOf("jobs", "", id)).Job(id)).Result(); n != 0 {
		t.Fatal("a plain job that succeeded left a record")
	}
	// The bytes are checked on a twin that waits in Redis: the same
	// payload, due in an hour, an entry in its partition's delayed set.
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	twinID := enqueueID(t, "http://"+cfg.GateAddr+"/v1/topics/jobs/jobs", `{"type":"noop","run_at":"`+later+`","payload":{"greeting":"<hi> & welcome"}}`)
	delayedKey := layout.Keys(layout.QueueOf("jobs", "", twinID)).Delayed()
	delayedEnvelope := func() string {
		entries, _ := rdb.ZRange(context.Background(), delayedKey, 0, -1).Result()
		for _, e := range entries {
			if pe, err := queue.ParseEntry(e); err == nil && pe.ID == twinID {
				return pe.Envelope
			}
		}
		return ""
	}
	var env string
	testenv.WaitFor(t, 30*time.Second, "the delayed twin in Redis", func() bool {
		env = delayedEnvelope()
		return env != ""
	})
	if !strings.Contains(env, string(wantPayload)) {
		t.Fatalf("envelope in Redis %s lacks %s", env, wantPayload)
	}
	if err := rdb.Set(context.Background(), "survives", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}

	d.stop(t)
	for _, addr := range []string{cfg.GateAddr, cfg.KafkaAddr, cfg.RedisAddr, cfg.ConsulAddr, cfg.RelayAddr, cfg.WorkerAddr, cfg.CoordinatorAddr} {
		if err := stack.CheckAddrFree(addr, "after stop", "-"); err != nil {
			t.Fatalf("still listening after sluice dev stopped: %v", err)
		}
	}

	startDev(t, &cfg)
	if v := readBack(t, cfg.KafkaAddr, "jobs", partition, offset); !bytes.Contains(v, []byte(id)) || !bytes.Contains(v, wantPayload) {
		t.Fatalf("after a restart the record is %s", v)
	}
	if v, err := rdb.Get(context.Background(), "survives").Result(); err != nil || v != "yes" {
		t.Fatalf("Redis lost its data across a restart: %q %v", v, err)
	}
	if v := delayedEnvelope(); v != env {
		t.Fatalf("the delayed job across a restart: %q, want its envelope %s", v, env)
	}
}

func TestDevRefusesATakenPort(t *testing.T) {
	cfg := devOnFreePorts(t, t.TempDir())
	ln, err := net.Listen("tcp", cfg.RedisAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = devStack(context.Background(), cfg, slog.New(slog.DiscardHandler), io.Discard, nil)
	if !errors.Is(err, stack.ErrAddrInUse) || !strings.Contains(err.Error(), "--redis-addr") {
		t.Fatalf("devStack with the Redis port taken: %v", err)
	}
}

// startDev survives a port taken between devOnFreePorts and the listen, as
// happened in CI when another package's test bed took the relay's port.
func TestStartDevChoosesOtherPortsWhenOneIsTaken(t *testing.T) {
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	taken, err := net.Listen("tcp", cfg.RelayAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	startDev(t, &cfg)
	if cfg.RelayAddr == taken.Addr().String() {
		t.Fatalf("sluice dev started with the relay on the taken port %s", cfg.RelayAddr)
	}
	resp, err := http.Get("http://" + cfg.RelayAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("relay /healthz on %s: %s", cfg.RelayAddr, resp.Status)
	}
}
