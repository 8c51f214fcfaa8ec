package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// scenario is a chaos run: load at a rate, poison records, and steps of
// faults (a step's faults run at once) while the load flows.
type scenario struct {
	name   string
	rate   float64 // jobs per second
	total  int     // jobs sent at least (more while faults last)
	poison int
	steps  [][]fault
	drain  time.Duration // how long settling may take after the load
}

// TestChaosShort is the short chaos run of `go test ./...`: a few thousand
// jobs through the whole topology while the Consul agent restarts, then the
// active relay, the leader coordinator and a worker are killed with SIGKILL
// at once while Kafka's partition leaders move, then a broker leaves, then
// the relay's rate is paused and resumed, then Redis stops and restarts,
// then Redis is killed with SIGKILL and restarts.
func TestChaosShort(t *testing.T) {
	runScenario(t, scenario{
		name: "short", rate: 150, total: 3000, poison: 12, drain: 60 * time.Second,
		steps: [][]fault{
			{faultConsul},
			{faultRelay, faultCoordinator, faultWorker, faultLeaders},
			{faultBroker},
			{faultPause},
			{faultRedis},
			{faultRedisKill},
		},
	})
}

// TestRegressionRedisRestartRunsNoKeyTwice: Redis stopped (SIGTERM, AOF
// on) for 2 s and restarted while handlers' answers are on their way (the
// ledger holds them until Redis is down). The worker drops the acks that
// fail meanwhile ("acks failed; their leases will expire and the jobs run
// again"), so jobs whose handler had succeeded run again once their leases
// expire: a job with an idempotency key executed twice. Fixed: the worker
// retries acks and idempotency records while Redis is away.
func TestRegressionRedisRestartRunsNoKeyTwice(t *testing.T) {
	runScenario(t, scenario{
		name: "redis", rate: 150, total: 1500, poison: 6, drain: 60 * time.Second,
		steps: [][]fault{{faultRedisMidAck}},
	})
}

// TestRegressionWorkerStartedWhileRedisIsDown: a worker process started
// while Redis does not answer never works, even once Redis is back: Run
// returns the error of loading the scripts and closes its Redis pool, but
// the process does not exit; it serves /healthz 200 and /readyz 503
// ("redis: client is closed") for ever and consumes nothing, and the error
// is not logged. Fixed: the worker waits for Redis at start, and says so.
func TestRegressionWorkerStartedWhileRedisIsDown(t *testing.T) {
	b := newBed(t)
	w := b.workers[0]
	b.redis.Stop()
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	// Redis comes back once the worker has tried it and failed (the Redis
	// client logs a failed dial; a worker that logs otherwise gets 10 s).
	testenv.WaitFor(t, 10*time.Second, "the worker to serve /healthz", func() bool { return httpOK("http://" + w.listen + "/healthz") })
	waitUntil(10*time.Second, "the worker to fail to reach Redis", func() bool { return strings.Contains(b.tail(w.name, 8000), "failed to dial") })
	b.redis.Restart()
	if err := w.waitReady(); err != nil {
		t.Fatalf("a worker started while Redis was down: %v (after Redis came back; /healthz answers 200)", err)
	}
}

// TestRegressionKeyRecordedOnceRedisAnswers: Redis stopped (SIGTERM) for
// 2 s while handlers' answers are on their way, as in
// TestRegressionRedisRestartRunsNoKeyTwice, and the time from Redis
// answering again until each such run's idempotency key says done:<id>.
// A worker killed in that time runs the key again (the full run's "kill -9
// a worker + stop Redis" step once did, 1.6 s after Redis was back): it
// must be within recordGrace. It runs with the full suite (make chaos).
func TestRegressionKeyRecordedOnceRedisAnswers(t *testing.T) {
	if os.Getenv("SLUICE_CHAOS_FULL") != "1" {
		t.Skip("runs with SLUICE_CHAOS_FULL=1 (make chaos)")
	}
	runScenario(t, scenario{
		name: "record", rate: 150, total: 1500, poison: 6, drain: 60 * time.Second,
		steps: [][]fault{{faultRedisMidRecord}},
	})
}

