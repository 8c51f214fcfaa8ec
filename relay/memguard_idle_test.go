package relay

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// An idle relay's memory guard samples Redis every idleSamples periods,
// not every period (issue 34: idle costs next to nothing), and the first
// reservation after the quiet brings a sample at once rather than at the
// end of the long wait.
func TestMemGuardSamplesSlowlyWhileNothingIsWritten(t *testing.T) {
	r := testenv.Redis(t)
	rdb := r.Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const period = 50 * time.Millisecond
	g := newMemGuard(rdb, r.Addr(), 0.8, 0.7, period, slog.New(slog.DiscardHandler), nil)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// The window measured: 2 s idle is 40 periods, 5 long waits.
	time.Sleep(2 * time.Second)
	if n := infoCalls(t, rdb.Info(ctx, "commandstats").Val()); n > 2*time.Second.Nanoseconds()/(idleSamples*period).Nanoseconds()+2 {
		t.Fatalf("%d INFO calls in 2 s idle at a %s period; want about one per %s (the old guard: one per period, 40)", n, period, idleSamples*period)
	}
	// A write: the guard samples again now, not at the end of its wait.
	g.mu.Lock()
	next := g.sampled
	g.mu.Unlock()
	start := time.Now()
	if err := g.Reserve(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	select {
	case <-next:
		if d := time.Since(start); d > idleSamples*period/2 {
			t.Fatalf("the sample after a reservation came %s later; want it at once, well before the idle wait (%s) ends", d, idleSamples*period)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no sample after a reservation")
	}
}

func infoCalls(t *testing.T, stats string) int64 {
	t.Helper()
	for _, l := range strings.Split(stats, "\r\n") {
		if rest, ok := strings.CutPrefix(l, "cmdstat_info:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
