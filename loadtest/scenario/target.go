package scenario

import (
	"context"
	"errors"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
)

// Endpoints is where the pipeline under test is: sluice dev's defaults, or
// a deployment's addresses. The metrics URLs are the parts' /metrics.
type Endpoints struct {
	Gate  string `json:"gate"` // http://host:port
	Topic string `json:"topic"`
	Token string `json:"-"`
	// Acks is the acks level the jobs are posted with (?acks=): "" for the
	// gate's default (all), "leader" or "all".
	Acks        string `json:"acks,omitempty"`
	Redis       string `json:"redis"` // host:port
	Consul      string `json:"consul"`
	Relay       string `json:"relay"`       // http://host:port of its /metrics
	Worker      string `json:"worker"`      // same
	Coordinator string `json:"coordinator"` // same
	Stage       string `json:"stage"`
	Partitions  int    `json:"redis_partitions"`
	// KafkaPartitions is the topic's partition count (the hol scenario
	// tells which groups share a Kafka partition).
	KafkaPartitions int `json:"kafka_partitions"`
}

// DevEndpoints are `sluice dev`'s default addresses.
func DevEndpoints() Endpoints {
	return Endpoints{
		Gate: "http://127.0.0.1:8080", Topic: "jobs", Redis: "127.0.0.1:6390", Consul: "127.0.0.1:8500",
		Relay: "http://127.0.0.1:8081", Worker: "http://127.0.0.1:8082", Coordinator: "http://127.0.0.1:8083",
		Stage: "dev", Partitions: 8, KafkaPartitions: 8,
	}
}

// target is an open connection to the pipeline's state: its Redis
// partitions, Consul, and the parts' metrics.
type target struct {
	ep     Endpoints
	layout queue.Keyspace
	pool   *queue.Pool
	rdb    redis.UniversalClient // partition 0's server, for INFO
	consul *consulapi.Client
	http   *http.Client
	// procs are the stack's processes on this machine, when known (the
	// loadtest started it): their CPU is read from procRoot/<pid>/stat.
	procs    []Process
	procRoot string
}

func openTarget(ep Endpoints) (*target, error) {
	if ep.Partitions < 1 {
		return nil, errors.New("loadtest: the Redis partitions must be at least 1")
	}
	layout := queue.Keyspace{Stage: ep.Stage, Partitions: ep.Partitions}
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: layout, Addr: ep.Redis})
	if err != nil {
		return nil, err
	}
	t := &target{ep: ep, layout: layout, pool: pool, rdb: pool.Client(0), http: &http.Client{Timeout: 5 * time.Second}, procRoot: "/proc"}
	if ep.Consul != "" {
		cfg := consulapi.DefaultConfig()
		cfg.Address = ep.Consul
		if t.consul, err = consulapi.NewClient(cfg); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return t, nil
}

func (t *target) close() { t.pool.Close() }

// done is how many jobs Redis counted done, over every partition.
func (t *target) done(ctx context.Context) (int, error) {
	return doneCount(ctx, t.pool, t.layout, t.ep.Topic)
}

// memory is Redis's used_memory and maxmemory (0: none set).
func (t *target) memory(ctx context.Context) (used, maxmem int64, err error) {
	info, err := t.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, err
	}
	return infoInt(info, "used_memory"), infoInt(info, "maxmemory"), nil
}

func infoInt(info, field string) int64 {
	v, _ := infoField(info, field)
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// infoField is one field of a Redis INFO answer.
func infoField(info, field string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}

// doneAt reads the completion time (the worker's ack, Unix ms) of the
// given sampled jobs of w from their records, pipelined per partition. A
// sampled job carries retain, so the ack keeps its record job:<id> (state
// done, done_ms) in the job's partition: its group's, else its id's
// (Layout.PartitionOfJob). A job not done (or whose record expired) reads
// 0.
func (t *target) doneAt(ctx context.Context, w *Workload, seqs []int) ([]int64, error) {
	out := make([]int64, len(seqs))
	byPart := map[int][]int{} // partition -> indexes into seqs
	for i, seq := range seqs {
		p := t.layout.PartitionOfJob(w.Group(seq), w.ID(seq))
		byPart[p] = append(byPart[p], i)
	}
	const chunk = 2000
	for p, idx := range byPart {
		keys := t.layout.Keys(queue.Queue{Topic: t.ep.Topic, Part: p})
		for from := 0; from < len(idx); from += chunk {
			part := idx[from:min(from+chunk, len(idx))]
			pipe := t.pool.Client(p).Pipeline()
			cmds := make([]*redis.StringCmd, len(part))
			for j, i := range part {
				cmds[j] = pipe.HGet(ctx, keys.Job(w.ID(seqs[i])), "done_ms")
			}
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return nil, err
			}
			for j, i := range part {
				out[i], _ = cmds[j].Int64()
			}
		}
	}
	return out, nil
}

// scrape reads a part's /metrics.
func (t *target) scrape(ctx context.Context, base string) (metrics, error) {
	if base == "" {
		return nil, errors.New("no address")
	}
	fs, err := ops.Scrape(ctx, t.http, strings.TrimSuffix(base, "/")+"/metrics")
	return metrics(fs), err
}