// TestChaosFull is `make chaos`: 300,000 jobs at 3,000 jobs/s, every fault
// one at a time, then mixed. It runs only with SLUICE_CHAOS_FULL=1 (it
// takes minutes).
func TestChaosFull(t *testing.T) {
	if os.Getenv("SLUICE_CHAOS_FULL") != "1" {
		t.Skip("the full chaos suite runs with SLUICE_CHAOS_FULL=1 (make chaos)")
	}
	runScenario(t, scenario{
		name: "full", rate: 3000, total: 300000, poison: 60, drain: 3 * time.Minute,
		// The Consul restart comes first: a dev agent loses its state, so
		// after a relay failover its new lock's token would be older than
		// the fence (docs/redis-layout.md).
		steps: [][]fault{
			{faultConsul},
			{faultRelay},
			{faultWorker},
			{faultCoordinator},
			{faultRedis},
			{faultRedisKill},
			{faultLeaders},
			{faultPause},
			{faultRelay, faultCoordinator, faultWorker, faultLeaders},
			{faultWorker, faultRedis, faultLeaders},
			{faultWorker, faultRedisKill},
			{faultWorker, faultLeaders, faultPause},
			{faultBroker},
			{faultGate},
			{faultRelay, faultWorker, faultPause},
		},
	})
}

func runScenario(t *testing.T, sc scenario) {
	began := time.Now()
	b := newBed(t)
	b.startAll()
	t.Logf("topology up in %s", time.Since(began).Round(100*time.Millisecond))
	periodicStarted, err := startPeriodic(b)
	if err != nil {
		t.Fatalf("setting the periodic schedule: %v", err)
	}

	run := fmt.Sprintf("%s%d", sc.name, time.Now().UnixNano()%1e6)
	l := newLoader(run, b.gates, sc.rate, sc.total)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	completions := sampleCompleted(ctx, b)
	more := make(chan struct{})
	loaded := make(chan struct{})
	go func() { defer close(loaded); l.runUntil(ctx, more) }()

	poison, err := producePoison(b.kafka.Brokers(), sc.poison)
	if err != nil {
		t.Fatalf("producing poison: %v", err)
	}
	// Faults start once jobs flow end to end.
	if err := b.waitFlow("the first jobs to complete"); err != nil {
		t.Fatal(err)
	}
	var outcomes []outcome
	for _, step := range sc.steps {
		o := runStep(b, l, step...)
		outcomes = append(outcomes, o)
		t.Logf("step %q: %s, %v", o.Step, o.End.Sub(o.Start).Round(100*time.Millisecond), o.Measured)
		if o.Err != nil {
			t.Errorf("step %q: %v", o.Step, o.Err)
			break
		}
	}
	close(more)
	<-loaded
	loadEnd := time.Now()
	periodicStopped, err := stopPeriodic(b)
	if err != nil {
		t.Errorf("deleting the periodic schedule: %v", err)
	}

	v := verdictOf(t, b, l, poison, sc.drain)
	took := loadEnd.Sub(l.beganAt())
	t.Logf("load: %d jobs accepted in %s (%.0f jobs/s, %.0f asked); settled %s after the load; %d handler calls; jobs completed at %.0f/s at best over 5 s",
		v.Accepted, took.Round(time.Second), float64(v.Accepted)/took.Seconds(), sc.rate, v.Settled.Round(100*time.Millisecond), b.ledger.count(),
		completions.peak(5*time.Second))
	report := v.table(outcomes)
	t.Log("\n" + report)
	if path := os.Getenv("SLUICE_CHAOS_REPORT"); path != "" {
		os.WriteFile(path, []byte(report), 0o644)
	}
	for _, p := range v.failures() {
		t.Error(p)
	}
	periodicFailed, slots := periodicFailures(b, periodicStarted, periodicStopped)
	t.Logf("periodic: %d slots of %s from the first run to the last", slots, periodicName)
	for _, p := range periodicFailed {
		t.Error(p)
	}
}

// completions is the funnel's completed counter, read once a second.
type completions struct {
	mu sync.Mutex
	at []time.Time
	n  []int
}

