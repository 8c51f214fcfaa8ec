package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tracing"
	"github.com/sluicehq/sluice/worker"
)

// The done-when of issue 22: `sluice dev --tracing` starts Jaeger and prints
// where to look; a job posted with a traceparent of the client's, throttled
// by its resource's execution limit, failed once and then succeeded, is one
// trace in Jaeger's query API with every hop: the gate's produce, the wait
// in Kafka, the relay's write, the waits in Redis (ready, throttled, retry
// backoff), each handler attempt, and a span the handler added itself.
func TestDevTracingShowsEveryHopOfAJobInJaeger(t *testing.T) {
	if _, err := stack.FindJaeger(); err != nil {
		t.Fatal(err) // says: run `make deps`
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "") // sluice dev starts its own Jaeger
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms: spans reach Jaeger quickly
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	cfg.Worker = false // the test's worker, whose handler fails once
	cfg.CanaryInterval = 0
	cfg.Logging.Tracing = true
	for _, addr := range []*string{&cfg.JaegerAddr, &cfg.OTLPAddr} {
		port, err := stack.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		*addr = "127.0.0.1:" + strconv.Itoa(port)
	}
	dev := startDev(t, &cfg)
	if !strings.Contains(dev.out.String(), "http://"+cfg.JaegerAddr+"/api/traces?service=sluice-dev") {
		t.Fatalf("the banner does not say where to look at traces:\n%s", dev.out.String())
	}

	// An execution limit of 1/s for the job's resource, and a first job of
	// the resource that takes its slot: the traced job waits for the next.
	c := devConsul(t, cfg)
	if _, err := c.KV().Put(&consulapi.KVPair{Key: "sluice/dev/limits/billing-api", Value: []byte(`{"rate": 1}`)}, nil); err != nil {
		t.Fatal(err)
	}
	wcfg := worker.DefaultConfig()
	wcfg.Listen = ""
	wcfg.RedisAddr, wcfg.Partitions, wcfg.ConsulAddr = cfg.RedisAddr, cfg.RedisPartitions, cfg.ConsulAddr
	wcfg.Topics = worker.TopicWeights{{Topic: cfg.Topic, Weight: 1}}
	wcfg.Backoff = 300 * time.Millisecond
	w, err := worker.New(wcfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var attempts, blockers atomic.Int32
	w.Handle("charge", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if j.ID == "blocker" {
			blockers.Add(1)
			return nil, nil
		}
		// User code adds a span of its own under the attempt's.
		_, span := tracing.Tracer().Start(ctx, "charge the card")
		defer span.End()
		if attempts.Add(1) == 1 {
			return nil, errors.New("card processor timed out")
		}
		return nil, nil
	}))
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-workerDone })
	post := func(body, traceparent string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+cfg.GateAddr+"/v1/topics/"+cfg.Topic+"/jobs", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("posting %s: %s", body, resp.Status)
		}
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	post(`{"id":"blocker","type":"charge","resource":"billing-api"}`, "")
	post(`{"id":"traced","type":"charge","resource":"billing-api"}`, "00-"+traceID+"-00f067aa0ba902b7-01")
	testenv.WaitFor(t, 30*time.Second, "the traced job to succeed at its second attempt", func() bool {
		return attempts.Load() >= 2 && blockers.Load() == 1
	})

	q := jaegerOf(cfg)
	var tr *testenv.JaegerTrace
	want := []string{"sluice.gate.produce", "sluice.kafka.wait", "sluice.relay.write", "sluice.redis.wait ready", "sluice.redis.wait throttled",
		"sluice.worker.attempt retry", "sluice.redis.wait retry_backoff", "sluice.worker.attempt succeeded", "charge the card"}
	have := map[string]int{}
	testenv.WaitFor(t, 30*time.Second, "Jaeger to hold the job's trace with every hop", func() bool {
		got, err := q.Trace(context.Background(), traceID)
		if err != nil || got == nil {
			return false
		}
		tr = got
		have = map[string]int{}
		for _, s := range got.Spans {
			name := s.OperationName
			if r := s.Tag("sluice.wait.reason"); r != "" {
				name += " " + r
			}
			if o := s.Tag("sluice.outcome"); o != "" && s.OperationName == tracing.SpanWorkerAttempt {
				name += " " + o
			}
			have[name]++
		}
		for _, n := range want {
			if have[n] == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("the trace's spans: %v", have)
	byID := map[string]testenv.JaegerSpan{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	var gateSpan string
	for _, s := range tr.Spans {
		switch s.OperationName {
		case tracing.SpanGateProduce:
			gateSpan = s.SpanID
			if len(s.References) == 0 || s.References[0].SpanID != "00f067aa0ba902b7" {
				t.Errorf("the gate's span is not a child of the client's traceparent: %+v", s.References)
			}
			if s.Tag("messaging.destination.name") != cfg.Topic || s.Tag("messaging.message.id") != "traced" || s.Tag("messaging.kafka.offset") == "" {
				t.Errorf("the gate's span lacks topic, job id or offset: %+v", s.Tags)
			}
		case tracing.SpanWorkerAttempt:
			if s.Tag("sluice.attempt") == "" || s.Tag("sluice.job.type") != "charge" {
				t.Errorf("an attempt span lacks its attempt or type: %+v", s.Tags)
			}
			if s.Tag("sluice.outcome") == "retry" && s.Tag("error") != "true" && s.Tag("otel.status_code") != "ERROR" {
				t.Errorf("the failed attempt is not marked failed: %+v", s.Tags)
			}
		case "charge the card":
			if len(s.References) == 0 || byID[s.References[0].SpanID].OperationName != tracing.SpanWorkerAttempt {
				t.Errorf("the handler's own span is not a child of its attempt's")
			}
		}
	}
	for _, s := range tr.Spans {
		switch s.OperationName {
		case tracing.SpanKafkaWait, tracing.SpanRelayWrite, tracing.SpanRedisWait, tracing.SpanWorkerAttempt:
			if len(s.References) == 0 || s.References[0].SpanID != gateSpan {
				t.Errorf("%s is not a child of the gate's produce span", s.OperationName)
			}
		}
	}
}

// jaegerOf is a query client of sluice dev's Jaeger.
func jaegerOf(cfg devConfig) *testenv.JaegerServer {
	return testenv.JaegerAt("http://" + cfg.JaegerAddr)
}
