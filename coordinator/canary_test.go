package coordinator_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// canaryPipeline plays gate, relay and worker for the monitor on real
// Redis: canaries POSTed to its gate go straight into their partitions,
// and a consumer per partition completes them as the worker's built-in
// handler does. A partition's consumer can be stopped.
type canaryPipeline struct {
	b         *bed
	gate      *httptest.Server
	mu        sync.Mutex
	stopped   map[int]chan struct{} // partition -> closed when it runs again
	absent    map[int]bool          // partition -> no worker at all: no heartbeat either
	topicDown atomic.Bool           // GET /v1/topics/{topic} answers 503
}

// stop stops a partition's consumer until resume.
func (cp *canaryPipeline) stop(part int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.stopped[part] = make(chan struct{})
}

// detach takes a partition's worker away altogether, as when none is
// attached yet (sluice dev --worker=false): no consuming, no heartbeat.
func (cp *canaryPipeline) detach(part int) {
	cp.stop(part)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.absent[part] = true
}

func (cp *canaryPipeline) resume(part int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	close(cp.stopped[part])
	delete(cp.stopped, part)
}

func newCanaryPipeline(t *testing.T, b *bed, kafkaPartitions int) *canaryPipeline {
	cp := &canaryPipeline{b: b, stopped: map[int]chan struct{}{}, absent: map[int]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/topics/{topic}", func(w http.ResponseWriter, r *http.Request) {
		if cp.topicDown.Load() {
			http.Error(w, "Kafka is unavailable", 503)
			return
		}
		io.WriteString(w, `{"topic":"jobs","partitions":`+strconv.Itoa(kafkaPartitions)+`}`)
	})
	mux.HandleFunc("POST /v1/topics/{topic}/jobs", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		j, err := job.Decode(body)
		if err != nil || j.Type != canary.Type || !canary.IsCanary(j.Group) {
			http.Error(w, "not a canary", 400)
			return
		}
		j.Defaults(r.PathValue("topic"), time.Now())
		it := queue.Item{ID: j.ID, Group: j.Group, Topic: j.Topic, Weight: 1, Envelope: j.AppendJSON(nil)}
		if _, err := b.pool.Enqueue(r.Context(), 1, []queue.Item{it}, time.Now()); err != nil {
			http.Error(w, err.Error(), 503)
			return
		}
		w.WriteHeader(202)
	})
	cp.gate = httptest.NewServer(mux)
	t.Cleanup(cp.gate.Close)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for part := range b.layout.Partitions {
		wg.Go(func() { cp.consume(ctx, part) })
		wg.Go(func() { cp.heartbeat(ctx, part) })
	}
	return cp
}

