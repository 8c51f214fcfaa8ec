package queue

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkEnqueueScript: batches of 256 jobs into one partition, spread
// over few or many groups, reporting Redis's own time per job (INFO
// commandstats), the number that bounds a relay.
//
//	go test ./internal/queue -run '^$' -bench EnqueueScript -benchtime 200000x
func BenchmarkEnqueueScript(b *testing.B) {
	for _, groups := range []int{1, 16, 256} {
		b.Run("groups="+strconv.Itoa(groups), func(b *testing.B) {
			r := testenv.Redis(b)
			p, err := NewPool(PoolConfig{Layout: Layout{Stage: "bench", Partitions: 1}, Addr: r.Addr()})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			if err := p.LoadScripts(ctx); err != nil {
				b.Fatal(err)
			}
			env := []byte(`{"id":"01J0000000000000000000000A","topic":"jobs","type":"email.send","group":"g","payload":{"to":"a@b.test","subject":"Hello <there>","body":"0123456789012345678901234567890123456789012345678901234567890123456789"},"enqueued_at":"2026-11-21T12:00:00Z"}`)
			items := make([]Item, 256)
			r.Client().ConfigResetStat(ctx)
			b.ResetTimer()
			for done := 0; done < b.N; done += len(items) {
				for i := range items {
					items[i] = Item{ID: "j" + strconv.Itoa(done+i), Group: "g" + strconv.Itoa((done+i)%groups), Topic: "jobs", Weight: 1, Envelope: env}
				}
				if _, err := p.Enqueue(ctx, 1, items, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			info, _ := r.Client().Info(ctx, "commandstats").Result()
			for _, line := range strings.Split(info, "\n") {
				if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
					for _, kv := range strings.Split(strings.TrimSpace(rest), ",") {
						if v, ok := strings.CutPrefix(kv, "usec="); ok {
							us, _ := strconv.ParseFloat(v, 64)
							b.ReportMetric(us/float64(b.N), "redis-µs/job")
						}
					}
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
