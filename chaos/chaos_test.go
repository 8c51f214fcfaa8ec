package chaos

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

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
	// keepGoing runs the next steps after a step failed.
	keepGoing bool
	// kafka are more options for the bed's Kafka cluster.
	kafka []testenv.KafkaOption
	// lossy reports acknowledged jobs lost (and the funnel they unbalance)
	// instead of failing on them: the unclean election's run, whose losses
	// are the measurement. A key run twice still fails it.
	lossy bool
	// bed, when set, receives the scenario's bed (for what a test reads
	// after the verdict).
	bed **bed
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

// maxBehindAtEnd is how far behind its schedule the load may end: the
// time the gates take to answer the last batches due, and to work off a
// stall of the last step. More means they did not take the rate asked.
const maxBehindAtEnd = 5 * time.Second

// TestChaosFull is `make chaos`: 300,000 jobs at 3,000 jobs/s, every fault
// one at a time, then mixed. It runs only with SLUICE_CHAOS_FULL=1 (it
// takes minutes).
func TestChaosFull(t *testing.T) {
	if os.Getenv("SLUICE_CHAOS_FULL") != "1" {
		t.Skip("the full chaos suite runs with SLUICE_CHAOS_FULL=1 (make chaos)")
	}
	if apacheBed() {
		runScenario(t, scenario{
			name: "apache", rate: 1500, total: 150000, poison: 60, drain: 3 * time.Minute,
			steps: apacheSteps, keepGoing: true,
		})
		return
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
			// Issue 29's faults. A step
			// that fails does not stop the next ones here: each says what
			// it found.
			{faultKillJob},
			{faultMisconf},
			{faultZombieRelay},
			{faultCutRelayConsul},
			{faultCutWorkerRedis},
			{faultClockSkew},
			// Last: a relay that trusts its old watermark drops every
			// record of the new log, and the steps after would judge a
			// pipeline that relays nothing.
			{faultRecreateTopic},
		},
		keepGoing: true,
	})
}

// apacheBed says whether the bed's Kafka is real brokers
// (SLUICE_TEST_KAFKA=apache: make chaos KAFKA=apache).
func apacheBed() bool { return os.Getenv(testenv.EnvKafka) == "apache" }

// apacheSteps are TestChaosFull's steps on three real brokers (make chaos
// KAFKA=apache, docs/chaos.md): the Kafka faults of issue 30 alone and
// mixed with a relay, worker and Redis fault, then the other faults that
// do not need kfake, trimmed to keep the run near 10 minutes on the 2
// cores the three JVMs share: no mixed coordinator kill (its failover is
// the relay's, and is run alone), one mixed step per Kafka fault. kfake's
// leader moves and node removal do not exist on real brokers; the leader
// kill and the broker restart play their part.
var apacheSteps = [][]fault{
	{faultConsul},
	{faultKafkaKillLeader},
	{faultKafkaRestart},
	{faultNotEnoughReplicas},
	{faultRelay},
	{faultWorker},
	{faultCoordinator},
	{faultRedis},
	{faultRedisKill},
	{faultPause},
	{faultRelay, faultWorker, faultKafkaKillLeader},
	{faultWorker, faultRedis, faultKafkaRestart},
	{faultGate},
	{faultKillJob},
	{faultMisconf},
	{faultZombieRelay},
	{faultCutRelayConsul},
	{faultCutWorkerRedis},
	{faultClockSkew},
	{faultRecreateTopic},
}

// TestChaosUncleanElection runs the Kafka faults on three real brokers
// with unclean.leader.election.enable=true (make chaos KAFKA=apache). Its
// verdict reports the acknowledged jobs lost instead of failing on them
// (they are its measurement, docs/chaos.md), counts the unclean elections
// the controllers logged, and still fails on a key run twice.
func TestChaosUncleanElection(t *testing.T) {
	if os.Getenv("SLUICE_CHAOS_FULL") != "1" || !apacheBed() {
		t.Skip("runs on real brokers with SLUICE_CHAOS_FULL=1 SLUICE_TEST_KAFKA=apache (make chaos KAFKA=apache)")
	}
	var b *bed
	runScenario(t, scenario{
		name: "unclean", rate: 1500, total: 60000, poison: 12, drain: 2 * time.Minute,
		steps: [][]fault{
			{faultKafkaKillLeader},
			{faultNotEnoughReplicas},
			{faultKafkaRestart},
			{faultKafkaKillLeader},
		},
		keepGoing: true,
		kafka:     []testenv.KafkaOption{testenv.KafkaProperty("unclean.leader.election.enable", "true")},
		lossy:     true,
		bed:       &b,
	})
	if b != nil {
		if v, err := topicConfig(b, "unclean.leader.election.enable"); err != nil || v != "true" {
			t.Errorf("the job topic's unclean.leader.election.enable is %q (%v); want true: the run proved nothing about unclean elections", v, err)
		}
		elected, triggered := uncleanElections(b)
		t.Logf("unclean elections: %d logged by the controllers (%d triggered for offline partitions)", elected, triggered)
	}
}

