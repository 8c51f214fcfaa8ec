package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// statsReport runs `sluice stats -o json` against a dev stack.
func statsReport(t *testing.T, cfg devConfig) funnel.Report {
	t.Helper()
	var out, errOut bytes.Buffer
	err := runStats(context.Background(), []string{"-o", "json",
		"--redis-addr", cfg.RedisAddr, "--redis-partitions", strconv.Itoa(cfg.RedisPartitions),
		"--kafka-brokers", cfg.KafkaAddr, "--gate-metrics", "http://" + cfg.GateAddr + "/metrics"}, &out, &errOut)
	if err != nil && !errors.Is(err, errReported) {
		t.Fatalf("sluice stats: %v %s", err, errOut.String())
	}
	var r funnel.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("sluice stats -o json: %v\n%s", err, out.String())
	}
	if (err != nil) != (len(r.Problems) > 0) {
		t.Fatalf("sluice stats exit and problems disagree: %v, %q", err, r.Problems)
	}
	return r
}

func topicOf(r funnel.Report, name string) funnel.Topic {
	for _, t := range r.Topics {
		if t.Topic == name {
			return t
		}
	}
	return funnel.Topic{}
}

// extraWorker runs a worker for some partitions beside sluice dev's.
func extraWorker(t *testing.T, cfg devConfig, serve string) (stop func()) {
	t.Helper()
	wcfg := worker.DefaultConfig()
	wcfg.RedisAddr, wcfg.Partitions, wcfg.Drain = cfg.RedisAddr, cfg.RedisPartitions, time.Second
	var err error
	if wcfg.Serve, err = cli.ParseIntRanges(serve); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(wcfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&builtinHandlers{other: "noop"}).apply(w); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("extra worker: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

// The test bed: one partition's consumer stops and its canary alert
// names it within two intervals plus the grace, then clears when it runs
// again; a paused relay makes every path of its topic alert, and the funnel
// shows the jobs waiting in Kafka, then balances once the relay resumes.
func TestDevCanariesAndFunnel(t *testing.T) {
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	cfg.CanaryInterval = time.Second
	cfg.WorkerServe = []int{0, 1, 2, 4, 5, 6, 7} // partition 3 gets a worker of its own
	startDev(t, &cfg)
	stopThree := extraWorker(t, cfg, "3")
	interval, grace := cfg.CanaryInterval, cfg.CanaryInterval/2

	flowing := func(r funnel.Report) bool {
		if r.Canary == nil || len(r.Canary.Paths) != cfg.RedisPartitions || len(r.Problems) > 0 {
			return false
		}
		for _, p := range r.Canary.Paths {
			if p.Done.IsZero() {
				return false
			}
		}
		return true
	}
	testenv.WaitFor(t, 30*time.Second, "canaries completing on every path", func() bool { return flowing(statsReport(t, cfg)) })

	// Partition 3's consumer stops.
	stopThree()
	stoppedAt := time.Now()
	var alerts string
	testenv.WaitFor(t, 15*time.Second, "a canary alert", func() bool {
		r := statsReport(t, cfg)
		alerts = strings.Join(r.Canary.Alerts, "\n")
		return alerts != ""
	})
	took := time.Since(stoppedAt)
	if !strings.Contains(alerts, "Redis partition 3") || strings.Count(alerts, "\n") != 0 {
		t.Fatalf("alerts %q: want one, naming Redis partition 3", alerts)
	}
	// stats judges at each read; reads here come every 250 ms at most.
	if limit := 2*interval + grace + 500*time.Millisecond; took > limit {
		t.Errorf("the alert showed %s after the stop, want within %s", took, limit)
	}
	t.Logf("partition 3 stopped: alert after %s: %s", took.Round(time.Millisecond), alerts)

	extraWorker(t, cfg, "3")
	testenv.WaitFor(t, 15*time.Second, "the alert to clear", func() bool { return flowing(statsReport(t, cfg)) })

	// Pause the topic's relay: every path alerts, and jobs posted meanwhile
	// wait in Kafka, explained.
	c := devConsul(t, cfg)
	rateKey := "sluice/dev/relay/" + cfg.Topic + "/rate"
	if _, err := c.KV().Put(&consulapi.KVPair{Key: rateKey, Value: []byte("paused")}, nil); err != nil {
		t.Fatal(err)
	}
	before := topicOf(statsReport(t, cfg), cfg.Topic)
	const jobs = 40
	for i := range jobs {
		body := `{"type":"work","group":"g` + strconv.Itoa(i%5) + `"}`
		resp, err := http.Post("http://"+cfg.GateAddr+"/v1/topics/"+cfg.Topic+"/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("posting a job: %s", resp.Status)
		}
	}
	var paused funnel.Report
	testenv.WaitFor(t, 15*time.Second, "every path of the topic to alert", func() bool {
		paused = statsReport(t, cfg)
		for _, p := range paused.Canary.Paths {
			if !p.Stale {
				return false
			}
		}
		return true
	})
	if a := strings.Join(paused.Canary.Alerts, "\n"); !strings.Contains(a, "topic "+cfg.Topic+": no canary completes on any of its 8 paths") {
		t.Errorf("paused relay: alerts %q", a)
	}
	pt := topicOf(paused, cfg.Topic)
	if pt.InKafka == nil || *pt.InKafka != jobs || len(pt.Unexplained) != 0 {
		t.Fatalf("paused relay: in Kafka %v, unexplained %q; want %d jobs waiting, explained", pt.InKafka, pt.Unexplained, jobs)
	}
	if pt.KafkaLag == nil || *pt.KafkaLag < jobs {
		t.Errorf("paused relay: Kafka lag %v, want at least the %d jobs", pt.KafkaLag, jobs)
	}
	if pt.Milestones[queue.MilestoneRelayed] != before.Milestones[queue.MilestoneRelayed] {
		t.Errorf("relayed moved while paused: %d -> %d", before.Milestones[queue.MilestoneRelayed], pt.Milestones[queue.MilestoneRelayed])
	}

	if _, err := c.KV().Delete(rateKey, nil); err != nil {
		t.Fatal(err)
	}
	var after funnel.Report
	testenv.WaitFor(t, 30*time.Second, "the funnel to balance and the canaries to flow", func() bool {
		after = statsReport(t, cfg)
		tt := topicOf(after, cfg.Topic)
		return flowing(after) && tt.InKafka != nil && *tt.InKafka == 0 && tt.InRedis == 0
	})
	tt := topicOf(after, cfg.Topic)
	if got := tt.Milestones[queue.MilestoneCompleted]; got != tt.Gate.Accepted || got != jobs {
		t.Errorf("after the run: completed %d, accepted by the gate %d, want %d each", got, tt.Gate.Accepted, jobs)
	}
	if after.Canary.Funnel[cfg.Topic][queue.MilestoneCompleted] == 0 {
		t.Error("canaries' funnel counted nothing")
	}
}