// sampleCompleted reads the completed counter every second until ctx ends.
func sampleCompleted(ctx context.Context, b *bed) *completions {
	c := &completions{}
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if n := b.funnel(queue.StageCompleted); n >= 0 {
				c.mu.Lock()
				c.at, c.n = append(c.at, time.Now()), append(c.n, n)
				c.mu.Unlock()
			}
		}
	}()
	return c
}

// peak is the highest completion rate over any window of about d.
func (c *completions) peak(d time.Duration) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	best := 0.0
	for i, k := 0, 0; i < len(c.at); i++ {
		for k < i && c.at[i].Sub(c.at[k+1]) >= d {
			k++
		}
		if span := c.at[i].Sub(c.at[k]); span >= d {
			best = max(best, float64(c.n[i]-c.n[k])/span.Seconds())
		}
	}
	return best
}

// verdict is what the run proved.
type verdict struct {
	Accepted, AcceptedWork, AcceptedFail int
	Executed                             int           // accepted work jobs whose key ran to a 2xx
	Twice                                int           // keys run to a 2xx twice, unexplained
	TwiceAfterKill                       int           // keys run again because a worker was killed before it could record the run
	TwiceAfterAnswer                     int           // ... of which a kill came after the handler answered (not mid-run)
	GraceUsed                            time.Duration // the most of recordGrace gone by at such a kill
	Lost                                 []string
	Dead, DeadExpected                   int
	DeadUnexpected                       []string // work jobs dead
	DeadNoError                          []string // failing jobs dead without their last error
	Poison, PoisonDLQ                    int
	DLQReasons                           map[string]int
	Funnel                               *funnel.Report
	FunnelProblems                       []string
	Settled                              time.Duration
	// CanaryFired and CanaryResolved count the canary webhook's calls;
	// CanaryLast is the last one's status ("" when none came).
	CanaryFired, CanaryResolved int
	CanaryLast                  string
}

// records reads the record (job:<id>) of each job: its state, last_error
// and attempts, empty for a job without one (a plain job that succeeded
// leaves none).
func records(b *bed, jobs []jobSpec) (map[string]record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make(map[string]record, len(jobs))
	for start := 0; start < len(jobs); start += 1000 {
		pipe := b.redis.Client().Pipeline()
		part := jobs[start:min(start+1000, len(jobs))]
		cmds := make([]*redis.SliceCmd, len(part))
		for i, j := range part {
			cmds[i] = pipe.HMGet(ctx, b.recordKey(j), "state", "last_error", "attempts")
		}
		if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
			return nil, err
		}
		for i, j := range part {
			f := cmds[i].Val()
			str := func(k int) string { s, _ := f[k].(string); return s }
			out[j.ID] = record{State: str(0), LastError: str(1), Attempts: str(2)}
		}
	}
	return out, nil
}

// record is the part of a job's record the verdict reads.
type record struct{ State, LastError, Attempts string }

