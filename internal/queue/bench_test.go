package queue

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// benchPool is a one-partition pool on a fresh Redis, scripts loaded.
func benchPool(b *testing.B) (*Pool, *testenv.RedisServer) {
	r := testenv.Redis(b)
	p, err := NewPool(PoolConfig{Keyspace: Keyspace{Stage: "bench", Partitions: 1}, Addr: r.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	if err := p.LoadScripts(context.Background()); err != nil {
		b.Fatal(err)
	}
	return p, r
}

// BenchmarkEnqueueScript: batches of 256 jobs into one partition, as the
// relay writes them (each with its Kafka position), on the shared lane
// (groups=0: jobs without a group) or spread over few or many groups,
// each with its Kafka topic id, which the script compares once per call,
// reporting Redis's own time per job (INFO commandstats) and its CPU per
// job (INFO cpu), the numbers that bound a relay.
//
//	go test ./internal/queue -run '^$' -bench EnqueueScript -benchtime 200000x
func BenchmarkEnqueueScript(b *testing.B) {
	for _, groups := range []int{0, 1, 16, 256} {
		b.Run("groups="+strconv.Itoa(groups), func(b *testing.B) {
			p, r := benchPool(b)
			ctx := context.Background()
			env := []byte(`{"id":"01J0000000000000000000000A","topic":"jobs","type":"email.send","group":"g","payload":{"to":"a@b.test","subject":"Hello <there>","body":"0123456789012345678901234567890123456789012345678901234567890123456789"},"enqueued_at":"2026-11-21T12:00:00Z"}`)
			items := make([]Item, 256)
			r.Client().ConfigResetStat(ctx)
			cpu := r.CPUSeconds(b)
			b.ResetTimer()
			for done := 0; done < b.N; done += len(items) {
				items = items[:min(cap(items), b.N-done)] // b.N jobs, no more
				for i := range items {
					items[i] = Item{ID: "j" + strconv.Itoa(done+i), Topic: "jobs", Weight: 1, Envelope: env,
						HasPosition: true, Offset: int64(done + i), TopicID: "Fh5nZy2rQ2ixv1u1qPA0QA"}
					if groups > 0 {
						items[i].Group = "g" + strconv.Itoa((done+i)%groups)
					}
				}
				res, err := p.Enqueue(ctx, 1, items, time.Now())
				if err != nil || res[0].Outcome != Queued {
					b.Fatal(res[0], err)
				}
			}
			b.StopTimer()
			b.ReportMetric(r.CommandMicros(b, "evalsha")/float64(b.N), "redis-µs/job")
			b.ReportMetric((r.CPUSeconds(b)-cpu)*1e6/float64(b.N), "redis-cpu-µs/job")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkClaimAck: claim in batches of 1 or 64 (one lease per batch)
// and ack the batch in one call, sequentially, one consumer. Each b.N is a
// job. Sequential round trips dominate, so it reports the PING round trip
// of the same run beside jobs/s, and Redis's own time and CPU per job.
//
//	go test ./internal/queue -run '^$' -bench ClaimAck -benchtime 100000x
func BenchmarkClaimAck(b *testing.B) {
	for _, c := range []struct {
		name          string
		batch, groups int // groups 0: one per job; -1: none (the shared lane)
	}{{"batch=1", 1, 100}, {"batch=64", 64, 100}, {"batch=64/group-per-job", 64, 0}, {"batch=64/no-group", 64, -1},
		// The end-to-end benchmark's shape: claims of 128 among 8 groups.
		{"batch=128/8-groups", 128, 8}, {"batch=128/no-group", 128, -1}} {
		batch := c.batch
		b.Run(c.name, func(b *testing.B) {
			p, r := benchPool(b)
			ctx := context.Background()
			items := make([]Item, 0, 1000)
			for i := 0; i < b.N; i++ {
				group := "g" + strconv.Itoa(i)
				if c.groups > 0 {
					group = "g" + strconv.Itoa(i%c.groups)
				} else if c.groups < 0 {
					group = ""
				}
				items = append(items, Item{ID: "j" + strconv.Itoa(i), Group: group, Topic: "jobs", Weight: 1, Envelope: []byte(`{"type":"noop"}`),
					HasPosition: true, Offset: int64(i)})
				if len(items) == cap(items) || i == b.N-1 {
					if _, err := p.Enqueue(ctx, 1, items, time.Now()); err != nil {
						b.Fatal(err)
					}
					items = items[:0]
				}
			}
			// The yardstick: a sequential round trip costs ~10 us on a quiet
			// host and ~160 us on a busy VM; claim+ack costs 3 of them.
			pingStart := time.Now()
			for range 1000 {
				r.Client().Ping(ctx)
			}
			ping := float64(time.Since(pingStart).Microseconds()) / 1000
			r.Client().ConfigResetStat(ctx)
			cpu := r.CPUSeconds(b)
			b.ResetTimer()
			lease := time.Hour
			for done := 0; done < b.N; {
				jobs, err := p.Claim(ctx, jq(0), min(batch, b.N-done), lease)
				if err != nil || len(jobs) == 0 {
					b.Fatalf("claim: %v %v", len(jobs), err)
				}
				acks := make([]Done, len(jobs))
				for i, j := range jobs {
					acks[i] = Done{Job: j}
				}
				ok, err := p.AckMany(ctx, jq(0), acks, time.Now(), time.Hour)
				if err != nil || !slices.Equal(ok, slices.Repeat([]bool{true}, len(jobs))) {
					b.Fatal(ok, err)
				}
				done += len(jobs)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(ping, "ping-µs")
			b.ReportMetric(r.CommandMicros(b, "evalsha")/float64(b.N), "redis-µs/job")
			b.ReportMetric((r.CPUSeconds(b)-cpu)*1e6/float64(b.N), "redis-cpu-µs/job")
		})
	}
}
