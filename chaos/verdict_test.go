package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/queue"
)

// verdict is what the run proved, by job id (Jepsen's set workload): the
// ops the gates acknowledged, with the ids of their answers, against the
// ledger's runs by id.
type verdict struct {
	Ops, Acked, Unknown int
	ByKind              map[kind]int // acknowledged ops by kind
	UnknownRan          int          // ops of unknown outcome that ran (found by their tag)
	UnknownLanded       int          // ... that are in Kafka
	Rejected            []string     // items refused with a 4xx
	IDMismatch          []string     // a run whose op is another job's than its id's

	ToRun        int // acknowledged ids meant to succeed
	Executed     int // ... that ran to a 2xx, or were done by their key
	SkippedByKey int // ... of which done without running: their key ran under another id
	Lost         []string
	// LostWithTopic are the ids in the deleted topic's log that never ran
	// and are not dead: acknowledged before the deletion and not yet
	// relayed, legitimately lost with the topic.
	LostWithTopic []string

	KeyedTwice       []string // keys run to a 2xx twice, not excused
	KeyedExcused     []string // keys run again after a kill before their record, listed
	TwiceAfterAnswer int      // ... of which a kill came after the handler answered
	KeyedGaveUp      []string // keys run again after their worker gave the lease up mid-run, listed
	KeyedAOFLoss     []string // keys run again after a SIGKILL of Redis lost their record with its AOF tail, listed
	AOFLosses        string   // what each restart of Redis lost of its answered writes (aofProbe)
	GraceUsed        time.Duration

	Reruns      int            // extra 2xx runs of plain-like acknowledged ids
	RerunsBy    map[string]int // explanation -> reruns
	Unexplained []string

	Dead, DeadExpected int
	DeadUnexpected     []string // jobs meant to succeed, dead (with the error)
	DeadNoError        []string // failing jobs dead without their last error
	KillJobs           []string // the kill jobs, each with its fate
	KillFailed         []string // kill jobs not dead within killAttempts, or dead without saying the worker died
	Refused            []string // jobs dead or dead-lettered because Redis refused a write

	Poison, PoisonDLQ int
	DLQReasons        map[string]int

	// The funnel, exact: relayed == completed + dead + cancelled, and
	// relayed == the job records in Kafka (each id's copies, a
	// client-chosen id once) - dropped - those lost with a deleted topic.
	Relayed, Completed, DeadN, Cancelled, Dropped, Deduplicated int
	Requeued                                                    int
	ExpectedRelayed, KafkaCopies, Ambiguous                     int
	FunnelExact                                                 bool
	Funnel                                                      *funnel.Report
	FunnelProblems                                              []string
	Settled                                                     time.Duration

	CanaryFired, CanaryResolved int
	CanaryLast                  string
}

// records reads the record (job:<id>) of each acknowledged op: its state,
// last_error and attempts, empty for a job without one (a plain job that
// succeeded leaves none).
func records(b *bed, ops []op) (map[string]record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make(map[string]record, len(ops))
	for start := 0; start < len(ops); start += 1000 {
		pipe := b.redis.Client().Pipeline()
		part := ops[start:min(start+1000, len(ops))]
		cmds := make([]*redis.SliceCmd, len(part))
		for i, o := range part {
			cmds[i] = pipe.HMGet(ctx, b.recordKey(o.ID, o.group()), "state", "last_error", "attempts")
		}
		if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
			return nil, err
		}
		for i, o := range part {
			f := cmds[i].Val()
			str := func(k int) string { s, _ := f[k].(string); return s }
			out[o.ID] = record{State: str(0), LastError: str(1), Attempts: str(2)}
		}
	}
	return out, nil
}

// record is the part of a job's record the verdict reads.
type record struct{ State, LastError, Attempts string }

