package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/loadtest/openloop"
)

// Yardsticks are this machine's physical limits, measured in the same run
// as a scenario so that its numbers compare as ratios on a noisy machine.
type Yardsticks struct {
	// BareHTTP is requests/s of a handler that only reads the body and
	// answers 202 (sluice loadtest bare-server), under this generator's
	// closed loop with the single-job body: the ceiling of HTTP here, the
	// generator's cost included.
	BareHTTP float64 `json:"bare_http_requests_per_second"`
	// KfakeProduce is records/s of gate-sized records produced to an
	// in-process kfake (franz-go, acks=leader, 8 partitions): the
	// broker's ceiling, without the gate's sarama.
	KfakeProduce float64 `json:"kfake_produce_records_per_second"`
	// RedisEvalsha is redis-benchmark's calls/s of a 3-command EVALSHA,
	// pipelined 16 deep, against the pipeline's Redis (the relay's
	// yardstick in BENCHMARKS.md).
	RedisEvalsha float64 `json:"redis_benchmark_evalsha_per_second"`
	// ListFloor is the least Redis work per job the contract asks for
	// since the batch storage model (floor.go: envelopes on a list, a
	// lease per batch), on the pipeline's Redis: no pipeline through one
	// Redis goes faster than its rate with Redis at a whole core.
	ListFloor *JobFloor `json:"redis_list_floor,omitempty"`
	// JobFloor is the keyed floor, the old contract's (a key, a lease and
	// a done record per job), for comparison with earlier runs.
	JobFloor *JobFloor `json:"redis_job_floor,omitempty"`
	Errors   []string  `json:"errors,omitempty"`
}

// MeasureYardsticks runs each yardstick for d. bin is the sluice binary
// for the bare server (empty: served by this process).
func MeasureYardsticks(ctx context.Context, bin, redisAddr string, d time.Duration, progress *Progress) Yardsticks {
	var y Yardsticks
	var err error
	progress.Printf("yardstick: bare HTTP handler, %s\n", d)
	if y.BareHTTP, err = bareHTTP(ctx, bin, d); err != nil {
		y.Errors = append(y.Errors, "bare HTTP: "+err.Error())
	}
	progress.Printf("yardstick: kfake produce, %s\n", d)
	if y.KfakeProduce, err = kfakeProduce(ctx, d); err != nil {
		y.Errors = append(y.Errors, "kfake produce: "+err.Error())
	}
	progress.Printf("yardstick: redis-benchmark EVALSHA -P 16\n")
	if y.RedisEvalsha, err = redisBenchmark(ctx, redisAddr); err != nil {
		y.Errors = append(y.Errors, "redis-benchmark: "+err.Error())
	}
	progress.Printf("yardstick: the list floor in Redis (the contract's), %s\n", d)
	if f, err := measureListFloor(ctx, redisAddr, d, 4); err != nil {
		y.Errors = append(y.Errors, "list floor: "+err.Error())
	} else {
		y.ListFloor = &f
	}
	progress.Printf("yardstick: the keyed job floor in Redis (the old contract's), %s\n", d)
	if f, err := measureJobFloor(ctx, redisAddr, d, 4); err != nil {
		y.Errors = append(y.Errors, "job floor: "+err.Error())
	} else {
		y.JobFloor = &f
	}
	return y
}

func bareHTTP(ctx context.Context, bin string, d time.Duration) (float64, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	if bin != "" {
		cmd := exec.Command(bin, "loadtest", "bare-server", "--listen", addr)
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
	} else {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return 0, err
		}
		srv := ops.NewServer(openloop.BareHandler(), ops.DefaultHTTPLimits(), nil)
		go srv.Serve(ln)
		defer srv.Close()
	}
	client := &http.Client{Timeout: time.Second}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if resp, err := client.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-wctx.Done():
			return 0, errors.New("the bare server did not answer")
		case <-time.After(50 * time.Millisecond):
		}
	}
	w := &Workload{Run: "bare", Type: "noop", Payload: PaddedPayload(100), Groups: 1024}
	// The single phase's bodies: one job in 100 sampled (id and retain).
	l := &Load{Name: "bare", Gate: "http://" + addr, Topic: "jobs", Conns: 64, Duration: d, Batch: 1, Work: w, SampleEvery: singleSampleEvery}
	s := newStream(l, time.Now())
	if err := s.run(ctx); err != nil {
		return 0, err
	}
	r := s.result(s.start)
	return r.EnqueueRate, nil
}

func kfakeProduce(ctx context.Context, d time.Duration) (float64, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, "yardstick"))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
		kgo.ProducerLinger(time.Millisecond), kgo.MaxBufferedRecords(20000))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var acked atomic.Int64
	var firstErr error
	var mu sync.Mutex
	start := time.Now()
	deadline := start.Add(d)
	for seq := 0; time.Now().Before(deadline) && ctx.Err() == nil; seq++ {
		rec := &kgo.Record{Topic: "yardstick", Key: []byte("lt-g" + strconv.Itoa(seq%1024)), Value: gateEnvelope(0, seq)}
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			acked.Add(1)
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return 0, firstErr
	}
	return round3(float64(acked.Load()) / elapsed.Seconds()), nil
}

func redisBenchmark(ctx context.Context, addr string) (float64, error) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		return 0, errors.New("redis-benchmark not found (apt-get install redis-tools)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	sha, err := rdb.ScriptLoad(ctx, "redis.call('INCR', KEYS[1]); redis.call('HSET', KEYS[2], 'f', ARGV[1]); return redis.call('RPUSH', KEYS[3], ARGV[1])").Result()
	if err != nil {
		return 0, err
	}
	keys := []string{"{loadtest-yardstick}a", "{loadtest-yardstick}b", "{loadtest-yardstick}c"}
	defer rdb.Del(context.Background(), keys...)
	out, err := exec.CommandContext(ctx, "redis-benchmark", "-h", host, "-p", port, "-P", "16", "-n", "500000", "-q",
		"EVALSHA", sha, "3", keys[0], keys[1], keys[2], "v").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	return parseRedisBenchmark(string(out))
}

// parseRedisBenchmark reads the last "N requests per second" of
// redis-benchmark -q's output (it redraws with carriage returns).
func parseRedisBenchmark(out string) (float64, error) {
	v := -1.0
	for _, line := range strings.FieldsFunc(out, func(r rune) bool { return r == '\r' || r == '\n' }) {
		if !strings.Contains(line, "requests per second") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if n, err := strconv.ParseFloat(f, 64); err == nil {
				v = n
			}
			if f == "requests" {
				break
			}
		}
	}
	if v < 0 {
		return 0, fmt.Errorf("no rate in redis-benchmark's output %q", out)
	}
	return v, nil
}
