package relay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/relay"
)

// BenchmarkRelayUnthrottled: jobs already in kfake (8 partitions) moved into
// one Redis (8 partitions) by one relay, as fast as it goes. Each b.N is a
// job. Run:
//
//	go test ./relay -run '^$' -bench RelayUnthrottled -benchtime 200000x
func BenchmarkRelayUnthrottled(b *testing.B) {
	bed := newBenchBed(b)
	bed.produceN(b, b.N)
	b.ResetTimer()
	bed.startB(b, func(c *relay.Config) { c.BatchSize = 1024 })
	bed.waitCount(b, b.N, 10*time.Minute)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(bed.redis.CommandMicros(b, "evalsha")/float64(b.N), "redis-µs/job")
}

// BenchmarkRelayHoldsRate: the relay rate set in Consul to 20,000 jobs/s
// with a burst of 1,000, over a long enough backlog; reports the achieved
// rate over the middle of the run (after the first second). Run:
//
//	go test ./relay -run '^$' -bench RelayHoldsRate -benchtime 1x -timeout 10m
func BenchmarkRelayHoldsRate(b *testing.B) {
	const rate, window = 20000, 60 * time.Second
	bed := newBenchBed(b)
	if _, err := bed.consul.Client().KV().Put(&consulapi.KVPair{
		Key: "sluice/test/relay/" + topic + "/rate", Value: []byte(`{"rate":20000,"burst":1000}`),
	}, nil); err != nil {
		b.Fatal(err)
	}
	bed.produceN(b, rate*int(window/time.Second)+3*rate)
	b.ResetTimer()
	bed.startB(b, func(c *relay.Config) { c.BatchSize = 256 })
	bed.waitCount(b, rate/2, time.Minute)
	time.Sleep(time.Second) // settle: the first second includes start-up
	before := bed.relayedTotal(b)
	start := time.Now()
	time.Sleep(window) // the measurement window itself
	after := bed.relayedTotal(b)
	got := float64(after-before) / time.Since(start).Seconds()
	b.ReportMetric(got, "jobs/s")
	b.ReportMetric(100*(got-rate)/rate, "%off")
}

// newBenchBed is newBed for benchmarks, with 8 Kafka and Redis partitions.
func newBenchBed(b *testing.B) *bed {
	return newBedTB(b, 8)
}

func (bd *bed) relayedTotal(b *testing.B) int {
	total := 0
	for p := range bd.layout.Partitions {
		v, _ := bd.redis.Client().HGet(context.Background(), bd.layout.Keys(queue.Queue{Topic: topic, Part: p}).Stats(), "relayed").Int()
		total += v
	}
	return total
}

func (bd *bed) produceN(b *testing.B, n int) {
	b.Helper()
	msgs := make([]kafka.Message, 0, 10000)
	flush := func() {
		res, err := bd.prod.Produce(context.Background(), kafka.AcksLeader, msgs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
		msgs = msgs[:0]
	}
	for i := range n {
		id, group := "j"+strconv.Itoa(i), "g"+strconv.Itoa(i%1000)
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(group), Value: envelope(id, group), Partition: -1})
		if len(msgs) == cap(msgs) {
			flush()
		}
	}
	if len(msgs) > 0 {
		flush()
	}
}
