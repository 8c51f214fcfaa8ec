package scenario

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// What sampling costs Redis: the same jobs through the relay's enqueue and
// the worker's claim and ack (internal/queue, as sluice runs them), plain
// and sampled. A sampled job carries a client-chosen id (the enqueue
// writes its record, HSETNX with the dedupe TTL) and retain (the ack marks
// the record done and keeps it that long); a plain job leaves nothing.
//
//	go test ./loadtest/scenario -run '^$' -bench SampledJobCost -benchtime 1x
func BenchmarkSampledJobCost(b *testing.B) {
	for _, sampled := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "sampled"}[sampled], func(b *testing.B) {
			srv := testenv.Redis(b, testenv.WithAOF())
			for range b.N {
				c := runJobs(b, srv, 50000, sampled)
				b.ReportMetric(c.redisMicros, "redis-µs/job")
				b.ReportMetric(c.queuedBytes, "queued-B/job")
				b.ReportMetric(c.keptBytes, "kept-B/job")
			}
		})
	}
}

// A sampled job leaves its record, in the partition PartitionOfJob picks,
// with done_ms; a plain job leaves no key. With and without a group.
func TestSampledJobsKeepARecord(t *testing.T) {
	srv := testenv.Redis(t)
	c := runJobs(t, srv, 400, true)
	if c.records != 400 {
		t.Fatalf("%d records of 400 sampled jobs", c.records)
	}
	srv.Client().FlushAll(context.Background())
	c = runJobs(t, srv, 400, false)
	if c.records != 0 || c.keys != 0 {
		t.Fatalf("plain jobs left %d records, %d keys besides the partitions' own", c.records, c.keys)
	}
}

type jobCost struct {
	redisMicros, queuedBytes, keptBytes float64
	records, keys                       int
}

// runJobs enqueues n no-op jobs as the relay would (half of them in 64
// groups, half without), claims and acks them all as the worker would, and
// measures Redis's CPU per job and its memory per queued and per done job.
func runJobs(tb testing.TB, srv *testenv.RedisServer, n int, sampled bool) jobCost {
	ctx := context.Background()
	layout := queue.Keyspace{Stage: "cost", Partitions: 8}
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: srv.Addr()})
	if err != nil {
		tb.Fatal(err)
	}
	defer pool.Close()
	if err := pool.LoadScripts(ctx); err != nil {
		tb.Fatal(err)
	}
	rdb := srv.Client()
	mem := func() float64 {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			tb.Fatal(err)
		}
		return float64(infoInt(info, "used_memory"))
	}
	// Even jobs in 64 groups, odd ones without a group.
	group := func(seq int) string {
		if seq%2 == 0 {
			return "cost-g" + strconv.Itoa(seq%128/2)
		}
		return ""
	}
	w := &Workload{Run: "cost", GroupOf: group}
	retain := 30 * time.Minute
	cpu0, _ := redisCPU(ctx, rdb)
	mem0 := mem()
	items := make([]queue.Item, 0, 256)
	now := time.Now()
	for seq := range n {
		j := &job.Job{ID: "01LOADTEST000" + strconv.Itoa(1e12 + seq)[1:], Type: "noop", Group: group(seq), Topic: "jobs",
			Payload: gatePayload, EnqueuedAt: now}
		if sampled {
			j.ID, j.IDGiven, j.Retain = w.ID(seq), true, job.Duration(retain)
		}
		items = append(items, queue.Item{ID: j.ID, Group: j.Group, Topic: "jobs", IDGiven: sampled, Weight: 1,
			KafkaPartition: int32(seq % 8), Offset: int64(seq / 8), HasPosition: true, Envelope: j.AppendJSON(nil)})
		if len(items) == cap(items) || seq == n-1 {
			res, err := pool.Enqueue(ctx, 1, items, now)
			if err != nil {
				tb.Fatal(err)
			}
			for _, r := range res {
				if r.Outcome != queue.Queued {
					tb.Fatalf("enqueue: %v %v", r.Outcome, r.Err)
				}
			}
			items = items[:0]
		}
	}
	queued := mem()
	acked := 0
	for part := range layout.Partitions {
		for {
			got, err := pool.Claim(ctx, queue.Queue{Topic: "jobs", Part: part}, 256, time.Minute)
			if err != nil {
				tb.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			done := make([]queue.Done, len(got))
			for i, c := range got {
				done[i] = queue.Done{Job: c}
				if sampled {
					done[i].Retain = retain
				}
			}
			if _, err := pool.AckMany(ctx, queue.Queue{Topic: "jobs", Part: part}, done, time.Now(), time.Hour); err != nil {
				tb.Fatal(err)
			}
			acked += len(got)
		}
	}
	cpu1, _ := redisCPU(ctx, rdb)
	if acked != n {
		tb.Fatalf("acked %d of %d", acked, n)
	}
	c := jobCost{redisMicros: round3((cpu1 - cpu0) * 1e6 / float64(n)), queuedBytes: round3((queued - mem0) / float64(n)),
		keptBytes: round3((mem() - mem0) / float64(n))}
	tg := &target{ep: Endpoints{Topic: "jobs"}, layout: layout, pool: pool}
	seqs := make([]int, n)
	for i := range seqs {
		seqs[i] = i
	}
	if sampled {
		at, err := tg.doneAt(ctx, w, seqs)
		if err != nil {
			tb.Fatal(err)
		}
		for _, ms := range at {
			if ms > 0 {
				c.records++
			}
		}
	}
	for part := range layout.Partitions {
		prefix := layout.Keys(queue.Queue{Topic: "jobs", Part: part}).Prefix()
		keys, err := pool.Client(part).Keys(ctx, prefix+"*").Result()
		if err != nil {
			tb.Fatal(err)
		}
		for _, k := range keys {
			name := strings.TrimPrefix(k, prefix)
			switch {
			case slices.Contains([]string{"stats", "vt", "shared", "wm", "fence", "wake", "lanes"}, name),
				strings.HasPrefix(name, "group:"): // a group's counters, kept for --result-ttl
			case strings.HasPrefix(name, "job:"):
				if !sampled {
					c.records++
				}
			default:
				c.keys++
				tb.Logf("left behind: %s", k)
			}
		}
	}
	return c
}