func verdictOf(t *testing.T, b *bed, l *loader, poison int, drain time.Duration) verdict {
	t.Helper()
	l.mu.Lock()
	jobs := make([]jobSpec, 0, len(l.accepted))
	for _, j := range l.accepted {
		jobs = append(jobs, j)
	}
	l.mu.Unlock()
	sort.Slice(jobs, func(i, k int) bool { return jobs[i].N < jobs[k].N })
	v := verdict{Accepted: len(jobs), Poison: poison, DLQReasons: map[string]int{}}

	// Settled: every key of a job that should succeed has a 2xx run in
	// the ledger, by a job that carries it (the other of a pair of twins
	// is done without running); every always-failing job's record says
	// dead; and every job relayed has ended (the funnel's completed and
	// dead add up to its relayed, at least the accepted jobs), so a job
	// whose worker was killed before its ack has run again, or been
	// skipped by its key, before the verdict counts runs. The ledger is
	// read as it grows, the records of the failing jobs not yet dead.
	carriers := map[string]map[string]bool{} // key -> the ids of the accepted work jobs with it
	var dying []jobSpec                      // failing jobs not dead yet
	for _, j := range jobs {
		if j.Fail {
			dying = append(dying, j)
			continue
		}
		if carriers[j.Key] == nil {
			carriers[j.Key] = map[string]bool{}
		}
		carriers[j.Key][j.ID] = true
	}
	okRuns := map[string][]execution{}
	unrun := map[string]bool{}
	for key := range carriers {
		unrun[key] = true
	}
	read := 0
	start := time.Now()
	waitUntil(drain, "every accepted job to settle", func() bool {
		news := b.ledger.since(read)
		read += len(news)
		for _, e := range news {
			if e.OK && !isPeriodic(e) { // periodic_test.go judges those
				okRuns[e.Key] = append(okRuns[e.Key], e)
				if carriers[e.Key][e.JobID] {
					delete(unrun, e.Key)
				}
			}
		}
		if len(unrun) > 0 {
			return false
		}
		recs, err := records(b, dying)
		if err != nil {
			return false
		}
		rest := dying[:0]
		for _, j := range dying {
			if recs[j.ID].State != "dead" {
				rest = append(rest, j)
			}
		}
		dying = rest
		if len(dying) > 0 {
			return false
		}
		relayed, ended := b.funnel(queue.StageRelayed), b.funnel(queue.StageCompleted)+b.funnel(queue.StageDead)
		return relayed >= len(jobs) && ended == relayed
	})
	v.Settled = time.Since(start)
	for _, e := range b.ledger.since(read) {
		if e.OK && !isPeriodic(e) {
			okRuns[e.Key] = append(okRuns[e.Key], e)
		}
	}

	// Keys run to a 2xx twice: each earlier run must have lost its
	// record to a kill -9 of its worker.
	for key, runs := range okRuns {
		if len(runs) < 2 {
			continue
		}
		if excused, used := rerunAfterKill(b, runs); excused {
			v.TwiceAfterKill++
			if used > 0 {
				v.TwiceAfterAnswer++
				v.GraceUsed = max(v.GraceUsed, used)
			}
		} else {
			v.Twice++
			if v.Twice <= 5 {
				t.Logf("key %s ran to a 2xx %d times: %s", key, len(runs), describeRuns(b, runs))
			}
		}
	}

	// Every job's record: a failing job's says dead with its last error,
	// and no job that should succeed has one that says dead.
	recs, err := records(b, jobs)
	if err != nil {
		t.Errorf("reading the jobs' records: %v", err)
	}
	for _, j := range jobs {
		rec := recs[j.ID]
		if j.Fail {
			v.AcceptedFail++
			switch {
			case rec.State == "dead" && rec.LastError != "":
				v.Dead++
				v.DeadExpected++
			case rec.State == "dead":
				v.Dead++
				v.DeadNoError = append(v.DeadNoError, j.ID)
			default:
				v.Lost = append(v.Lost, fmt.Sprintf("%s (always failing, state %q)", j.ID, rec.State))
			}
			continue
		}
		v.AcceptedWork++
		ran := false
		for _, r := range okRuns[j.Key] {
			ran = ran || carriers[j.Key][r.JobID]
		}
		switch {
		case rec.State == "dead":
			v.Dead++
			v.DeadUnexpected = append(v.DeadUnexpected, j.ID)
		case ran:
			v.Executed++
		default:
			v.Lost = append(v.Lost, fmt.Sprintf("%s (key %s: no 2xx run by a job with it, %d 2xx runs in all; record state %q)", j.ID, j.Key, len(okRuns[j.Key]), rec.State))
		}
	}

	// Poison: every record in the DLQ, once per source.
	if _, err := waitUntil(20*time.Second, "the poison in the DLQ", func() bool {
		src, err := dlqSources(b.kafka.Brokers())
		if err != nil {
			return false
		}
		v.PoisonDLQ = len(src)
		clear(v.DLQReasons)
		for _, r := range src {
			reason, _, _ := strings.Cut(r, ":")
			v.DLQReasons[reason]++
		}
		return v.PoisonDLQ >= poison
	}); err != nil {
		t.Logf("DLQ: %v", err)
	}

	// The funnel, from `sluice stats -o json`: it balances once the
	// relay's lag is read as 0 and every job has settled.
	var last []byte
	waitUntil(20*time.Second, "sluice stats to find the funnel balanced", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := b.stats(ctx)
		if err != nil {
			v.FunnelProblems = []string{err.Error()}
			return false
		}
		last = out
		var r funnel.Report
		if err := json.Unmarshal(out, &r); err != nil {
			v.FunnelProblems = []string{"sluice stats -o json: " + err.Error()}
			return false
		}
		v.Funnel, v.FunnelProblems = &r, r.Problems
		return len(r.Problems) == 0
	})
	if len(v.FunnelProblems) > 0 {
		t.Logf("sluice stats -o json:\n%s", last)
	}
	// The canary alerts: the funnel check above already wants every path
	// fresh; an alert that fired must have been resolved too, whichever
	// coordinator led by then. The monitor judges 4 times an interval, so
	// its resolved call may come just after the funnel's last read.
	var alerts []canaryAlert // read by waitUntil, which calls its condition at least once
	waitUntil(5*time.Second, "the canary alerts to be resolved", func() bool {
		alerts = b.ledger.canaryAlerts()
		return len(alerts) == 0 || alerts[len(alerts)-1].Status != "firing"
	})
	for _, a := range alerts {
		switch a.Status {
		case "firing":
			v.CanaryFired++
		case "resolved":
			v.CanaryResolved++
		}
		v.CanaryLast = a.Status
		t.Logf("canary webhook at %s: %s %v", a.At.Format("15:04:05.000"), a.Status, a.Diagnosis)
	}
	return v
}

