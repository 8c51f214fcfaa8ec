package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

func workerPolicy(t *testing.T, stage string) string {
	t.Helper()
	rules, err := consul.PolicyFor(consul.Policy{Part: "worker", Stage: stage})
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// TestWorkerUnderItsLeastACLPolicy: with Consul denying by default and a
// token of exactly `sluice consul-policy worker`, the worker reads the
// execution rate limits and runs jobs under them.
func TestWorkerUnderItsLeastACLPolicy(t *testing.T) {
	b := newBed(t)
	srv := testenv.Consul(t, testenv.WithConsulACL())
	putLimit(t, srv.Client(), "api", `{"rate": 20}`)
	token := srv.ACLToken("worker", workerPolicy(t, "test"))
	s := newStarts()
	var w *worker.Worker
	b.start(t, func(c *worker.Config) {
		c.ConsulAddr, c.ConsulToken = srv.Addr(), cli.Secret{Value: token}
	}, func(x *worker.Worker) {
		w = x
		w.Handle("call", s.handler())
	})
	testenv.WaitFor(t, 10*time.Second, "the worker to read the limit", func() bool {
		return testenv.Metric(t, w.Registry(), "sluice_worker_rate_limit_per_second", "resource", "api") == 20
	})
	b.enqueue(t, limitJobs("a", "api", 5)...)
	s.wait(t, 5, "the jobs under the limit")
}

// TestWorkerWithoutLimitsReadSaysWhatIsDenied: a token whose policy reads
// another stage's limits: Consul hides this stage's limits from it, which
// the worker takes for a refusal (a hidden limit must not read as none),
// logs naming the part, the prefix and the token's flag, and applies no
// limit set.
func TestWorkerWithoutLimitsReadSaysWhatIsDenied(t *testing.T) {
	b := newBed(t)
	srv := testenv.Consul(t, testenv.WithConsulACL())
	putLimit(t, srv.Client(), "api", `{"rate": 20}`)
	var logs testenv.LogBuffer
	cfg := b.config(func(c *worker.Config) {
		c.ConsulAddr, c.ConsulToken = srv.Addr(), cli.Secret{Value: srv.ACLToken("other-stage", workerPolicy(t, "other"))}
	})
	w, err := worker.New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("call", newStarts().handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testenv.WaitFor(t, 10*time.Second, "the refusal logged", func() bool {
		return strings.Contains(logs.String(), "worker: Consul denied list of keys under sluice/test/limits/")
	})
	for _, want := range []string{"level=ERROR", "--consul-token-file", `key_prefix \"sluice/test/limits/\"`, "sluice consul-policy worker"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not name %s:\n%s", want, logs.String())
		}
	}
}
