package scenario

import (
	"math"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Hist is an HDR histogram of latencies in microseconds, from 1 µs to an
// hour, to 3 significant digits: a percentile is within 0.1% of the value
// recorded, whatever its size, and recording costs no allocation.
type Hist struct {
	h *hdrhistogram.Histogram
}

const histMax = int64(time.Hour / time.Microsecond)

// NewHist returns an empty histogram.
func NewHist() *Hist { return &Hist{h: hdrhistogram.New(1, histMax, 3)} }

// newCoarseHist is a histogram to 2 significant digits, up to a minute: one
// per second of a run for the latency-over-time series, small enough to
// keep thousands.
func newCoarseHist() *Hist {
	return &Hist{h: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 2)}
}

// Record adds one latency; values out of range are clamped to it.
func (h *Hist) Record(d time.Duration) {
	v := min(max(int64(d/time.Microsecond), 1), h.h.HighestTrackableValue())
	_ = h.h.RecordValue(v)
}

// Merge adds o's counts to h.
func (h *Hist) Merge(o *Hist) { h.h.Merge(o.h) }

// Count is how many latencies h holds.
func (h *Hist) Count() int64 { return h.h.TotalCount() }

// Quantile is the latency at q (0..1).
func (h *Hist) Quantile(q float64) time.Duration {
	return time.Duration(h.h.ValueAtQuantile(q*100)) * time.Microsecond
}

// Latency is a histogram's summary as reports carry it: milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	Min   float64 `json:"min_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

// Summary is h's count, mean and percentiles.
func (h *Hist) Summary() Latency {
	if h.Count() == 0 {
		return Latency{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		Count: h.Count(), Mean: round3(h.h.Mean() / 1000), Min: ms(h.h.Min()),
		P50: ms(h.h.ValueAtQuantile(50)), P90: ms(h.h.ValueAtQuantile(90)),
		P99: ms(h.h.ValueAtQuantile(99)), P999: ms(h.h.ValueAtQuantile(99.9)), Max: ms(h.h.Max()),
	}
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// recorder keeps a stream's latencies: all of them, and one coarse
// histogram per second of the run for the series. Safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	start   time.Time
	all     *Hist
	seconds []*Hist
}

func newRecorder(start time.Time) *recorder { return &recorder{start: start, all: NewHist()} }

// record adds a latency observed at now.
func (r *recorder) record(now time.Time, d time.Duration) {
	sec := max(int(now.Sub(r.start)/time.Second), 0)
	r.mu.Lock()
	for len(r.seconds) <= sec {
		r.seconds = append(r.seconds, nil)
	}
	if r.seconds[sec] == nil {
		r.seconds[sec] = newCoarseHist()
	}
	r.seconds[sec].Record(d)
	r.all.Record(d)
	r.mu.Unlock()
}

// summary is the whole run's.
func (r *recorder) summary() Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.all.Summary()
}

// window merges the seconds [from, to) of the run.
func (r *recorder) window(from, to int) *Hist {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := newCoarseHist()
	for s := max(from, 0); s < min(to, len(r.seconds)); s++ {
		if r.seconds[s] != nil {
			h.Merge(r.seconds[s])
		}
	}
	return h
}

// second is second s's histogram, nil when nothing was recorded then.
func (r *recorder) second(s int) *Hist {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s < 0 || s >= len(r.seconds) {
		return nil
	}
	return r.seconds[s]
}
