package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The program end to end, as `go run ./loadtest --start-dev throughput`
// runs it, in short: it starts `sluice dev` on free ports, runs the four
// phases of one second each, waits for every job's completion, and writes
// the reports. The targets' verdicts are not asserted (this is a smoke
// test on a shared machine, under the race detector); that every phase's
// jobs were accepted, completed and timed is.
func TestThroughputScenarioSmoke(t *testing.T) {
	bin := testenv.BuildSluice(t)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--start-dev", "--sluice-bin", bin, "--duration", "1s", "--conns", "8",
		"--redis-maxmemory", "512mb", "--out", out, "--progress", "off", "throughput"}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	jsons, _ := filepath.Glob(filepath.Join(out, "throughput-*.json"))
	htmls, _ := filepath.Glob(filepath.Join(out, "throughput-*.html"))
	if len(jsons) != 1 || len(htmls) != 1 {
		t.Fatalf("reports written: %v %v", jsons, htmls)
	}
	b, err := os.ReadFile(jsons[0])
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Phases []struct {
			Name     string `json:"name"`
			Accepted int    `json:"jobs_accepted"`
			AllDone  bool   `json:"all_done"`
			Rate     float64
			E2E      float64 `json:"end_to_end_jobs_per_second"`
			Streams  []struct {
				Rate          float64               `json:"rate"`
				Enqueue       struct{ Count int64 } `json:"enqueue"`
				EnqueueToDone struct {
					Count int64
					P50   float64 `json:"p50_ms"`
				} `json:"enqueue_to_done"`
				Missing int `json:"sampled_missing"`
			} `json:"streams"`
			Series []struct {
				Workers []float64 `json:"workers"`
			} `json:"series"`
			CPU struct {
				Pipeline float64 `json:"pipeline_cpu_seconds"`
				Parts    []struct {
					Name    string
					Pid     int
					Seconds float64 `json:"cpu_seconds"`
					Micros  float64 `json:"cpu_us_per_job"`
				} `json:"parts"`
				Errors []string
			} `json:"cpu"`
		} `json:"phases"`
		Processes []struct {
			Name string
			Pid  int
		} `json:"processes"`
		Verdicts []struct {
			Name string
			Pass bool
		} `json:"verdicts"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Phases) != 4 || len(rep.Verdicts) != 8 {
		t.Fatalf("%d phases, %d verdicts", len(rep.Phases), len(rep.Verdicts))
	}
	// The coordinator's gauges are read: every partition's (their values
	// come with its scaling cycles of 5 s; -1 is a gauge not found).
	allWorkers := false
	for _, ph := range rep.Phases {
		s := ph.Streams[0]
		if ph.Accepted == 0 || !ph.AllDone || ph.E2E <= 0 || s.Enqueue.Count == 0 || s.EnqueueToDone.Count == 0 || s.Missing != 0 || s.EnqueueToDone.P50 <= 0 {
			t.Errorf("phase %s: %+v", ph.Name, ph)
		}
		for _, smp := range ph.Series {
			all := len(smp.Workers) == 8
			for _, w := range smp.Workers {
				all = all && w >= 0
			}
			allWorkers = allWorkers || all
		}
	}
	if !allWorkers {
		t.Error("no sample has every partition's workers gauge from the coordinator")
	}
	// --split-processes (the loadtest's default): Kafka and each part in a
	// process of its own, and each phase's CPU per process, each pid once.
	if len(rep.Processes) != 7 {
		t.Errorf("processes: %+v", rep.Processes)
	}
	for _, ph := range rep.Phases {
		var names []string
		pids := map[int]bool{}
		sluice := 0.0
		for _, p := range ph.CPU.Parts {
			names = append(names, p.Name)
			if p.Pid != 0 && pids[p.Pid] {
				t.Errorf("phase %s: pid %d twice", ph.Name, p.Pid)
			}
			pids[p.Pid] = true
			if p.Name != "consul" && p.Name != "redis" && p.Name != "generator" {
				sluice += p.Seconds
			}
		}
		if want := "gate kafka relay worker coordinator dev consul redis generator"; strings.Join(names, " ") != want || len(ph.CPU.Errors) > 0 {
			t.Errorf("phase %s: parts %v, want %s; errors %v", ph.Name, names, want, ph.CPU.Errors)
		}
		if math.Abs(sluice-ph.CPU.Pipeline) > 0.002 {
			t.Errorf("phase %s: the sluice processes add up to %v s, the pipeline's is %v s", ph.Name, sluice, ph.CPU.Pipeline)
		}
		// 100-job POSTs for a second: every part on the job's path
		// works for more than a clock tick (10 ms).
		if ph.Name == "batch" {
			for _, p := range ph.CPU.Parts[:4] {
				if p.Seconds <= 0 || p.Micros <= 0 {
					t.Errorf("phase batch: %s used no CPU: %+v", p.Name, p)
				}
			}
		}
	}
	// The open-loop phases run at a tenth and at half of the single
	// phase's end-to-end rate (at least 100 requests/s).
	for i, div := range map[int]float64{2: 10, 3: 2} {
		if ph, want := rep.Phases[i], math.Max(math.Round(rep.Phases[0].E2E/div), 100); ph.Streams[0].Rate != want {
			t.Errorf("phase %s ran at %v requests/s, want %v", ph.Name, ph.Streams[0].Rate, want)
		}
	}
	for _, v := range rep.Verdicts {
		if strings.Contains(v.Name, "every accepted job done") && !v.Pass {
			t.Errorf("verdict %q failed", v.Name)
		}
	}
}
