package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/ops"
)

func TestHistPercentiles(t *testing.T) {
	h := NewHist()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	s := h.Summary()
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.002 {
			t.Errorf("%s = %g ms, want %g (within 0.2%%)", name, got, want)
		}
	}
	if s.Count != 1000 {
		t.Fatalf("count %d", s.Count)
	}
	near("p50", s.P50, 500)
	near("p90", s.P90, 900)
	near("p99", s.P99, 990)
	near("p99.9", s.P999, 999)
	near("max", s.Max, 1000)
	near("min", s.Min, 1)
	near("mean", s.Mean, 500.5)
	// Out of range values are clamped, not lost.
	h.Record(-time.Second)
	h.Record(2 * time.Hour)
	if h.Count() != 1002 {
		t.Fatalf("clamped values lost: %d", h.Count())
	}
	if (&Hist{h: NewHist().h}).Summary() != (Latency{}) {
		t.Fatal("an empty histogram has a summary")
	}
}

func TestRecorderSecondsAndWindows(t *testing.T) {
	start := time.Unix(1000, 0)
	r := newRecorder(start)
	r.record(start.Add(100*time.Millisecond), time.Millisecond)
	r.record(start.Add(900*time.Millisecond), 3*time.Millisecond)
	r.record(start.Add(2500*time.Millisecond), 50*time.Millisecond)
	if got := r.window(0, 1).Count(); got != 2 {
		t.Fatalf("second 0 holds %d", got)
	}
	if got := r.window(0, 3).Count(); got != 3 {
		t.Fatalf("seconds 0-2 hold %d", got)
	}
	if r.second(1) != nil {
		t.Fatal("second 1 is empty")
	}
	ser := latencySeries(r)
	if len(ser) != 2 || ser[0].T != 0.5 || ser[1].T != 2.5 || ser[1].P99 < 49 || ser[1].P99 > 51 {
		t.Fatalf("series %+v", ser)
	}
	if r.summary().Count != 3 {
		t.Fatal("the total lost a value")
	}
}

const metricsPage = `# HELP sluice_coordinator_scaling_ready_jobs Ready jobs.
# TYPE sluice_coordinator_scaling_ready_jobs gauge
sluice_coordinator_scaling_ready_jobs{partition="0"} 120
sluice_coordinator_scaling_ready_jobs{partition="2"} 7
# TYPE sluice_coordinator_scaling_workers gauge
sluice_coordinator_scaling_workers{partition="0"} 4
sluice_coordinator_scaling_workers{partition="1"} 2
sluice_coordinator_scaling_workers{partition="2"} 2
# TYPE sluice_relay_memory_guard_paused gauge
sluice_relay_memory_guard_paused{redis="a"} 1
sluice_relay_memory_guard_paused{redis="b"} 0
# TYPE sluice_worker_queue_wait_seconds histogram
sluice_worker_queue_wait_seconds_bucket{le="0.001"} 10
sluice_worker_queue_wait_seconds_bucket{le="0.005"} 70
sluice_worker_queue_wait_seconds_bucket{le="0.01"} 90
sluice_worker_queue_wait_seconds_bucket{le="+Inf"} 100
sluice_worker_queue_wait_seconds_sum 0.5
sluice_worker_queue_wait_seconds_count 100
# TYPE sluice_worker_rate_limit_throttles histogram
sluice_worker_rate_limit_throttles_bucket{resource="run1-r0",le="0"} 1
sluice_worker_rate_limit_throttles_bucket{resource="run1-r0",le="1"} 10
sluice_worker_rate_limit_throttles_bucket{resource="run1-r0",le="+Inf"} 10
sluice_worker_rate_limit_throttles_sum{resource="run1-r0"} 9
sluice_worker_rate_limit_throttles_count{resource="run1-r0"} 10
sluice_worker_rate_limit_throttles_bucket{resource="other",le="0"} 0
sluice_worker_rate_limit_throttles_bucket{resource="other",le="1"} 0
sluice_worker_rate_limit_throttles_bucket{resource="other",le="+Inf"} 5
sluice_worker_rate_limit_throttles_sum{resource="other"} 50
sluice_worker_rate_limit_throttles_count{resource="other"} 5
`

