package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The comparison end to end, in short: sluice dev on free loopback ports,
// asynq on its Redis, 2,000 jobs per phase. The targets' verdicts are not
// asserted (a smoke test on a shared machine); that every phase ran every
// job, was timed and has its CPU per job, and that the ratios are there, is.
func TestCompareSmoke(t *testing.T) {
	bin := testenv.BuildSluice(t)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--sluice-bin", bin, "--jobs", "2000", "--batch-conns", "4",
		"--redis-maxmemory", "512mb", "--split-processes=false", "--out", out}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	jsons, _ := filepath.Glob(filepath.Join(out, "*.json"))
	if len(jsons) != 1 {
		t.Fatalf("reports: %v", jsons)
	}
	b, err := os.ReadFile(jsons[0])
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Phases []struct {
			Name     string
			Accepted int     `json:"jobs_accepted"`
			AllDone  bool    `json:"all_done"`
			E2E      float64 `json:"end_to_end_jobs_per_second"`
			CPU      struct {
				Redis float64 `json:"redis_cpu_us_per_job"`
			} `json:"cpu"`
			Streams []struct {
				Missing int `json:"sampled_missing"`
				Sampled int `json:"sampled"`
			} `json:"streams"`
		} `json:"phases"`
		Ratios   map[string]float64      `json:"ratios"`
		Verdicts []struct{ Name string } `json:"verdicts"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Phases) != 3 || rep.Phases[0].Name != "asynq v0.26.0" || len(rep.Verdicts) != 2 {
		t.Fatalf("phases %+v, verdicts %+v", rep.Phases, rep.Verdicts)
	}
	for _, ph := range rep.Phases {
		if ph.Accepted != 2000 || !ph.AllDone || ph.E2E <= 0 || ph.CPU.Redis <= 0 {
			t.Errorf("phase %+v", ph)
		}
		for _, s := range ph.Streams {
			if s.Sampled == 0 || s.Missing != 0 {
				t.Errorf("phase %s: %d sampled, %d missing", ph.Name, s.Sampled, s.Missing)
			}
		}
	}
	if rep.Ratios["single_over_rival"] <= 0 || rep.Ratios["batch_over_rival"] <= 0 {
		t.Errorf("ratios %v", rep.Ratios)
	}
}