// metrics is a /metrics page, by family name.
type metrics ops.Families

// sum adds a gauge's or counter's series up (0 when absent).
func (ms metrics) sum(name string) float64 {
	total := 0.0
	if mf := ms[name]; mf != nil {
		for _, m := range mf.GetMetric() {
			if v := ops.Value(m); !math.IsNaN(v) && !math.IsInf(v, 0) {
				total += v
			}
		}
	}
	return total
}

// byPartition is a gauge's value per "partition" label, for n partitions
// (NaN where absent).
func (ms metrics) byPartition(name string, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.NaN()
	}
	if mf := ms[name]; mf != nil {
		for _, m := range mf.GetMetric() {
			if p, err := strconv.Atoi(ops.Label(m, "partition")); err == nil && p >= 0 && p < n {
				out[p] = ops.Value(m)
			}
		}
	}
	return out
}

// histogram is a histogram's cumulative buckets, its series added up.
func (ms metrics) histogram(name string) Buckets { return ms.histogramWhere(name, nil) }

// histogramWhere is histogram over the series whose labels keep says.
func (ms metrics) histogramWhere(name string, keep func(labels map[string]string) bool) Buckets {
	var b Buckets
	mf := ms[name]
	if mf == nil {
		return b
	}
	counts := map[float64]uint64{}
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		if keep != nil {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if !keep(labels) {
				continue
			}
		}
		b.Count += h.GetSampleCount()
		b.Sum += h.GetSampleSum()
		for _, bk := range h.GetBucket() {
			counts[bk.GetUpperBound()] += bk.GetCumulativeCount()
		}
	}
	for le, n := range counts {
		b.Bounds = append(b.Bounds, Bucket{LE: le, Count: n})
	}
	sort.Slice(b.Bounds, func(i, j int) bool { return b.Bounds[i].LE < b.Bounds[j].LE })
	return b
}

// Buckets is a Prometheus histogram: cumulative counts by upper bound.
type Buckets struct {
	Count  uint64   `json:"count"`
	Sum    float64  `json:"sum"`
	Bounds []Bucket `json:"buckets"`
}

// Bucket is the count of observations at or under LE.
type Bucket struct {
	LE    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// MarshalJSON writes the +Inf bound as "+Inf" (JSON has no infinity).
func (b Bucket) MarshalJSON() ([]byte, error) {
	le := strconv.FormatFloat(b.LE, 'g', -1, 64)
	if math.IsInf(b.LE, 1) {
		le = `"+Inf"`
	}
	return []byte(`{"le":` + le + `,"count":` + strconv.FormatUint(b.Count, 10) + `}`), nil
}

// Sub is b minus an earlier scrape a of the same histogram: what was
// observed in between.
func (b Buckets) Sub(a Buckets) Buckets {
	out := Buckets{Count: b.Count - min(a.Count, b.Count), Sum: b.Sum - a.Sum}
	prev := map[float64]uint64{}
	for _, bk := range a.Bounds {
		prev[bk.LE] = bk.Count
	}
	for _, bk := range b.Bounds {
		out.Bounds = append(out.Bounds, Bucket{LE: bk.LE, Count: bk.Count - min(prev[bk.LE], bk.Count)})
	}
	return out
}

// Under is the share of observations at or under the bucket bound le
// (which must be one of the histogram's bounds; else NaN).
func (b Buckets) Under(le float64) float64 {
	if b.Count == 0 {
		return math.NaN()
	}
	for _, bk := range b.Bounds {
		if bk.LE == le {
			return float64(bk.Count) / float64(b.Count)
		}
	}
	return math.NaN()
}

// Quantile estimates the q quantile by linear interpolation inside its
// bucket, as Prometheus's histogram_quantile does; NaN when empty, the
// highest finite bound when q falls in the +Inf bucket.
func (b Buckets) Quantile(q float64) float64 {
	if b.Count == 0 || len(b.Bounds) == 0 {
		return math.NaN()
	}
	rank := q * float64(b.Count)
	lower, below := 0.0, uint64(0)
	for _, bk := range b.Bounds {
		if float64(bk.Count) >= rank {
			if math.IsInf(bk.LE, 1) {
				return lower
			}
			in := bk.Count - below
			if in == 0 {
				return bk.LE
			}
			return lower + (bk.LE-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = bk.LE, bk.Count
	}
	return lower
}

// consulPut writes a KV value; consulGet reads one (nil when absent).
func (t *target) consulPut(key string, value []byte) error {
	if t.consul == nil {
		return errors.New("loadtest: this scenario needs Consul (--consul)")
	}
	_, err := t.consul.KV().Put(&consulapi.KVPair{Key: key, Value: value}, nil)
	return err
}

func (t *target) consulGet(key string) ([]byte, error) {
	if t.consul == nil {
		return nil, errors.New("loadtest: this scenario needs Consul (--consul)")
	}
	kv, _, err := t.consul.KV().Get(key, nil)
	if err != nil || kv == nil {
		return nil, err
	}
	return kv.Value, nil
}

func (t *target) consulDelete(key string) error {
	if t.consul == nil {
		return nil
	}
	_, err := t.consul.KV().Delete(key, nil)
	return err
}
