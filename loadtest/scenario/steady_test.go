package scenario

import (
	"context"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// A steady phase's row takes every process but the generator and Consul
// into its total, and the verdicts compare sluice with the rival at 10%.
func TestSteadyRowsAndVerdicts(t *testing.T) {
	ph := PhaseResult{Accepted: 1000, CPU: &CPUUse{Parts: []PartCPU{
		{Name: "gate", MicrosPerJob: 40, CoresBusy: .04}, {Name: "worker", MicrosPerJob: 30, CoresBusy: .03},
		{Name: "consul", MicrosPerJob: 5}, {Name: "redis", MicrosPerJob: 20, CoresBusy: .02}, {Name: "generator", MicrosPerJob: 50},
	}}}
	row := sluiceRow(ph, .1, 2000)
	if row.Total != 90 || row.CPU["consul"] != 5 || row.CPU["generator"] != 0 {
		t.Fatalf("row %+v: want a total of 90 µs (gate, worker, redis), consul listed apart, no generator", row)
	}
	rep := &Report{Steady: []SteadyRow{row, {System: "asynq", Share: .1, Total: 100}}}
	rep.steadyVerdicts(rivalNamed("asynq v0.26.0"))
	if got := rep.Ratios["steady_10_cpu_per_job_over_rival"]; got != 0.9 {
		t.Fatalf("ratio %v, want 0.9", got)
	}
	var cpu *Verdict
	for i, v := range rep.Verdicts {
		if strings.HasPrefix(v.Name, "CPU per job at 10%") {
			cpu = &rep.Verdicts[i]
		}
	}
	if cpu == nil || !cpu.Pass {
		t.Fatalf("verdicts %+v: want the CPU verdict passed at 0.9x", rep.Verdicts)
	}
	if tab := SteadyTable(rep.Steady); !strings.Contains(tab, "| 10% | sluice | 2,000 | **90.0**") {
		t.Fatalf("table:\n%s", tab)
	}
}

func TestSteadySVGIsWellFormed(t *testing.T) {
	rows := []SteadyRow{
		{System: "sluice", Share: .01, Total: 300, StartP50: 2, StartP99: 8, DoneP50: 3, DoneP99: 10},
		{System: "sluice", Share: .5, Total: 100, StartP50: 3, StartP99: 20, DoneP50: 4, DoneP99: 30},
		{System: "asynq", Share: .01, Total: 200, StartP50: 500, StartP99: 990, DoneP50: 500, DoneP99: 990},
		{System: "asynq", Share: .5, Total: 150, StartP50: 50, StartP99: 400, DoneP50: 50, DoneP99: 400},
	}
	var b strings.Builder
	if err := WriteSteadySVG(&b, rows, "t <&>"); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(b.String()))
	paths := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
	}
	if paths != 10 {
		t.Fatalf("%d lines drawn, want 10 (2 systems x CPU and 4 latencies)", paths)
	}
}

type rivalNamed string

func (r rivalNamed) Name() string                      { return string(r) }
func (rivalNamed) Start(context.Context, string) error { return nil }
func (rivalNamed) OpenLoop(context.Context, float64, time.Duration, []byte) (RivalLoad, error) {
	return RivalLoad{}, nil
}
func (rivalNamed) Stop() {}