func TestMetricsParsing(t *testing.T) {
	ms, err := parseMetrics(strings.NewReader(metricsPage))
	if err != nil {
		t.Fatal(err)
	}
	ready := ms.byPartition("sluice_coordinator_scaling_ready_jobs", 3)
	if ready[0] != 120 || !math.IsNaN(ready[1]) || ready[2] != 7 {
		t.Fatalf("ready %v", ready)
	}
	if w := ms.byPartition("sluice_coordinator_scaling_workers", 3); w[0] != 4 || w[1] != 2 {
		t.Fatalf("workers %v", w)
	}
	if ms.sum("sluice_relay_memory_guard_paused") != 1 || ms.sum("absent") != 0 {
		t.Fatal("sums")
	}
	q := ms.histogram("sluice_worker_queue_wait_seconds")
	if q.Count != 100 || q.Under(.005) != 0.7 || !math.IsNaN(q.Under(.002)) {
		t.Fatalf("queue wait %+v", q)
	}
	// The median is in the (1 ms, 5 ms] bucket: 40 of its 60 observations in.
	if p50 := q.Quantile(.5); math.Abs(p50-(0.001+0.004*40.0/60.0)) > 1e-9 {
		t.Fatalf("p50 %g", p50)
	}
	if q.Quantile(.99) != 0.01 { // the +Inf bucket: its lower bound
		t.Fatalf("p99 %g", q.Quantile(.99))
	}
	th := ms.histogramWhere("sluice_worker_rate_limit_throttles", func(l map[string]string) bool { return strings.HasPrefix(l["resource"], "run1") })
	if th.Count != 10 || th.Sum != 9 || th.Under(0) != 0.1 || th.Under(1) != 1 {
		t.Fatalf("throttles %+v", th)
	}
	// Between two scrapes: what was observed in between.
	later, _ := parseMetrics(strings.NewReader(strings.ReplaceAll(strings.ReplaceAll(metricsPage, `le="+Inf"} 100`, `le="+Inf"} 130`), "_count 100", "_count 130")))
	d := later.histogram("sluice_worker_queue_wait_seconds").Sub(q)
	if d.Count != 30 || d.Bounds[len(d.Bounds)-1].Count != 30 || d.Bounds[0].Count != 0 {
		t.Fatalf("delta %+v", d)
	}
	if !math.IsNaN((Buckets{}).Quantile(.5)) {
		t.Fatal("an empty histogram has a quantile")
	}
}

