package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"
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