// stepMatches says whether a step has a fault whose name contains one of
// the comma-separated words of SLUICE_CHAOS_ONLY (to run some steps of a
// scenario while working on them).
func stepMatches(step []fault, only string) bool {
	for _, f := range step {
		for _, w := range strings.Split(only, ",") {
			if w != "" && strings.Contains(f.name, w) {
				return true
			}
		}
	}
	return false
}

func runScenario(t *testing.T, sc scenario) {
	if r := os.Getenv("SLUICE_CHAOS_RATE"); r != "" {
		fmt.Sscan(r, &sc.rate)
		sc.total = min(sc.total, int(sc.rate*60))
	}
	began := time.Now()
	b := newBedWith(t, sc.kafka...)
	if sc.bed != nil {
		*sc.bed = b
	}
	if b.kafka.IsApache() {
		t.Logf("Kafka: %d real Apache Kafka brokers (replication factor 3, min.insync.replicas 2, the gates at acks=all)", len(b.kafka.Nodes()))
	}
	b.startAll()
	t.Logf("topology up in %s", time.Since(began).Round(100*time.Millisecond))
	periodicStarted, err := startPeriodic(b)
	if err != nil {
		t.Fatalf("setting the periodic schedule: %v", err)
	}

	run := fmt.Sprintf("%s%d", sc.name, time.Now().UnixNano()%1e6)
	l := newLoader(run, b.gates, sc.rate, sc.total)
	b.load = l
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
		if only := os.Getenv("SLUICE_CHAOS_ONLY"); only != "" && !stepMatches(step, only) {
			continue
		}
		o := runStep(b, l, step...)
		outcomes = append(outcomes, o)
		t.Logf("step %q: %s, %v", o.Step, o.End.Sub(o.Start).Round(100*time.Millisecond), o.Measured)
		if o.Err != nil {
			t.Errorf("step %q: %v", o.Step, o.Err)
			if !sc.keepGoing {
				break
			}
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
	took, held := loadEnd.Sub(l.beganAt()), l.heldFor()
	t.Logf("load: %d jobs acknowledged in %s (%.0f jobs/s, %.0f asked, leaving out the %s the suite held the load back); settled %s after the load; %d handler calls; jobs completed at %.0f/s at best over 5 s",
		v.Acked, took.Round(time.Second), float64(v.Acked)/(took-held).Seconds(), sc.rate, held.Round(100*time.Millisecond), v.Settled.Round(100*time.Millisecond), b.ledger.count(),
		completions.peak(5*time.Second))
	t.Logf("load: %s; the fewest jobs acknowledged in 5 s: %s", l.lag(), l.slowest(5*time.Second, 6))
	if behind := l.behindAtEnd(); behind > maxBehindAtEnd {
		t.Errorf("the load ended %s behind its schedule (more than %s): the gates did not take the %.0f jobs/s asked", behind.Round(time.Millisecond), maxBehindAtEnd, sc.rate)
	}
	report := v.table(outcomes)
	t.Log("\n" + report)
	if path := os.Getenv("SLUICE_CHAOS_REPORT"); path != "" {
		os.WriteFile(path, []byte(report), 0o644)
	}
	for _, p := range v.failures(sc.lossy) {
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
			if n := b.funnel(queue.MilestoneCompleted); n >= 0 {
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

// rerunAfterGiveUp says whether every 2xx run of a key but the last was
// cut short by its worker after the lease could not be extended (or was
// reaped) while it ran, as the worker logged (bed.cutShortRuns), and the
// next run began only once that run's running mark had expired: the
// worker could not keep the lease (Redis, or the worker itself, did not
// answer for nine tenths of it), cancelled the handler and left the key's
// mark to expire, since what the handler did is unknown; the call had
// answered 2xx all the same. At least once, as after a kill. A next run
// before the mark's end means the mark did not hold: not excused. The
// mark is set before the handler's call arrives: a second is allowed for
// that.
func rerunAfterGiveUp(cut map[string]bool, runs []execution) bool {
	sort.Slice(runs, func(i, k int) bool { return runs[i].At.Before(runs[k].At) })
	for i, r := range runs[:len(runs)-1] {
		if !cut[fmt.Sprintf("%s/%s/%d", r.Who, r.JobID, r.Attempt)] || runs[i+1].At.Before(r.At.Add(markHold-time.Second)) {
			return false
		}
	}
	return true
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