func TestWorkloadEnvelopes(t *testing.T) {
	w := &Workload{Run: "r1", Type: "sleep", Payload: []byte(`{"ms":5}`), Groups: 3,
		ResourceOf: func(seq int) string { return "res" }}
	var got struct {
		ID, Type, Group, Resource string
		Payload                   json.RawMessage
	}
	if err := json.Unmarshal(w.AppendJob(nil, 7, time.Hour), &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "r1-7" || got.Type != "sleep" || got.Group != "r1-g1" || got.Resource != "res" || string(got.Payload) != `{"ms":5}` {
		t.Fatalf("%+v", got)
	}
	// A plain job: no id (the gate's), no retain; no group without groups.
	plain := (&Workload{Run: "r", Type: "noop"}).AppendJob(nil, 4, 0)
	if string(plain) != `{"type":"noop"}` || (&Workload{Run: "r"}).Group(4) != "" {
		t.Fatalf("a plain job without groups: %s", plain)
	}
	var sampled struct{ ID, Retain, Group string }
	if err := json.Unmarshal(w.AppendJob(nil, 8, 40*time.Minute+500*time.Millisecond), &sampled); err != nil {
		t.Fatal(err)
	}
	if sampled.ID != "r1-8" || sampled.Retain != "40m1s" || sampled.Group != "r1-g2" {
		t.Fatalf("a sampled job: %+v", sampled)
	}
	for _, n := range []int{0, 10, 100, 1000} {
		p := PaddedPayload(n)
		if !json.Valid(p) || len(p) != max(n, 10) {
			t.Fatalf("PaddedPayload(%d) = %d bytes, valid %v", n, len(p), json.Valid(p))
		}
	}
}

func TestStreamCountsMultiStatus(t *testing.T) {
	s := newStream(&Load{Batch: 3, Jobs: 7, Work: &Workload{Run: "r"}}, time.Now())
	if from, to := s.seqs(2); from != 6 || to != 7 {
		t.Fatalf("the last request holds [%d, %d)", from, to)
	}
	n, ok := s.count(1, 207, []byte(`{"results":[{"index":0,"status":202},{"index":1,"status":400},{"index":2,"status":202}]}`))
	if n != 2 || !ok(3) || ok(4) || !ok(5) {
		t.Fatalf("207: %d accepted", n)
	}
	if n, _ := s.count(0, 503, nil); n != 0 {
		t.Fatal("a 503 accepted jobs")
	}
	if n, ok := s.count(0, 202, nil); n != 3 || !ok(1) {
		t.Fatal("a 202 accepts every job")
	}
	if got := s.sampled(1); len(got) != 1 || got[0] != 4 {
		t.Fatalf("request 1 samples %v", got)
	}
}

// Which jobs are sampled: one per request, one in SampleEvery, or all; and
// only they carry an id and retain in the bodies.
func TestStreamSamples(t *testing.T) {
	w := &Workload{Run: "r", Type: "noop"}
	count := func(l *Load, requests int) (samples, ids int) {
		s := newStream(l, time.Now())
		s.keep = time.Hour
		for i := range requests {
			got := s.sampled(i)
			samples += len(got)
			body := s.body(nil, i)
			ids += bytes.Count(body, []byte(`"id":`))
			if n := bytes.Count(body, []byte(`"retain":"1h0m0s"`)); n != len(got) {
				t.Fatalf("request %d: %d sampled, %d with retain in %s", i, len(got), n, body)
			}
		}
		return samples, ids
	}
	if n, ids := count(&Load{Batch: 100, Work: w}, 50); n != 50 || ids != 50 {
		t.Fatalf("one per request: %d sampled, %d ids", n, ids)
	}
	if n, ids := count(&Load{Batch: 1, SampleEvery: 100, Work: w}, 10000); n != 100 || ids != 100 {
		t.Fatalf("one in 100 single POSTs: %d sampled, %d ids", n, ids)
	}
	if n, ids := count(&Load{Batch: 20, SampleAll: true, Work: w}, 5); n != 100 || ids != 100 {
		t.Fatalf("all: %d sampled, %d ids", n, ids)
	}
	// One in 100, at a position that moves from block to block.
	s := newStream(&Load{Batch: 1, SampleEvery: 100, Work: w}, time.Now())
	if !s.isSampled(0, 0) || !s.isSampled(101, 101) || !s.isSampled(202, 202) || s.isSampled(100, 100) {
		t.Fatal("the sampled position does not move")
	}
}

// A stream against a bare handler: every request answered and counted,
// single and batched, closed and open loop; the bodies are what the gate
// would get.
func TestStreamAgainstAServer(t *testing.T) {
	var bodies, lines atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies.Add(1)
		if strings.HasSuffix(r.URL.Path, ":batch") {
			lines.Add(int64(bytes.Count(b, []byte("\n"))))
		} else if !json.Valid(b) {
			w.WriteHeader(400)
			return
		}
		w.WriteHeader(202)
	}))
	defer srv.Close()
	w := &Workload{Run: "t", Type: "noop", Groups: 2}
	for _, l := range []*Load{
		{Name: "closed", Gate: srv.URL, Topic: "jobs", Conns: 4, Jobs: 95, Batch: 10, Work: w},
		{Name: "open", Gate: srv.URL, Topic: "jobs", Conns: 2, Rate: 400, Duration: 100 * time.Millisecond, Batch: 1, Work: w},
	} {
		bodies.Store(0)
		s := newStream(l, time.Now())
		if err := s.run(context.Background()); err != nil {
			t.Fatal(err)
		}
		r := s.result(s.start)
		switch l.Name {
		case "closed":
			if r.Requests != 10 || r.JobsAccepted != 95 || lines.Load() != 95 || r.Status["202"] != 10 || len(s.samples) != 10 {
				t.Fatalf("closed: %+v, %d lines", r, lines.Load())
			}
		case "open":
			if r.Requests != 40 || r.JobsAccepted != 40 || bodies.Load() != 40 || r.Mode != "open" {
				t.Fatalf("open: %+v", r)
			}
		}
		if r.Enqueue.Count != int64(r.Requests) || r.Enqueue.P50 <= 0 {
			t.Fatalf("latencies: %+v", r.Enqueue)
		}
	}
}

