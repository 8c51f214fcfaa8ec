package worker_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// An idle worker's round trips to Redis (issue 34: idle costs next to
// nothing): while every consumer blocks on its wake and command lists,
// the maintainer does not pop the command list too (the BLPOP takes
// commands), and a consumer's BLPOP runs for IdleRecheck (5 s here),
// not a fixed second.
// Over a 3 s window with the bed's Maintain of 20 ms, the old code made
// 282 LPOPs and 4 BLPOPs over 2 partitions.
func TestAnIdleWorkerDoesNotPollItsLists(t *testing.T) {
	b := newBed(t)
	b.start(t, func(c *worker.Config) { c.IdleRecheck = 5 * time.Second }, func(w *worker.Worker) { w.Handle("t", worker.Noop) })
	rdb := b.redis.Client()
	ctx := context.Background()
	waitAllBlocked(t, b)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The window measured: how many calls an idle second costs is the
	// point, so it is a duration, not a condition to wait for.
	time.Sleep(3 * time.Second)
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := func(cmd string) int { return commandCalls(stats, cmd) }
	parts := b.layout.Partitions
	if n := calls("lpop"); n > 0 {
		t.Errorf("%d LPOPs in 3 s of an idle worker over %d partitions; want none while its consumers block on the command lists", n, parts)
	}
	// At most one BLPOP per partition ends in the window (a 5 s wait
	// that began before it), and the claims after one.
	if n := calls("blpop"); n > parts {
		t.Errorf("%d BLPOPs in 3 s over %d partitions; want at most one each (IdleRecheck 5s)", n, parts)
	}
}

// An idle consumer claims once per IdleRecheck, when its BLPOP runs out:
// the probe for topics with work again (topics.go) is for a consumer that
// others keep busy, and must not add a second claim while all are empty.
// The maintainer, which also reads with ZRANGE (due delayed jobs), ticks
// past the window here, so every ZRANGE is a claim's read of its lanes.
func TestAnIdleConsumerClaimsOncePerRecheck(t *testing.T) {
	b := newBed(t)
	b.start(t, func(c *worker.Config) { c.IdleRecheck, c.Maintain = time.Second, time.Minute },
		func(w *worker.Worker) { w.Handle("t", worker.Noop) })
	rdb := b.redis.Client()
	ctx := context.Background()
	waitAllBlocked(t, b)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the window measured, as above
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	blpops, zranges := commandCalls(stats, "blpop"), commandCalls(stats, "zrange")
	if blpops == 0 {
		t.Fatalf("no BLPOP ran out in 3 s with IdleRecheck 1s: %s", stats)
	}
	if zranges > blpops {
		t.Errorf("%d lane reads (ZRANGE) for %d BLPOPs in 3 s of idle consumers; want at most one per BLPOP", zranges, blpops)
	}
}

// commandCalls is cmd's calls in an INFO commandstats answer.
func commandCalls(stats, cmd string) int {
	for _, l := range strings.Split(stats, "\r\n") {
		if rest, ok := strings.CutPrefix(l, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// A stop does not wait out an idle consumer's BLPOP (IdleRecheck): go-redis
// leaves a blocked command to its timeout when its context ends, so each
// consumer also waits on a stop list of its own, which the stop pushes to.
// Before it, Run returned only when every BLPOP had run out.
func TestAnIdleWorkerStopsAtOnce(t *testing.T) {
	b := newBed(t)
	stop := b.start(t, func(c *worker.Config) { c.IdleRecheck = time.Minute }, func(w *worker.Worker) { w.Handle("t", worker.Noop) })
	rdb := b.redis.Client()
	ctx := context.Background()
	waitAllBlocked(t, b)
	start := time.Now()
	stop()
	// Well under the minute a BLPOP would hold the stop, and far above
	// what a stop takes, however slow the machine.
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("an idle worker took %s to stop with IdleRecheck 1m; want no wait for its BLPOPs", took.Round(time.Millisecond))
	}
	if info := rdb.Info(ctx, "clients").Val(); !strings.Contains(info, "blocked_clients:0\r") {
		t.Fatalf("clients still blocked after the stop: %s", info)
	}
}

// waitAllBlocked waits until every consumer of the bed's worker blocks on
// its lists: idle.
func waitAllBlocked(t *testing.T, b *bed) {
	t.Helper()
	rdb := b.redis.Client()
	testenv.WaitFor(t, 5*time.Second, "the consumers to block on their wake lists", func() bool {
		info, err := rdb.Info(context.Background(), "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:"+strconv.Itoa(b.layout.Partitions)+"\r")
	})
}
