package scenario

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// fakeRival runs its jobs by counting them.
type fakeRival struct {
	started, stopped bool
	ran              int
	fail             error
}

func (f *fakeRival) Name() string                        { return "fake v1" }
func (f *fakeRival) Start(context.Context, string) error { f.started = true; return nil }
func (f *fakeRival) Stop()                               { f.stopped = true }
func (f *fakeRival) Run(_ context.Context, jobs, conns int, payload []byte) (time.Time, error) {
	if f.fail != nil {
		return time.Time{}, f.fail
	}
	for range jobs {
		f.ran++
	}
	return time.Now(), nil
}

// The rival's phase: started, timed, its CPU read (its process's line
// named after it), stopped; a failure is the phase's error.
func TestRunRival(t *testing.T) {
	srv := testenv.Redis(t)
	r, err := NewRunner(Endpoints{Redis: srv.Addr(), Stage: "t", Partitions: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetProcesses([]Process{}) // no stack processes known: the parts are Redis and this one
	f := &fakeRival{}
	ph, err := r.runRival(context.Background(), f, CompareConfig{Jobs: 1000, Conns: 4, DoneTimeout: time.Minute}, nil)
	if err != nil || !f.started || !f.stopped || f.ran != 1000 {
		t.Fatalf("%v; rival %+v", err, f)
	}
	if ph.Name != "fake v1" || ph.Accepted != 1000 || !ph.AllDone || ph.EndToEndRate <= 0 || ph.CPU == nil {
		t.Fatalf("phase %+v", ph)
	}
	f = &fakeRival{fail: errors.New("boom")}
	if ph, err := r.runRival(context.Background(), f, CompareConfig{Jobs: 10, DoneTimeout: time.Minute}, nil); err == nil || ph.AllDone || !f.stopped {
		t.Fatalf("a failed rival: %+v %v", ph, err)
	}
}

// The targets against the rival: single ≥ 2x, batched ≥ 10x.
func TestCompareVerdicts(t *testing.T) {
	rival := PhaseResult{Name: "fake v1", AllDone: true, EndToEndRate: 1000}
	single := PhaseResult{Name: "single", AllDone: true, EndToEndRate: 2500, CPU: &CPUUse{RedisMicrosPerJob: 20, TotalMicrosPerJob: 100}}
	batch := PhaseResult{Name: "batch", AllDone: true, EndToEndRate: 9000}
	rep := &Report{}
	rep.compareVerdicts("fake v1", rival, single, batch, 100)
	if rep.Ratios["single_over_rival"] != 2.5 || rep.Ratios["batch_over_rival"] != 9 || rep.Numbers["single_redis_cpu_us_per_job"] != 20 {
		t.Fatalf("ratios %v, numbers %v", rep.Ratios, rep.Numbers)
	}
	if len(rep.Verdicts) != 2 || !rep.Verdicts[0].Pass || rep.Verdicts[1].Pass {
		t.Fatalf("verdicts %+v", rep.Verdicts)
	}
	// A phase that did not finish passes nothing.
	batch.EndToEndRate, batch.AllDone = 20000, false
	rep = &Report{}
	rep.compareVerdicts("fake v1", rival, single, batch, 100)
	if rep.Verdicts[1].Pass || rep.Ratios["batch_over_rival"] != 0 {
		t.Fatalf("an unfinished phase: %+v", rep.Verdicts[1])
	}
}