// refusal says whether an error is Redis refusing to write (it cannot
// persist, it is a replica, it is loading).
func refusal(s string) bool {
	for _, w := range []string{"MISCONF", "READONLY", "LOADING", "NOREPLICAS"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

func verdictOf(t *testing.T, b *bed, l *loader, poison int, drain time.Duration) verdict {
	t.Helper()
	ops, acked, rejected := l.snapshot()
	byTag := make(map[string]op, len(ops))
	v := verdict{Ops: len(ops), Poison: poison, DLQReasons: map[string]int{}, ByKind: map[kind]int{}, RerunsBy: map[string]int{}, Rejected: rejected}
	for _, o := range ops {
		byTag[o.Tag] = o
		if !o.acked() {
			v.Unknown++
		}
	}
	v.Acked = len(acked)
	ids := make([]string, 0, len(acked))
	for id, o := range acked {
		ids = append(ids, id)
		v.ByKind[o.Spec.Kind]++
	}
	sort.Strings(ids)
	deletedAt, oldLog := b.topicDeletion()

	// Settled: every acknowledged id meant to succeed ran to a 2xx (or,
	// keyed, its key ran under another id); every failing or killing job
	// is dead; and every job relayed has ended (completed + dead +
	// cancelled == relayed), so a job whose worker was killed before its
	// ack has run again before runs are counted. Ids acknowledged before
	// a deletion of the topic may be lost with it: not waited for.
	okByID := map[string][]execution{}
	okByKey := map[string][]execution{}
	ranByID := map[string]bool{} // any call, 2xx or not
	unrun := map[string]bool{}
	var dying []op
	for _, id := range ids {
		o := acked[id]
		switch {
		case o.Spec.Kind == kindFail || o.Spec.Kind == kindKill:
			dying = append(dying, o)
		case deletedAt.IsZero() || o.AckedAt.After(deletedAt):
			unrun[id] = true
		}
	}
	read := 0
	take := func(news []execution) {
		for _, e := range news {
			ranByID[e.JobID] = true
			if !e.OK || isPeriodic(e) { // periodic_test.go judges those
				continue
			}
			okByID[e.JobID] = append(okByID[e.JobID], e)
			if e.Key != "" {
				okByKey[e.Key] = append(okByKey[e.Key], e)
			}
		}
	}
	done := func(id string) bool {
		if len(okByID[id]) > 0 {
			return true
		}
		k := acked[id].Spec.Key
		return k != "" && len(okByKey[k]) > 0
	}
	start := time.Now()
	waitUntil(drain, "every acknowledged job to settle", func() bool {
		news := b.ledger.since(read)
		read += len(news)
		take(news)
		for id := range unrun {
			if done(id) {
				delete(unrun, id)
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
		for _, o := range dying {
			if recs[o.ID].State != "dead" {
				rest = append(rest, o)
			}
		}
		dying = rest
		if len(dying) > 0 {
			return false
		}
		relayed := b.funnel(queue.MilestoneRelayed)
		ended := b.funnel(queue.MilestoneCompleted) + b.funnel(queue.MilestoneDead) + b.funnel(queue.MilestoneCancelled)
		return relayed > 0 && ended == relayed
	})
	v.Settled = time.Since(start)
	take(b.ledger.since(read))

	// Runs by op: an op of unknown outcome that ran; a run under an id
	// whose op is another job's means the gate mixed ids up.
	ranTags := map[string]bool{}
	for _, e := range b.ledger.snapshot() {
		if e.Op == "" {
			continue
		}
		ranTags[e.Op] = true
		if o, ok := byTag[e.Op]; ok {
			if a, ok := acked[e.JobID]; ok && a.Spec.N != o.Spec.N {
				v.IDMismatch = append(v.IDMismatch, fmt.Sprintf("%s ran with the payload of %s (job %d, not %d)", e.JobID, e.Op, o.Spec.N, a.Spec.N))
			}
		}
	}
	for _, o := range ops {
		if !o.acked() && ranTags[o.Tag] {
			v.UnknownRan++
		}
	}

	// Keys run to a 2xx twice (over every op with the key, acknowledged
	// or not): each earlier run must have lost its record to a kill -9.
	cut := b.cutShortRuns()
	for key, runs := range okByKey {
		if len(runs) < 2 {
			continue
		}
		line := fmt.Sprintf("key %s: %s", key, describeRuns(b, runs))
		if excused, used := rerunAfterKill(b, runs); excused {
			v.KeyedExcused = append(v.KeyedExcused, line)
			if used > 0 {
				v.TwiceAfterAnswer++
				v.GraceUsed = max(v.GraceUsed, used)
			}
		} else if rerunAfterGiveUp(cut, runs) {
			v.KeyedGaveUp = append(v.KeyedGaveUp, line)
		} else if rerunAfterAOFLoss(b, runs) {
			v.KeyedAOFLoss = append(v.KeyedAOFLoss, line)
		} else {
			v.KeyedTwice = append(v.KeyedTwice, line)
		}
	}
	sort.Strings(v.KeyedExcused)
	sort.Strings(v.KeyedGaveUp)
	sort.Strings(v.KeyedAOFLoss)
	v.AOFLosses = b.aofLosses()
	sort.Strings(v.KeyedTwice)

	// The job records in Kafka: what landed of the ops of unknown
	// outcome, and each id's copies (a producer's retry writes one twice).
	logs, err := scanLog(b.kafka.Brokers())
	if err != nil {
		t.Errorf("reading the topic's log: %v", err)
	}
	for id, r := range oldLog {
		n := logs[id]
		n.Copies += r.Copies
		n.Given = n.Given || r.Given
		n.Ops = append(n.Ops, r.Ops...)
		logs[id] = n
	}
	landed := map[string]bool{}
	for _, r := range logs {
		for _, tag := range r.Ops {
			landed[tag] = true
		}
	}
	for _, o := range ops {
		if !o.acked() && landed[o.Tag] {
			v.UnknownLanded++
		}
	}

	// Reruns of plain-like jobs: each 2xx run after the first must be
	// explained.
	for _, id := range ids {
		o := acked[id]
		runs := okByID[id]
		if !o.Spec.Kind.plainLike() || len(runs) < 2 {
			continue
		}
		sort.Slice(runs, func(i, k int) bool { return runs[i].At.Before(runs[k].At) })
		for i := 1; i < len(runs); i++ {
			v.Reruns++
			why := b.explainRerun(runs[i-1], runs[i], logs[id].Copies)
			if why == "" {
				v.Unexplained = append(v.Unexplained, fmt.Sprintf("%s (%s) ran again: %s", id, o.Spec.Kind, describeRuns(b, runs[i-1:i+1])))
				continue
			}
			v.RerunsBy[why]++
		}
	}

	// Every acknowledged id's record: a failing or killing job's says
	// dead with its last error; no job meant to succeed is dead.
	ackedOps := make([]op, 0, len(ids))
	for _, id := range ids {
		ackedOps = append(ackedOps, acked[id])
	}
	recs, err := records(b, ackedOps)
	if err != nil {
		t.Errorf("reading the jobs' records: %v", err)
	}
	for _, o := range ackedOps {
		rec := recs[o.ID]
		switch o.Spec.Kind {
		case kindFail:
			switch {
			case rec.State == "dead" && rec.LastError != "":
				v.Dead++
				v.DeadExpected++
			case rec.State == "dead":
				v.Dead++
				v.DeadNoError = append(v.DeadNoError, o.ID)
			default:
				v.Lost = append(v.Lost, fmt.Sprintf("%s (always failing, state %q)", o.ID, rec.State))
			}
			continue
		case kindKill:
			calls := b.ledger.calls(o.ID)
			fate := fmt.Sprintf("%s: %d calls, state %q, attempts %s, last error %q", o.ID, calls, rec.State, rec.Attempts, rec.LastError)
			v.KillJobs = append(v.KillJobs, fate)
			if rec.State == "dead" {
				v.Dead++
				v.DeadExpected++
			}
			if rec.State != "dead" || calls > killAttempts || !strings.Contains(strings.ToLower(rec.LastError), "died") {
				v.KillFailed = append(v.KillFailed, fate)
			}
			continue
		}
		v.ToRun++
		lostWithTopic := !deletedAt.IsZero() && !o.AckedAt.After(deletedAt)
		switch {
		case rec.State == "dead":
			v.Dead++
			v.DeadUnexpected = append(v.DeadUnexpected, fmt.Sprintf("%s (%s): %s", o.ID, o.Spec.Kind, rec.LastError))
			if refusal(rec.LastError) {
				v.Refused = append(v.Refused, fmt.Sprintf("%s dead: %s", o.ID, rec.LastError))
			}
		case len(okByID[o.ID]) > 0:
			v.Executed++
		case done(o.ID):
			v.Executed++
			v.SkippedByKey++
		case lostWithTopic && !ranByID[o.ID]:
			v.LostWithTopic = append(v.LostWithTopic, o.ID)
		default:
			v.Lost = append(v.Lost, fmt.Sprintf("%s (%s, op %s, acknowledged %s; record state %q)", o.ID, o.Spec.Kind, o.Tag, o.AckedAt.Format("15:04:05.000"), rec.State))
		}
	}

	// Poison: every record in the DLQ, once per source; any other record
	// there is a job the relay dead-lettered.
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
			if refusal(r) {
				v.Refused = append(v.Refused, "dead-lettered by the relay: "+r)
			}
		}
		return v.PoisonDLQ >= poison
	}); err != nil {
		t.Logf("DLQ: %v", err)
	}

	// The funnel, exact, from the counters in Redis and the log.
	v.Relayed, v.Completed, v.DeadN = b.funnel(queue.MilestoneRelayed), b.funnel(queue.MilestoneCompleted), b.funnel(queue.MilestoneDead)
	v.Cancelled, v.Dropped, v.Deduplicated = b.funnel(queue.MilestoneCancelled), b.funnel(queue.MilestoneDropped), b.funnel(queue.MilestoneDeduplicated)
	for _, r := range logs {
		if r.Given {
			v.ExpectedRelayed++
		} else {
			v.ExpectedRelayed += r.Copies
			v.KafkaCopies += r.Copies - 1
		}
	}
	// Copies that were never applied: a record Redis refused was produced
	// again (requeued), and, refused too often, to the DLQ; what the DLQ
	// holds beyond the poison are such jobs.
	v.Requeued = b.funnel(queue.MilestoneRequeued)
	v.ExpectedRelayed -= v.Dropped + len(v.LostWithTopic) + v.Requeued + max(0, v.PoisonDLQ-v.Poison)
	// A keyed job of the deleted log that never ran may have been relayed
	// and done by its key, or lost with the topic: the log cannot say.
	for id, r := range oldLog {
		if !ranByID[id] && !r.Given && len(r.Ops) > 0 {
			if o, ok := byTag[r.Ops[0]]; ok && o.Spec.Key != "" {
				v.Ambiguous++
			}
		}
	}
	diff := v.Relayed - v.ExpectedRelayed
	v.FunnelExact = v.Relayed == v.Completed+v.DeadN+v.Cancelled && diff >= 0 && diff <= v.Ambiguous

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
	// The canary alerts: an alert that fired must have been resolved,
	// whichever coordinator led by then. The monitor judges 4 times an
	// interval, so its resolved call may come just after the funnel's
	// last read.
	var alerts []canaryAlert
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

// explainRerun says why a job ran to a 2xx again after run prev, or ""
// when nothing the bed did explains it. copies is how many records of
// the job's id are in Kafka.
func (b *bed) explainRerun(prev, next execution, copies int) string {
	// Killed before the ack: after the call was on its way (a call can
	// reach the ledger just after its worker died) and before the run's
	// ack was due, a second of Redis serving after the answer (the key's
	// record, then the ack: recordGrace each).
	if killed, ok := b.killedAt(prev.Who); ok && killed.After(prev.At.Add(-time.Second)) && killed.Before(next.At) &&
		!killed.After(b.recordDeadline(prev.Answered).Add(recordGrace)) {
		return "its worker was killed before the ack"
	}
	worker, _, _ := strings.Cut(prev.Who, ".")
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.outages {
		up := o.up
		if up.IsZero() {
			up = time.Now()
		}
		if o.down.Before(next.At) && up.After(prev.At) {
			return "Redis was down: the ack failed, the lease was reaped"
		}
	}
	for _, e := range b.events {
		if (e.who == "" || e.who == worker) && e.from.Before(next.At) && (e.to.IsZero() || e.to.After(prev.At)) {
			return e.explains
		}
	}
	if copies > 1 {
		return "its id is in Kafka twice (the gate's producer retried)"
	}
	return ""
}

// failures are the verdict's broken guarantees. lossy (the unclean
// election's run) reports lost jobs, and the funnel they unbalance,
// instead: see lossyReport.
func (v verdict) failures(lossy bool) []string {
	var out []string
	some := func(s []string) string { return strings.Join(s[:min(5, len(s))], "; ") }
	if len(v.KeyedTwice) > 0 {
		out = append(out, fmt.Sprintf("%d idempotency keys ran to a 2xx twice (not explained by a worker killed before it could record the run): %s", len(v.KeyedTwice), some(v.KeyedTwice)))
	}
	if len(v.Lost) > 0 && !lossy {
		out = append(out, fmt.Sprintf("%d acknowledged jobs lost, e.g. %s", len(v.Lost), some(v.Lost)))
	}
	if len(v.Unexplained) > 0 {
		out = append(out, fmt.Sprintf("%d reruns of jobs without a key are not explained: %s", len(v.Unexplained), some(v.Unexplained)))
	}
	if len(v.IDMismatch) > 0 {
		out = append(out, fmt.Sprintf("%d runs under another job's id: %s", len(v.IDMismatch), some(v.IDMismatch)))
	}
	if len(v.Rejected) > 0 {
		out = append(out, fmt.Sprintf("%d valid jobs refused with a 4xx: %s", len(v.Rejected), some(v.Rejected)))
	}
	if len(v.DeadNoError) > 0 {
		out = append(out, fmt.Sprintf("%d dead jobs without their last error, e.g. %v", len(v.DeadNoError), some(v.DeadNoError)))
	}
	if len(v.DeadUnexpected) > 0 {
		out = append(out, fmt.Sprintf("%d jobs dead that should have run, e.g. %v", len(v.DeadUnexpected), some(v.DeadUnexpected)))
	}
	if len(v.Refused) > 0 {
		out = append(out, fmt.Sprintf("%d jobs dead-lettered because Redis refused a write: %s", len(v.Refused), some(v.Refused)))
	}
	if len(v.KillFailed) > 0 {
		out = append(out, fmt.Sprintf("%d jobs that kill their worker were not dead within %d attempts with an error saying the worker died: %s", len(v.KillFailed), killAttempts, some(v.KillFailed)))
	}
	if v.PoisonDLQ != v.Poison {
		out = append(out, fmt.Sprintf("%d poison records produced, %d records in %s.dlq", v.Poison, v.PoisonDLQ, topic))
	}
	if !v.FunnelExact && !(lossy && len(v.Lost) > 0) {
		out = append(out, fmt.Sprintf("the funnel is not exact: relayed %d, completed %d + dead %d + cancelled %d = %d; expected relayed %d from the log (%d extra copies, %d requeued, %d jobs in the DLQ, %d dropped, %d lost with the topic, %d ambiguous)",
			v.Relayed, v.Completed, v.DeadN, v.Cancelled, v.Completed+v.DeadN+v.Cancelled, v.ExpectedRelayed, v.KafkaCopies, v.Requeued, max(0, v.PoisonDLQ-v.Poison), v.Dropped, len(v.LostWithTopic), v.Ambiguous))
	}
	if len(v.FunnelProblems) > 0 && !(lossy && len(v.Lost) > 0) {
		out = append(out, "sluice stats finds the funnel unbalanced: "+strings.Join(v.FunnelProblems, "; "))
	}
	if v.CanaryLast == "firing" {
		out = append(out, "a canary alert is left firing: no coordinator resolved it after the faults")
	}
	if v.Acked == 0 {
		out = append(out, "no job was acknowledged")
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
	s.WriteString("| verdict (by job id)                            |    count | |\n|---|---:|---|\n")
	var kinds []string
	for k := kindPlain; k <= kindSlow; k++ {
		if n := v.ByKind[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	row("ops (POSTs of one job)", v.Ops, fmt.Sprintf("%d acknowledged, %d of unknown outcome", v.Acked, v.Unknown))
	row("acknowledged ids", v.Acked, strings.Join(kinds, ", ")+fmt.Sprintf("; %d refused with a 4xx (%s)", len(v.Rejected), mark(len(v.Rejected) == 0)))
	row("unknown outcome (no answer, 5xx)", v.Unknown, fmt.Sprintf("%d in Kafka, %d ran; may run or not, a key never twice", v.UnknownLanded, v.UnknownRan))
	row("executed at least once", v.Executed, fmt.Sprintf("%s of %d meant to run (%d done by their key: a twin's or a resend's ran)", mark(v.Executed+len(v.LostWithTopic) == v.ToRun), v.ToRun, v.SkippedByKey))
	row("lost", len(v.Lost), mark(len(v.Lost) == 0)+" (must be 0)")
	row("lost with the deleted topic", len(v.LostWithTopic), "acknowledged before the deletion, not yet relayed: counted apart (docs/chaos.md)")
	row("keyed ids run twice", len(v.KeyedTwice), mark(len(v.KeyedTwice) == 0)+" (must be 0)")
	row("  ... excused: killed before its record", len(v.KeyedExcused), fmt.Sprintf("listed below; the worker killed mid-run, or after the answer but within %s of Redis serving (%d, at most %s in)",
		recordGrace, v.TwiceAfterAnswer, v.GraceUsed.Round(time.Millisecond)))
	row("  ... excused: cut short by a lease given up", len(v.KeyedGaveUp), fmt.Sprintf("listed below; the worker cancelled the run when it could not extend the lease, and the next began after the key's running mark (%s) expired", markHold))
	row("  ... excused: record lost with Redis's AOF tail", len(v.KeyedAOFLoss), "listed below; Redis was killed while it held answered writes back from its AOF (a busy disk: appendfsync everysec waits up to 2 s), and the run's record was among them ("+v.AOFLosses+")")
	var why []string
	for w, n := range v.RerunsBy {
		why = append(why, fmt.Sprintf("%s: %d", w, n))
	}
	sort.Strings(why)
	row("reruns of jobs without a key", v.Reruns, strings.Join(why, "; "))
	row("  ... unexplained", len(v.Unexplained), mark(len(v.Unexplained) == 0)+" (must be 0)")
	row("dead-lettered: dead set", v.Dead, mark(len(v.DeadUnexpected) == 0 && len(v.DeadNoError) == 0 && len(v.KillFailed) == 0)+" (only the always-failing and killing ones, each with its last error)")
	row("dead-lettered because Redis refused a write", len(v.Refused), mark(len(v.Refused) == 0)+" (must be 0)")
	reasons := make([]string, 0, len(v.DLQReasons))
	for r, n := range v.DLQReasons {
		reasons = append(reasons, fmt.Sprintf("%s: %d", r, n))
	}
	sort.Strings(reasons)
	row("dead-lettered: poison in "+topic+".dlq", v.PoisonDLQ, fmt.Sprintf("%s of %d produced %v", mark(v.PoisonDLQ == v.Poison), v.Poison, reasons))
	row("funnel exact", v.FunnelExact, fmt.Sprintf("%s: relayed %d = completed %d + dead %d + cancelled %d; = %d from the log (%d records of an id again, %d requeued, %d jobs in the DLQ, %d dropped, %d lost with the topic; %d ambiguous); deduplicated %d",
		mark(v.FunnelExact), v.Relayed, v.Completed, v.DeadN, v.Cancelled, v.ExpectedRelayed, v.KafkaCopies, v.Requeued, max(0, v.PoisonDLQ-v.Poison), v.Dropped, len(v.LostWithTopic), v.Ambiguous, v.Deduplicated))
	funnelNote := "ok (sluice stats: every gap explained)"
	if len(v.FunnelProblems) > 0 {
		funnelNote = "FAIL: " + strings.Join(v.FunnelProblems, "; ")
	}
	if v.Funnel != nil {
		for _, tp := range v.Funnel.Topics {
			if tp.Topic == topic && tp.Gate != nil {
				funnelNote += fmt.Sprintf("; gate accepted %d, relayed %d, deduplicated %d, completed %d, dead %d, retried %d",
					tp.Gate.Accepted, tp.Milestones["relayed"], tp.Milestones["deduplicated"], tp.Milestones["completed"], tp.Milestones["dead"], tp.Milestones["retried"])
			}
		}
	}
	row("sluice stats balanced", len(v.FunnelProblems) == 0, funnelNote)
	row("canary alerts fired / resolved", fmt.Sprintf("%d / %d", v.CanaryFired, v.CanaryResolved),
		mark(v.CanaryLast != "firing")+" (the last call resolves: no alert left firing)")
	for _, k := range v.KillJobs {
		fmt.Fprintf(&s, "\nkill job %s", k)
	}
	if len(v.KeyedExcused) > 0 {
		fmt.Fprintf(&s, "\n\nkeys run again after a kill before their record (excused):\n")
		for _, k := range v.KeyedExcused {
			fmt.Fprintf(&s, "- %s\n", k)
		}
	}
	if len(v.KeyedGaveUp) > 0 {
		fmt.Fprintf(&s, "\n\nkeys run again after their worker gave the lease up mid-run and the running mark expired (excused):\n")
		for _, k := range v.KeyedGaveUp {
			fmt.Fprintf(&s, "- %s\n", k)
		}
	}
	if len(v.KeyedAOFLoss) > 0 {
		fmt.Fprintf(&s, "\n\nkeys run again after a SIGKILL of Redis lost their record with the AOF tail (excused):\n")
		for _, k := range v.KeyedAOFLoss {
			fmt.Fprintf(&s, "- %s\n", k)
		}
	}

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