// heartbeat publishes the partition's consumer heartbeat as a worker does,
// stopped or not (a stuck worker still beats), until it is detached.
func (cp *canaryPipeline) heartbeat(ctx context.Context, part int) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	id := "canary-test/" + strconv.Itoa(part)
	for {
		cp.mu.Lock()
		absent := cp.absent[part]
		cp.mu.Unlock()
		if absent {
			cp.b.pool.Leave(ctx, part, id)
		} else {
			cp.b.pool.Heartbeat(ctx, part, id, 1, 0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// consume serves topic jobs' queue on partition part: the canaries'
// records are per partition, their jobs in their topic's queue.
func (cp *canaryPipeline) consume(ctx context.Context, part int) {
	q := queue.Queue{Topic: "jobs", Part: part}
	wake := cp.b.layout.Keys(q).Wake()
	for ctx.Err() == nil {
		cp.mu.Lock()
		stopped := cp.stopped[part]
		cp.mu.Unlock()
		if stopped != nil {
			select {
			case <-stopped:
			case <-ctx.Done():
			}
			continue
		}
		jobs, err := cp.b.pool.Claim(ctx, q, 10, time.Minute)
		if err != nil || len(jobs) == 0 {
			// Idle: block on the wake list, as the worker does.
			cp.b.pool.Client(part).BLPop(ctx, 200*time.Millisecond, wake)
			continue
		}
		for _, cl := range jobs {
			j, _ := job.Decode(cl.Envelope)
			p, err := canary.DecodePayload(j.Payload)
			if err == nil {
				cp.b.pool.RecordCanaryDone(ctx, part, p.Path().Field(), time.UnixMilli(p.SentMS), time.Now())
			}
			cp.b.pool.AckMany(ctx, q, []queue.Done{{Job: cl}}, time.Now(), time.Minute)
		}
	}
}

// startMonitor runs a canary monitor (its lock always valid) until the
// stop it returns is called, or else until the test ends; stop may be
// called more than once.
func startMonitor(t *testing.T, b *bed, cfg coordinator.CanaryConfig, reg prometheus.Registerer, name string) (*coordinator.CanaryMonitor, func()) {
	t.Helper()
	mon, err := coordinator.NewCanaryMonitor(cfg, b.pool, reg, name, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); mon.Run(ctx, func() bool { return true }) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return mon, stop
}

type webhook struct {
	mu    sync.Mutex
	posts []map[string]any
}

// newWebhook records the JSON bodies POSTed to the URL it returns.
func newWebhook(t *testing.T) (*webhook, string) {
	wh := &webhook{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		wh.mu.Lock()
		wh.posts = append(wh.posts, m)
		wh.mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	return wh, hook.URL
}

func (wh *webhook) statuses() []string {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	var out []string
	for _, p := range wh.posts {
		out = append(out, p["status"].(string))
	}
	return out
}

// A stopped partition's canaries alert within two intervals plus the grace
// and name the partition; they clear when it runs again. The webhook hears
// both, and the metrics follow.
func TestCanaryAlertsNameTheStuckPartitionAndClear(t *testing.T) {
	b := newBed(t, 4)
	cp := newCanaryPipeline(t, b, 2)
	wh, hook := newWebhook(t)

	cfg := coordinator.DefaultCanaryConfig()
	cfg.GateURL, cfg.Topics, cfg.Webhook = cp.gate.URL, []string{"jobs"}, hook
	cfg.Interval, cfg.Grace = time.Second, 500*time.Millisecond
	reg := ops.NewRegistry()
	mon, _ := startMonitor(t, b, cfg, reg, "test")

	// max(2 Kafka, 4 Redis) = 4 paths, each completing.
	testenv.WaitFor(t, 10*time.Second, "canaries completed on all 4 paths", func() bool {
		return testenv.Metric(t, reg, "sluice_canary_latency_seconds") >= 4 && len(mon.Alerts()) == 0
	})
	if n := testenv.Metric(t, reg, "sluice_canary_stale"); n != 0 {
		t.Fatalf("%v stale paths while everything flows", n)
	}

	cp.stop(2)
	stoppedAt := time.Now()
	testenv.WaitFor(t, 10*time.Second, "an alert", func() bool { return len(mon.Alerts()) > 0 })
	took := time.Since(stoppedAt)
	alerts := strings.Join(mon.Alerts(), "\n")
	if !strings.Contains(alerts, "Redis partition 2") || strings.Contains(alerts, "Redis partition 1") {
		t.Fatalf("alerts %q: want Redis partition 2 named, alone", alerts)
	}
	// Two intervals plus the grace, from the newest completed canary's
	// send (before the stop), judged every quarter interval.
	if limit := 2*cfg.Interval + cfg.Grace + cfg.Interval/4 + 250*time.Millisecond; took > limit {
		t.Errorf("the alert took %s after the stop, want at most %s", took, limit)
	}
	t.Logf("alert %s after the consumer stopped: %s", took.Round(time.Millisecond), alerts)
	if n := testenv.Metric(t, reg, "sluice_canary_stale", "redis_partition", "2"); n != 1 {
		t.Errorf("sluice_canary_stale for partition 2: %v", n)
	}
	if n := testenv.Metric(t, reg, "sluice_canary_stale"); n != 1 {
		t.Errorf("%v stale paths, want 1", n)
	}

	cp.resume(2)
	testenv.WaitFor(t, 10*time.Second, "the alert to clear", func() bool { return len(mon.Alerts()) == 0 })
	testenv.WaitFor(t, 5*time.Second, "the webhook to hear both", func() bool {
		return strings.Join(wh.statuses(), ",") == "firing,resolved"
	})
	wh.mu.Lock()
	stale := wh.posts[0]["stale"].([]any)
	wh.mu.Unlock()
	if len(stale) != 1 || stale[0].(map[string]any)["redis_partition"].(float64) != 2 {
		t.Errorf("the firing webhook names %v, want partition 2's path", stale)
	}

	// Its canaries waited in Redis while it was stopped, one per interval:
	// once they are done, nothing of them is left ready.
	testenv.WaitFor(t, 10*time.Second, "partition 2 drained", func() bool {
		f, err := b.pool.Funnel(context.Background(), queue.Queue{Topic: "jobs", Part: 2})
		return err == nil && f.Ready == 0 && f.Inflight == 0
	})
	f, _ := b.pool.Funnel(context.Background(), queue.Queue{Topic: "jobs", Part: 2})
	if len(f.Milestones) != 0 || f.Canaries["jobs"][queue.MilestoneCompleted] < 3 {
		t.Errorf("partition 2's funnel: user %v, canaries %v: canaries must count apart", f.Milestones, f.Canaries)
	}
}

// With no worker attached (sluice dev --worker=false), every path of the
// topic goes stale; the alert says no worker consumes the partitions, not
// that the relay or the gate is at fault (issue 32).
func TestCanaryAlertBlamesAMissingWorker(t *testing.T) {
	b := newBed(t, 4)
	cp := newCanaryPipeline(t, b, 2)
	for part := range 4 {
		cp.detach(part)
	}
	cfg := coordinator.DefaultCanaryConfig()
	cfg.GateURL, cfg.Topics = cp.gate.URL, []string{"jobs"}
	cfg.Interval, cfg.Grace = time.Second, 500*time.Millisecond
	mon, _ := startMonitor(t, b, cfg, ops.NewRegistry(), "test")
	testenv.WaitFor(t, 10*time.Second, "an alert", func() bool { return len(mon.Alerts()) > 0 })
	alerts := strings.Join(mon.Alerts(), "\n")
	if !strings.Contains(alerts, "Redis partitions [0 1 2 3]: no worker consumes them") || strings.Contains(alerts, "relay") || strings.Contains(alerts, "gate") {
		t.Fatalf("alerts %q: want the missing worker named, not the relay or the gate", alerts)
	}
}

// A monitor that could not read a topic's partitions (the gate not up yet)
// tries again the next round, not only at the next replan.
func TestCanaryMonitorPlansOnceTheGateAnswers(t *testing.T) {
	b := newBed(t, 2)
	cp := newCanaryPipeline(t, b, 2)
	cp.topicDown.Store(true)
	cfg := coordinator.DefaultCanaryConfig()
	cfg.GateURL, cfg.Topics = cp.gate.URL, []string{"jobs"}
	cfg.Interval, cfg.Grace = time.Second, 500*time.Millisecond // Replan stays 10 rounds
	reg := ops.NewRegistry()
	startMonitor(t, b, cfg, reg, "test")
	testenv.WaitFor(t, 5*time.Second, "a failed first plan", func() bool {
		return testenv.Metric(t, reg, "sluice_canary_send_errors_total") >= 1
	})
	cp.topicDown.Store(false)
	testenv.WaitFor(t, 4*time.Second, "canaries within a few rounds of the gate answering", func() bool {
		return testenv.Metric(t, reg, "sluice_canary_latency_seconds") >= 2
	})
}

// A monitor that stops while its alert fires (the coordinator failed over)
// leaves the alert out in Redis; the next monitor does not resolve it while
// the path is still stuck (it fires again once it can tell), and resolves
// it when every path completes its canaries. Without that, the webhook's
// receiver would page about a stage that recovered under a new leader.
func TestCanaryAlertLeftFiringIsResolvedByTheNextMonitor(t *testing.T) {
	b := newBed(t, 4)
	cp := newCanaryPipeline(t, b, 2)
	wh, hook := newWebhook(t)
	cfg := coordinator.DefaultCanaryConfig()
	cfg.GateURL, cfg.Topics, cfg.Webhook = cp.gate.URL, []string{"jobs"}, hook
	cfg.Interval, cfg.Grace = time.Second, 500*time.Millisecond
	start := func(name string) (*coordinator.CanaryMonitor, func()) {
		return startMonitor(t, b, cfg, ops.NewRegistry(), name)
	}
	alerting := func() bool {
		on, err := b.pool.CanaryAlerting(context.Background())
		return err == nil && on
	}

	first, stopFirst := start("first")
	testenv.WaitFor(t, 10*time.Second, "the first monitor's canaries to flow", func() bool {
		hashes, _ := b.pool.CanaryHashes(context.Background())
		return len(canary.Records(hashes)) == 4 && len(first.Alerts()) == 0
	})
	cp.stop(2)
	testenv.WaitFor(t, 10*time.Second, "the webhook to hear firing", func() bool { return strings.Join(wh.statuses(), ",") == "firing" })
	// The monitor tells the webhook first, then records the state (a
	// monitor that dies in between resolves twice rather than never).
	testenv.WaitFor(t, 5*time.Second, "the firing alert recorded in Redis", alerting)
	stopFirst() // the leader goes while its alert is out

	_, stopSecond := start("second")
	// Partition 2 is still stuck: no resolution; once the new monitor can
	// judge (two intervals plus the grace), it fires again.
	testenv.WaitFor(t, 10*time.Second, "the new monitor to fire again", func() bool { return strings.Join(wh.statuses(), ",") == "firing,firing" })
	cp.resume(2)
	testenv.WaitFor(t, 10*time.Second, "the new monitor to resolve", func() bool { return strings.Join(wh.statuses(), ",") == "firing,firing,resolved" })
	testenv.WaitFor(t, 5*time.Second, "the resolution recorded in Redis", func() bool { return !alerting() })

	// A failover while firing, then a recovery before the new monitor can
	// judge: the new one resolves what the old one fired.
	stopSecond()
	cp.stop(1)
	third, stopThird := start("third")
	testenv.WaitFor(t, 10*time.Second, "the third monitor to fire", func() bool { return len(third.Alerts()) > 0 })
	stopThird()
	cp.resume(1)
	start("fourth")
	testenv.WaitFor(t, 10*time.Second, "the fourth monitor to resolve the third's alert", func() bool {
		return strings.Join(wh.statuses(), ",") == "firing,firing,resolved,firing,resolved"
	})
	testenv.WaitFor(t, 5*time.Second, "the third monitor's alert recorded as resolved", func() bool { return !alerting() })
}
