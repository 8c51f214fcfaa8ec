package chaos

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The give-up excuse reads the cut-short runs from the workers' logs, per
// incarnation, and excuses a key only when its next run came after the
// earlier run's mark expired.
func TestARerunAfterAGiveUpIsExcusedOnlyAfterTheMarkExpired(t *testing.T) {
	dir := t.TempDir()
	log := `=== worker1 incarnation 1 at 2026-11-27T16:19:00Z
time=2026-11-27T16:19:27.740Z level=WARN msg="a run cut short after its lease was lost leaves its idempotency key's running mark to expire" partition=3 job=other attempt=1 key=k0 err="context canceled"
=== worker1 incarnation 2 at 2026-11-27T16:19:30Z
time=2026-11-27T16:19:31.740Z level=WARN msg="a run cut short after its lease was lost leaves its idempotency key's running mark to expire" partition=3 job=j1 attempt=1 key=k1 err="context canceled"
`
	if err := os.WriteFile(filepath.Join(dir, "worker1.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bed{logDir: dir, workers: []*part{{name: "worker0"}, {name: "worker1"}}}
	cut := b.cutShortRuns()
	if !cut["worker1.2/j1/1"] || !cut["worker1.1/other/1"] || len(cut) != 2 {
		t.Fatalf("cut-short runs %v", cut)
	}
	at := time.Date(2026, 11, 27, 16, 19, 31, 0, time.UTC)
	first := execution{JobID: "j1", Attempt: 1, Who: "worker1.2", OK: true, At: at, Answered: at.Add(3 * time.Millisecond)}
	for _, c := range []struct {
		name  string
		first execution
		after time.Duration
		want  bool
	}{
		{"next run after the mark's hold", first, markHold, true},
		{"next run while the mark held", first, 2 * time.Second, false},
		{"earlier run not cut short (another incarnation)", execution{JobID: "j1", Attempt: 1, Who: "worker1.1", OK: true, At: at}, markHold, false},
		{"earlier run not cut short (another attempt)", execution{JobID: "j1", Attempt: 2, Who: "worker1.2", OK: true, At: at}, markHold, false},
	} {
		next := execution{JobID: "j1", Attempt: 2, Who: "worker0.2", OK: true, At: at.Add(c.after)}
		if got := rerunAfterGiveUp(cut, []execution{next, c.first}); got != c.want {
			t.Errorf("%s: excused %v, want %v", c.name, got, c.want)
		}
	}
}

// The AOF probe measures a tail of answered writes that a restart did not
// bring back: Redis killed and its AOF cut back to an earlier length, as a
// SIGKILL during a held-back AOF write (or a host failure) leaves it. A
// SIGTERM, which flushes the AOF, loses nothing.
func TestTheAOFProbeMeasuresTheAnsweredWritesARestartLost(t *testing.T) {
	r := testenv.Redis(t, testenv.WithAOF())
	p := startAOFProbe(t, r.Addr())
	answered := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, w := range p.writes {
			if w.ok {
				n++
			}
		}
		return n
	}
	testenv.WaitFor(t, 10*time.Second, "the probe's first writes", func() bool { return answered() >= 20 })

	p.hold()
	r.Stop()
	r.Restart()
	if l, err := p.measure(context.Background()); err != nil || l.lost != 0 {
		t.Fatalf("after a SIGTERM: %v, %v; want nothing lost", l, err)
	}
	p.resume()

	aof := newestAOF(t, r.Dir())
	st, err := os.Stat(aof)
	if err != nil {
		t.Fatal(err)
	}
	cut, before := time.Now(), answered()
	testenv.WaitFor(t, 10*time.Second, "20 more writes", func() bool { return answered() >= before+20 })
	p.hold()
	r.Kill()
	if err := os.Truncate(aof, st.Size()); err != nil {
		t.Fatal(err)
	}
	r.Restart()
	l, err := p.measure(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.lost < 20 {
		t.Fatalf("lost %d answered writes, want the 20 or more after the cut", l.lost)
	}
	if l.from.After(cut) || l.from.Before(cut.Add(-time.Second)) {
		t.Fatalf("the loss begins at %s, want just before the cut at %s", l.from.Format("15:04:05.000"), cut.Format("15:04:05.000"))
	}
}

// newestAOF is the AOF file Redis 7 appends to now.
func newestAOF(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "appendonlydir", "*.incr.aof"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no incremental AOF file in %s/appendonlydir (%v)", dir, err)
	}
	sort.Strings(files)
	return files[len(files)-1]
}

// A keyed rerun is excused by an AOF loss only when the earlier run's
// record was due after the loss began, the run began before the kill and
// the next one after Redis was up again.
func TestARerunIsExcusedByAnAOFLossOnlyInsideIt(t *testing.T) {
	kill := time.Date(2026, 11, 27, 21, 46, 23, 500_000_000, time.UTC)
	up := kill.Add(200 * time.Millisecond)
	b := &bed{outages: []outage{{down: kill, up: up, loss: aofLoss{from: kill.Add(-800 * time.Millisecond), lost: 80}}}}
	run := func(at time.Time) execution {
		return execution{JobID: "j", Attempt: 1, Who: "worker0.2", OK: true, At: at, Answered: at.Add(5 * time.Millisecond)}
	}
	for _, c := range []struct {
		name        string
		first, next time.Time
		want        bool
	}{
		{"record due inside the lost tail", kill.Add(-200 * time.Millisecond), up.Add(time.Second), true},
		{"record due before the tail began", kill.Add(-2 * time.Second), up.Add(time.Second), false},
		{"next run before Redis was up", kill.Add(-200 * time.Millisecond), kill.Add(100 * time.Millisecond), false},
		{"first run after the kill", kill.Add(300 * time.Millisecond), up.Add(time.Second), false},
	} {
		if got := rerunAfterAOFLoss(b, []execution{run(c.next), run(c.first)}); got != c.want {
			t.Errorf("%s: excused %v, want %v", c.name, got, c.want)
		}
	}
	b.outages[0].loss = aofLoss{}
	if rerunAfterAOFLoss(b, []execution{run(up.Add(time.Second)), run(kill.Add(-200 * time.Millisecond))}) {
		t.Error("excused by an outage that lost nothing")
	}
}

// A periodic slot fired while the job topic was gone (deleted, and until
// every gate served it again) is answered 404, and the coordinator skips
// it: no run is owed for it. A slot missing outside that window still
// fails the verdict. (The Apache run of 2026-11-28 04:49 failed on a slot
// fired 1 s after the deletion.)
func TestAPeriodicSlotIsOwedOnlyWhileTheTopicExists(t *testing.T) {
	start := time.Date(2026, 11, 28, 4, 49, 30, 0, time.UTC)
	slot := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second) }
	newBed := func(missing ...int) *bed {
		b := &bed{t: t, ledger: &ledger{}}
		for i := 0; i < 20; i++ {
			if slices.Contains(missing, i) {
				continue
			}
			b.ledger.execs = append(b.ledger.execs, execution{JobID: periodic.JobID(periodicName, slot(i)), Attempt: 1, Who: "worker0.1", OK: true, At: slot(i)})
		}
		return b
	}
	// The topic gone from slot 9.5 to slot 12.2: slots 9 to 13 may be skipped.
	gone := func(b *bed) *bed {
		b.deletedAt, b.servedAgainAt = slot(9).Add(500*time.Millisecond), slot(12).Add(200*time.Millisecond)
		return b
	}
	if f, _ := periodicFailures(gone(newBed(10, 11)), slot(0), slot(19)); len(f) != 0 {
		t.Errorf("slots skipped while the topic was gone failed the verdict: %v", f)
	}
	if f, _ := periodicFailures(gone(newBed(10, 16)), slot(0), slot(19)); len(f) != 1 || !strings.Contains(f[0], "1 slots") || !strings.Contains(f[0], "04:49:46") {
		t.Errorf("a slot missing after the topic was back: failures %v, want the one slot 04:49:46", f)
	}
	if f, _ := periodicFailures(newBed(10), slot(0), slot(19)); len(f) != 1 {
		t.Errorf("a slot missing with no topic deleted: failures %v, want one", f)
	}
}