// rerunAfterKill says whether every 2xx run of a key but the last lost its
// record to a kill -9: the worker incarnation that made it was killed with
// SIGKILL before it could have recorded the run (within recordGrace of
// time Redis served after the handler answered, see bed.recordDeadline),
// and the next run began only after that kill. The key's mark then still
// said running:<id>:<attempt>, and the next run waited for it to expire:
// at-least-once, which an idempotency key cannot prevent for a run that
// was never recorded. A worker killed later than that had the time to
// record the run, and a run beside a live earlier holder means the mark
// did not hold: neither is excused.
//
// used is how much of recordGrace the latest such kill left the worker
// after the handler answered (0 for kills mid-run).
func rerunAfterKill(b *bed, runs []execution) (excused bool, used time.Duration) {
	sort.Slice(runs, func(i, k int) bool { return runs[i].At.Before(runs[k].At) })
	for i, r := range runs[:len(runs)-1] {
		killed, ok := b.killedAt(r.Who)
		deadline := b.recordDeadline(r.Answered)
		if !ok || !killed.Before(runs[i+1].At) || killed.After(deadline) {
			return false, 0
		}
		if killed.After(r.Answered) {
			used = max(used, recordGrace-deadline.Sub(killed))
		}
	}
	return true, used
}

// failures are the verdict's broken guarantees.
func (v verdict) failures() []string {
	var out []string
	if v.Twice > 0 {
		out = append(out, fmt.Sprintf("%d idempotency keys ran to a 2xx twice (not explained by a worker killed before it could record the run)", v.Twice))
	}
	if len(v.Lost) > 0 {
		out = append(out, fmt.Sprintf("%d accepted jobs lost, e.g. %s", len(v.Lost), strings.Join(v.Lost[:min(5, len(v.Lost))], ", ")))
	}
	if len(v.DeadNoError) > 0 {
		out = append(out, fmt.Sprintf("%d dead jobs without their last error, e.g. %v", len(v.DeadNoError), v.DeadNoError[:min(5, len(v.DeadNoError))]))
	}
	if len(v.DeadUnexpected) > 0 {
		out = append(out, fmt.Sprintf("%d jobs dead that should have run, e.g. %v", len(v.DeadUnexpected), v.DeadUnexpected[:min(5, len(v.DeadUnexpected))]))
	}
	if v.PoisonDLQ != v.Poison {
		out = append(out, fmt.Sprintf("%d poison records produced, %d in %s.dlq", v.Poison, v.PoisonDLQ, topic))
	}
	if len(v.FunnelProblems) > 0 {
		out = append(out, "the funnel does not balance: "+strings.Join(v.FunnelProblems, "; "))
	}
	if v.CanaryLast == "firing" {
		out = append(out, "a canary alert is left firing: no coordinator resolved it after the faults")
	}
	if v.Accepted == 0 {
		out = append(out, "no job was accepted")
	}
	return out
}