func TestParseRedisBenchmark(t *testing.T) {
	out := "EVALSHA abc 3 {t}a {t}b {t}c v: rps=0.0 (overall: nan) avg_msec=nan (overall: nan)\r" +
		"EVALSHA abc 3 {t}a {t}b {t}c v: 212765.95 requests per second, p50=0.919 msec\n"
	if v, err := parseRedisBenchmark(out); err != nil || v != 212765.95 {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := parseRedisBenchmark("Could not connect"); err == nil {
		t.Fatal("no rate parsed as one")
	}
}

func TestReportVerdictsJSONAndHTML(t *testing.T) {
	rep := &Report{Scenario: "throughput", Size: "scaled", Machine: ThisMachine()}
	if rep.Pass() {
		t.Fatal("a report without verdicts passed")
	}
	rep.verdict("a", "x", "y", true, "")
	rep.verdict("b & <c>", "x", "y", false, "seed")
	if rep.Pass() {
		t.Fatal("a failed verdict passed")
	}
	rec := newRecorder(time.Now())
	rec.record(time.Now(), 2*time.Millisecond)
	ph := PhaseResult{Name: "single", Accepted: 10, AllDone: true, DoneSeconds: 1, EndToEndRate: 10,
		EnqueueToStart: Buckets{Count: 1, Bounds: []Bucket{{LE: 0.005, Count: 1}, {LE: math.Inf(1), Count: 1}}},
		Streams:        []StreamResult{{Name: "single", Mode: "closed", Batch: 1, JobsAccepted: 10, Enqueue: rec.summary(), Series: latencySeries(rec)}},
		Series: []Sample{
			{T: 0, Accepted: []int{0}, Ready: []float64{math.NaN(), 1}, Workers: []float64{2, 2}},
			{T: 1, Accepted: []int{10}, Done: 10, Ready: []float64{3, 0}, Workers: []float64{2, 4}, RedisMemory: 0.5},
		}}
	rep.Phases = append(rep.Phases, ph)
	batch := PhaseResult{Name: "batch", Accepted: 100, AllDone: true, DoneSeconds: 1, EndToEndRate: 100, CPU: &CPUUse{RedisMicrosPerJob: 25}}
	rep.Phases = append(rep.Phases, batch)
	rep.AddYardsticks(Yardsticks{BareHTTP: 20, KfakeProduce: 100, RedisEvalsha: 50, JobFloor: &JobFloor{JobsPerSecond: 40, RedisMicrosPerJob: 20000},
		ListFloor: &JobFloor{JobsPerSecond: 400, RedisMicrosPerJob: 10}})
	// 10 jobs/s at 20 ms of Redis per job would keep a fifth of a Redis core busy.
	if rep.Ratios["single_jobs_per_bare_http_request"] != 0.5 || rep.Ratios["single_of_redis_job_floor_at_one_core"] != 0.2 ||
		rep.Ratios["batch_redis_cpu_per_job_over_list_floor"] != 2.5 || rep.Ratios["batch_of_redis_list_floor_at_one_core"] != 0.001 {
		t.Fatalf("ratios %v", rep.Ratios)
	}
	// The batch phase's Redis CPU per job against the target: 2.5x the
	// list floor fails it.
	if v := rep.Verdicts[len(rep.Verdicts)-1]; v.Name != "Redis CPU per job in the batch phase" || v.Pass {
		t.Fatalf("verdict %+v", v)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("the JSON report does not read back: %v", err)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "FAIL  b & <c>") || !strings.Contains(text.String(), "PASS  a") ||
		!strings.Contains(text.String(), "at most 50 jobs/s with Redis at one whole core") {
		t.Fatalf("text report:\n%s", text.String())
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "<c>") || strings.Contains(page.String(), "http://") && strings.Contains(page.String(), "<script") {
		t.Fatal("unescaped text or a script in the page")
	}
	svgs := regexp.MustCompile(`(?s)<svg.*?</svg>`).FindAllString(page.String(), -1)
	if len(svgs) != 5 {
		t.Fatalf("%d charts, want 5", len(svgs))
	}
	for _, svg := range svgs {
		dec := xml.NewDecoder(strings.NewReader(svg))
		for {
			_, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("a chart is not well-formed: %v\n%s", err, svg)
			}
		}
	}
}

// An open-loop phase's end-to-end rate is the rate it was asked for: the
// yardsticks give it no ratios.
func TestYardsticksSkipOpenLoopPhases(t *testing.T) {
	rep := &Report{Scenario: "throughput"}
	for _, ph := range []PhaseResult{
		{Name: "single", EndToEndRate: 10, Streams: []StreamResult{{Mode: "closed"}}},
		{Name: "light", EndToEndRate: 1, Streams: []StreamResult{{Mode: "open"}}},
		{Name: "half", EndToEndRate: 5, Streams: []StreamResult{{Mode: "open"}}},
	} {
		rep.Phases = append(rep.Phases, ph)
	}
	rep.AddYardsticks(Yardsticks{BareHTTP: 20})
	if len(rep.Ratios) != 1 || rep.Ratios["single_jobs_per_bare_http_request"] != 0.5 {
		t.Fatalf("ratios %v, want the single phase's only", rep.Ratios)
	}
}

func TestBarAndThousands(t *testing.T) {
	if bar(0.5, 10) != "[=====>    ]" || bar(1, 4) != "[====]" || bar(-1, 3) != "[>  ]" {
		t.Fatalf("%q %q %q", bar(0.5, 10), bar(1, 4), bar(-1, 3))
	}
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12000: "-12,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q", n, got)
		}
	}
}

// parseMetrics reads a /metrics page as the runner's scrapes do.
func parseMetrics(r io.Reader) (metrics, error) {
	fs, err := ops.ParseMetrics(r)
	return metrics(fs), err
}
