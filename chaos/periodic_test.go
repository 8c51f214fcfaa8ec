package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/periodic"
)

// The periodic schedule every scenario runs beside its load: a job of type
// work every second, through the leader coordinator and the first gate,
// while the faults kill the leader, restart Consul (the schedule written
// again once it is back; the scheduler's state is in Redis) and the rest.
// Its grace outlasts a failover, so no slot may be missing, and each
// slot's job is queued once: a slot's job that ran to a 2xx twice must be
// excused as the load's keys are (its worker killed before the ack), or be
// one job rerun as a plain job is, for a reason the bed caused.
const (
	periodicName  = "chaos-tick"
	periodicGrace = 2 * time.Minute
)

// isPeriodic reports whether e is a run of the schedule's jobs.
func isPeriodic(e execution) bool { return strings.HasPrefix(e.JobID, "periodic:") }

// startPeriodic writes the schedule into Consul; it returns when.
func startPeriodic(b *bed) (time.Time, error) {
	key, err := periodic.ScheduleKey(stage, periodicName)
	if err != nil {
		return time.Time{}, err
	}
	value := fmt.Sprintf(`{"every":"1s","topic":%q,"type":"work","grace":%q}`, topic, periodicGrace)
	if _, err := periodic.Parse(periodicName, []byte(value)); err != nil {
		return time.Time{}, err
	}
	b.mu.Lock()
	if b.configured == nil {
		b.configured = map[string][]byte{}
	}
	b.configured[key] = []byte(value)
	b.mu.Unlock()
	return time.Now(), b.restoreConsul()
}

// restoreConsul writes the values the bed configured into Consul.
func (b *bed) restoreConsul() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, value := range b.configured {
		if _, err := b.consul.Client().KV().Put(&consulapi.KVPair{Key: key, Value: value}, nil); err != nil {
			return fmt.Errorf("restoring %s in Consul: %w", key, err)
		}
	}
	return nil
}

// stopPeriodic deletes the schedule; it returns when.
func stopPeriodic(b *bed) (time.Time, error) {
	key, _ := periodic.ScheduleKey(stage, periodicName)
	b.mu.Lock()
	delete(b.configured, key)
	b.mu.Unlock()
	_, err := b.consul.Client().KV().Delete(key, nil)
	return time.Now(), err
}

// periodicFailures judges the schedule's runs in the ledger, once the load
// has settled: every slot from the first run to the last has a 2xx run,
// the last is close to when the schedule was deleted (it kept firing
// through the faults), and a slot run twice was run again after a kill.
func periodicFailures(b *bed, started, stopped time.Time) (failures []string, slots int) {
	prefix := periodic.JobID(periodicName, time.Unix(0, 0))
	prefix = prefix[:len(prefix)-1] // "periodic:<name>:"
	runs := map[int64][]execution{}
	for _, e := range b.ledger.snapshot() {
		unix, ok := strings.CutPrefix(e.JobID, prefix)
		if !ok || !e.OK {
			continue
		}
		s, err := strconv.ParseInt(unix, 10, 64)
		if err != nil {
			failures = append(failures, "periodic: a job id that is no slot's: "+e.JobID)
			continue
		}
		runs[s] = append(runs[s], e)
	}
	if len(runs) == 0 {
		return append(failures, "periodic: the schedule never ran"), 0
	}
	var seen []int64
	for s := range runs {
		seen = append(seen, s)
	}
	sort.Slice(seen, func(i, k int) bool { return seen[i] < seen[k] })
	first, last := seen[0], seen[len(seen)-1]
	if start := started.Unix(); first > start+10 {
		failures = append(failures, fmt.Sprintf("periodic: the first slot run is %ds after the schedule was set", first-start))
	}
	if end := stopped.Unix(); last < end-15 {
		failures = append(failures, fmt.Sprintf("periodic: the last slot run is %ds before the schedule was deleted: it stopped firing", end-last))
	}
	// A slot fired while the job topic was gone (deleted, or recreated
	// but not yet read again by the gate) was answered 404, and the
	// coordinator skips a slot the gate refuses for good: no slot is owed
	// then (docs/chaos.md). A second either side for the slot's firing and
	// the gate's answer.
	goneFrom, goneTo := b.topicGone()
	gone := func(s int64) bool {
		return !goneFrom.IsZero() && s >= goneFrom.Unix()-1 && s <= goneTo.Unix()+1
	}
	var missing, skipped []string
	for s := first; s <= last; s++ {
		switch rs := runs[s]; {
		case len(rs) == 0 && gone(s):
			skipped = append(skipped, time.Unix(s, 0).UTC().Format("15:04:05"))
		case len(rs) == 0:
			missing = append(missing, time.Unix(s, 0).UTC().Format("15:04:05"))
		case len(rs) > 1:
			if excused, _ := rerunAfterKill(b, rs); !excused && !rerunsOfOneJob(b, rs) {
				failures = append(failures, fmt.Sprintf("periodic: slot %s ran to a 2xx %d times: %s", time.Unix(s, 0).UTC().Format(time.TimeOnly), len(rs), describeRuns(b, rs)))
			}
		}
	}
	if len(missing) > 0 {
		failures = append(failures, fmt.Sprintf("periodic: %d slots between the first and the last run never ran: %v", len(missing), missing))
	}
	if len(skipped) > 0 {
		b.t.Logf("periodic: %d slots fired while the job topic was gone were skipped (the gate answered 404): %v", len(skipped), skipped)
	}
	return failures, int(last - first + 1)
}

// rerunsOfOneJob reports whether a slot's runs are one job run again, each
// rerun explained by a fault of the bed (explainRerun): a periodic job
// carries no idempotency key, so, like any plain job, it runs at least
// once, and a worker cut off from Redis, or a Redis refusing writes, past
// its lease has it run again (the suite failed once so, the slot's job
// rerun after the cut of its worker). Two jobs for one slot are never
// excused: the schedule fires one job per slot.
func rerunsOfOneJob(b *bed, rs []execution) bool {
	for i := 1; i < len(rs); i++ {
		if rs[i].JobID != rs[0].JobID || b.explainRerun(rs[i-1], rs[i], 1) == "" {
			return false
		}
	}
	return true
}
