package coordinator

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkAggregate reads a completed 100,000-item group (each result
// ~40 bytes of JSON) and builds its callback body with the default
// reducer, spilling to a file above 4 MiB:
//
//	go test -run '^$' -bench Aggregate -benchtime 5x ./coordinator
func BenchmarkAggregate(b *testing.B) {
	const n = 100_000
	r := testenv.Redis(b)
	layout := queue.Keyspace{Stage: "bench", Partitions: 1}
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: r.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	if err := pool.LoadScripts(ctx); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	q := queue.Queue{Topic: "jobs", Part: 0}
	for from := 0; from < n; from += 1000 {
		items := make([]queue.Item, 0, 1001)
		for i := from; i < from+1000; i++ {
			// The total on every item: the group's results gather only
			// once the total is known (see the check below).
			items = append(items, queue.Item{ID: job.BulkID("big", int64(i)), Group: "big", Topic: "jobs", Weight: 1, GroupTotal: n, Envelope: []byte(`{}`)})
		}
		if from+1000 == n {
			items = append(items, queue.Item{Close: true, Group: "big", Topic: "jobs", GroupTotal: n, CallbackURL: "http://x/"})
		}
		if _, err := pool.Enqueue(ctx, 1, items, now); err != nil {
			b.Fatal(err)
		}
		jobs, err := pool.Claim(ctx, q, 1000, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		done := make([]queue.Done, len(jobs))
		for i, j := range jobs {
			done[i] = queue.Done{Job: j, Result: []byte(`{"id":"` + j.ID + `","status":"sent","n":` + strconv.Itoa(i) + `}`)}
		}
		if _, err := pool.AckMany(ctx, q, done, now, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	// Every item's result is in the group's results: the body carries
	// them all.
	if got, err := pool.Client(0).HLen(ctx, layout.Keys(q).Results("big")).Result(); err != nil || got != n {
		b.Fatalf("the group's results hold %d items, want %d (%v)", got, n, err)
	}
	cfg := DefaultConfig()
	cfg.RedisAddr, cfg.Stage, cfg.Partitions, cfg.SpillDir = r.Addr(), "bench", 1, b.TempDir()
	c, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	waits, err := c.openWaits()
	if err != nil {
		b.Fatal(err)
	}
	defer waits.pool.Close()
	w := c.newGroupWatcher(q, waits, func() bool { return true })
	st, err := pool.GroupStatus(ctx, "jobs", "big")
	if err != nil || st.CompletedAt.IsZero() {
		b.Fatalf("group not complete: %+v %v", st, err)
	}
	sum := GroupSummary{Group: "big", Topic: "jobs", Total: st.Total, Done: st.Done, CompletedAt: st.CompletedAt}
	b.ReportAllocs()
	var size int64
	for b.Loop() {
		body, err := w.aggregate(ctx, c.log, sum)
		if err != nil {
			b.Fatal(err)
		}
		size = body.Size
		io.Copy(io.Discard, io.NewSectionReader(body.Data, 0, body.Size))
		body.Close()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(size), "body-bytes")
}