// table renders the verdict and the faults.
func (v verdict) table(outcomes []outcome) string {
	var s strings.Builder
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAIL"
	}
	row := func(what string, n any, note string) { fmt.Fprintf(&s, "| %-46s | %8v | %s |\n", what, n, note) }
	s.WriteString("| verdict                                        |    count | |\n|---|---:|---|\n")
	row("accepted (2xx) jobs", v.Accepted, fmt.Sprintf("%d to run, %d always failing", v.AcceptedWork, v.AcceptedFail))
	row("executed at least once", v.Executed, mark(v.Executed == v.AcceptedWork))
	row("executed twice with one idempotency key", v.Twice, mark(v.Twice == 0)+" (must be 0)")
	row("  ... run again: killed before its record", v.TwiceAfterKill, fmt.Sprintf("at-least-once: the worker killed mid-run, or after the answer but within %s of Redis serving (%d, at most %s in)",
		recordGrace, v.TwiceAfterAnswer, v.GraceUsed.Round(time.Millisecond)))
	row("lost", len(v.Lost), mark(len(v.Lost) == 0)+" (must be 0)")
	row("dead-lettered: dead set", v.Dead, mark(len(v.DeadUnexpected) == 0 && len(v.DeadNoError) == 0 && v.Dead == v.AcceptedFail)+" (only the always-failing ones, each with its last error)")
	reasons := make([]string, 0, len(v.DLQReasons))
	for r, n := range v.DLQReasons {
		reasons = append(reasons, fmt.Sprintf("%s: %d", r, n))
	}
	sort.Strings(reasons)
	row("dead-lettered: poison in "+topic+".dlq", v.PoisonDLQ, fmt.Sprintf("%s of %d produced %v", mark(v.PoisonDLQ == v.Poison), v.Poison, reasons))
	funnelNote := "ok (sluice stats: every gap explained)"
	if len(v.FunnelProblems) > 0 {
		funnelNote = "FAIL: " + strings.Join(v.FunnelProblems, "; ")
	}
	if v.Funnel != nil {
		for _, tp := range v.Funnel.Topics {
			if tp.Topic == topic && tp.Gate != nil {
				funnelNote += fmt.Sprintf("; gate accepted %d, relayed %d, deduplicated %d, completed %d, dead %d, retried %d",
					tp.Gate.Accepted, tp.Stages["relayed"], tp.Stages["deduplicated"], tp.Stages["completed"], tp.Stages["dead"], tp.Stages["retried"])
			}
		}
	}
	row("funnel balanced", len(v.FunnelProblems) == 0, funnelNote)
	row("canary alerts fired / resolved", fmt.Sprintf("%d / %d", v.CanaryFired, v.CanaryResolved),
		mark(v.CanaryLast != "firing")+" (the last call resolves: no alert left firing)")

	s.WriteString("\n| fault | took | relay failover | coordinator failover | gate requests | failed | error rate | measured |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	dur := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return d.Round(100 * time.Millisecond).String()
	}
	for _, o := range outcomes {
		rate := 0.0
		if o.Requests > 0 {
			rate = 100 * float64(o.Failed) / float64(o.Requests)
		}
		m := strings.Join(o.Measured, "; ")
		if o.Err != nil {
			m += " ERROR: " + o.Err.Error()
		}
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %d | %d | %.1f%% | %s |\n", o.Step, dur(o.End.Sub(o.Start)), dur(o.RelayFailover), dur(o.CoordFailover), o.Requests, o.Failed, rate, m)
	}
	return s.String()
}

// describeRuns renders a key's runs with the kills of their workers.
func describeRuns(b *bed, runs []execution) string {
	var s []string
	for _, r := range runs {
		d := fmt.Sprintf("%s attempt %d by %s at %s, answered %s", r.JobID, r.Attempt, r.Who, r.At.Format("15:04:05.000"), r.Answered.Format("15:04:05.000"))
		if at, ok := b.killedAt(r.Who); ok {
			d += fmt.Sprintf(" (killed at %s; to record by %s)", at.Format("15:04:05.000"), b.recordDeadline(r.Answered).Format("15:04:05.000"))
		}
		s = append(s, d)
	}
	return strings.Join(s, "; ")
}
