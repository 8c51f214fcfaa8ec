package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Workload says what the jobs of a stream are. Names must be JSON-safe
// and printable (letters, digits, '-', '_', '.', ':'), as the envelope
// rules want them.
//
// A job is plain unless it is sampled: no id (the gate assigns one, so the
// relay writes no record for a client-chosen id), no retain, so that it
// leaves nothing in Redis once done, as the batch storage model promises
// (docs/redis-layout.md). A sampled job, whose completion time the runner
// reads afterwards, carries the id "<Run>-<seq>" and retain: the worker's
// ack then keeps its record job:<id>, with done_ms, for that long.
type Workload struct {
	Run     string // unique per run: a sampled job's id must not repeat (the relay dedupes client-chosen ids)
	Type    string // job type: "noop"; sluice dev's worker sleeps for type "sleep" with {"ms": N}
	Payload []byte // the payload, raw JSON; nil for none
	// Groups spreads the jobs over this many groups, "<Run>-g<k>", round
	// robin; 0 (or less) posts them without a group: each joins its
	// partition's shared lane, its partition picked by its id.
	Groups int
	// GroupOf, if set, names job seq's group instead ("": none).
	GroupOf func(seq int) string
	// ResourceOf, if set, names job seq's rate-limit resource.
	ResourceOf func(seq int) string
}

// ID is job seq's id when it is sampled (a plain job's is the gate's).
func (w *Workload) ID(seq int) string { return w.Run + "-" + strconv.Itoa(seq) }

// Group is job seq's group, "" for none.
func (w *Workload) Group(seq int) string {
	switch {
	case w.GroupOf != nil:
		return w.GroupOf(seq)
	case w.Groups > 0:
		return w.Run + "-g" + strconv.Itoa(seq%w.Groups)
	}
	return ""
}

// AppendJob appends job seq's envelope: a plain job when retain is 0,
// else a sampled one, with its id and retain (whole seconds at least).
func (w *Workload) AppendJob(b []byte, seq int, retain time.Duration) []byte {
	b = append(b, '{')
	if retain > 0 {
		b = append(b, `"id":"`...)
		b = append(b, w.Run...)
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(seq), 10)
		b = append(b, `","retain":"`...)
		b = append(b, max(retain, time.Second).Round(time.Second).String()...)
		b = append(b, `",`...)
	}
	b = append(b, `"type":"`...)
	b = append(b, w.Type...)
	b = append(b, '"')
	if g := w.Group(seq); g != "" {
		b = append(b, `,"group":"`...)
		b = append(b, g...)
		b = append(b, '"')
	}
	if w.ResourceOf != nil {
		if r := w.ResourceOf(seq); r != "" {
			b = append(b, `,"resource":"`...)
			b = append(b, r...)
			b = append(b, '"')
		}
	}
	if w.Payload != nil {
		b = append(b, `,"payload":`...)
		b = append(b, w.Payload...)
	}
	return append(b, '}')
}

// PaddedPayload is a JSON object of size bytes (at least 10): {"pad":"xx…"}.
func PaddedPayload(size int) []byte {
	size = max(size, 10)
	return []byte(`{"pad":"` + strings.Repeat("x", size-10) + `"}`)
}

// Load is one stream of requests to the gate.
type Load struct {
	Name  string
	Gate  string // the gate's base URL, http://host:port
	Topic string
	Token string
	// Acks is the ?acks= of every request; "" leaves it to the gate.
	Acks string
	// Rate is requests per second, sent whatever the answers (open loop);
	// 0 sends the next request as soon as a connection has its answer
	// (closed loop, Conns in flight).
	Rate  float64
	Conns int
	// Jobs ends the stream after that many jobs; 0: after Duration.
	Jobs     int
	Duration time.Duration
	// Batch is the jobs per request: 1 (or 0) posts single jobs to
	// /jobs, more post NDJSON to /jobs:batch.
	Batch int
	// After delays the stream's start from the phase's.
	After time.Duration
	Work  *Workload
	// Which jobs are sampled (their completion times read afterwards):
	// every job when SampleAll; else one in SampleEvery jobs when it is
	// set; else one per request. A sampled job costs Redis a record (see
	// Workload), so a stream of single-job POSTs that measures throughput
	// samples one job in 100, as a stream of 100-job POSTs does.
	SampleAll   bool
	SampleEvery int
	// Retain is how long a sampled job's record is kept after it is done:
	// it must outlive the phase (the runner's default: 30 minutes more
	// than the phase may take).
	Retain time.Duration
	// MaxQueue bounds requests due and not yet sent (open loop); past it
	// they are counted as dropped.
	MaxQueue int
}

func (l *Load) batch() int { return max(l.Batch, 1) }

// requests is how many requests the stream sends; -1 when it runs for a
// duration in a closed loop.
func (l *Load) requests() int {
	switch {
	case l.Jobs > 0:
		return (l.Jobs + l.batch() - 1) / l.batch()
	case l.Rate > 0:
		return int(l.Rate * l.Duration.Seconds())
	}
	return -1
}

func (l *Load) url() string {
	u := strings.TrimSuffix(l.Gate, "/") + "/v1/topics/" + l.Topic + "/jobs"
	if l.batch() > 1 {
		u += ":batch"
	}
	if l.Acks != "" {
		u += "?acks=" + url.QueryEscape(l.Acks)
	}
	return u
}

// jobSample is a job whose completion is looked up afterwards: its seq and
// when it was sent (Unix ns; in an open loop, when it was due).
type jobSample struct {
	seq int
	at  int64
}

// stream is a Load while it runs.
type stream struct {
	l        *Load
	start    time.Time // the stream's own start (phase start + After)
	rec      *recorder // request latencies, by second of the phase
	requests atomic.Int64
	ok       atomic.Int64
	accepted atomic.Int64
	dropped  atomic.Int64
	finished atomic.Bool
	mu       sync.Mutex
	status   map[int]int
	samples  []jobSample
	end      time.Time // the last answer
	// keep is the sampled jobs' retain when the Load sets none: the
	// runner's, from the phase's longest wait.
	keep time.Duration
}

func newStream(l *Load, phaseStart time.Time) *stream {
	return &stream{l: l, start: phaseStart.Add(l.After), rec: newRecorder(phaseStart), status: map[int]int{}}
}

// run sends the stream's requests until they are all sent (or its
// duration passed, or ctx ended) and answered.
func (s *stream) run(ctx context.Context) error {
	l := s.l
	if l.Conns < 1 || l.Work == nil || (l.Jobs <= 0 && l.Duration <= 0) {
		return errors.New("loadtest: a stream needs connections, a workload, and jobs or a duration")
	}
	if l.Rate <= 0 && l.Jobs <= 0 && l.Duration <= 0 {
		return errors.New("loadtest: a closed loop needs jobs or a duration")
	}
	defer s.finished.Store(true)
	if d := time.Until(s.start); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	hdr := http.Header{}
	if l.Token != "" {
		hdr.Set("Authorization", "Bearer "+l.Token)
	}
	ct := "application/json"
	if l.batch() > 1 {
		ct = "application/x-ndjson"
	}
	total := l.requests()
	var due chan int
	var next atomic.Int64
	if l.Rate > 0 {
		due = make(chan int, max(l.MaxQueue, 100000))
	}
	deadline := s.start.Add(l.Duration)
	var wg sync.WaitGroup
	for range l.Conns {
		c, err := newHTTPConn(l.url(), ct, hdr, 30*time.Second)
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer c.close()
			var body []byte
			var samples []jobSample
			defer func() {
				s.mu.Lock()
				s.samples = append(s.samples, samples...)
				s.mu.Unlock()
			}()
			for {
				var i int
				var at time.Time
				if due != nil {
					var ok bool
					if i, ok = <-due; !ok {
						return
					}
					at = s.start.Add(time.Duration(float64(i) / l.Rate * float64(time.Second)))
				} else {
					i = int(next.Add(1) - 1)
					at = time.Now()
					if (total >= 0 && i >= total) || (l.Jobs <= 0 && !at.Before(deadline)) || ctx.Err() != nil {
						return
					}
				}
				body = s.body(body[:0], i)
				status, err := c.post(body)
				now := time.Now()
				if err != nil && ctx.Err() != nil {
					return
				}
				s.rec.record(now, now.Sub(at))
				n, ok := s.count(i, status, c.body.Bytes())
				s.requests.Add(1)
				if status >= 200 && status < 300 {
					s.ok.Add(1)
				}
				s.accepted.Add(int64(n))
				for _, seq := range s.sampled(i) {
					if ok(seq) {
						samples = append(samples, jobSample{seq, at.UnixNano()})
					}
				}
				s.mu.Lock()
				s.status[status]++
				s.end = now
				s.mu.Unlock()
			}
		})
	}
	if due != nil {
		s.dispatch(ctx, due, total)
		close(due)
	}
	wg.Wait()
	return ctx.Err()
}

// dispatch hands request i to the connections at its due time.
func (s *stream) dispatch(ctx context.Context, due chan<- int, total int) {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for i := 0; i < total; i++ {
		at := s.start.Add(time.Duration(float64(i) / s.l.Rate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
		select {
		case due <- i:
		default:
			s.dropped.Add(1)
		}
	}
}

// seqs is request i's jobs [from, to).
func (s *stream) seqs(i int) (from, to int) {
	b := s.l.batch()
	from, to = i*b, (i+1)*b
	if s.l.Jobs > 0 {
		to = min(to, s.l.Jobs)
	}
	return from, to
}

// body is request i's body: one envelope, or its jobs as NDJSON. Its
// sampled jobs carry their id and retain, the others neither.
func (s *stream) body(b []byte, i int) []byte {
	from, to := s.seqs(i)
	for seq := from; seq < to; seq++ {
		retain := time.Duration(0)
		if s.isSampled(i, seq) {
			retain = s.retain()
		}
		b = s.l.Work.AppendJob(b, seq, retain)
		if s.l.batch() > 1 {
			b = append(b, '\n')
		}
	}
	return b
}

// retain is how long a sampled job's record is kept: the Load's, else
// the phase's (set by the runner), else defaultRetain.
func (s *stream) retain() time.Duration { return cmp.Or(s.l.Retain, s.keep, defaultRetain) }

// defaultRetain keeps a sampled job's record for the reading after its
// phase: the runner adds the phase's longest wait to it.
const defaultRetain = 30 * time.Minute

// isSampled says whether job seq of request i is sampled: every job, or
// one in SampleEvery (at a position that moves from block to block of
// SampleEvery jobs), or one per request (at a position that moves from
// request to request).
func (s *stream) isSampled(i, seq int) bool {
	switch k := s.l.SampleEvery; {
	case s.l.SampleAll:
		return true
	case k > 0:
		return seq%k == (seq/k)%k
	}
	from, to := s.seqs(i)
	return seq == from+i%max(to-from, 1)
}

// sampled is the jobs of request i whose completion is read afterwards.
func (s *stream) sampled(i int) []int {
	from, to := s.seqs(i)
	var out []int
	for seq := from; seq < to; seq++ {
		if s.isSampled(i, seq) {
			out = append(out, seq)
		}
	}
	return out
}

// count is how many of request i's jobs the gate accepted, and which.
func (s *stream) count(i, status int, body []byte) (int, func(seq int) bool) {
	from, to := s.seqs(i)
	switch {
	case status == http.StatusAccepted || (status >= 200 && status < 300 && status != http.StatusMultiStatus):
		return to - from, func(int) bool { return true }
	case status == http.StatusMultiStatus:
		var ans struct {
			Results []struct {
				Index  int `json:"index"`
				Status int `json:"status"`
			} `json:"results"`
		}
		if json.Unmarshal(body, &ans) != nil {
			return 0, func(int) bool { return false }
		}
		ok := map[int]bool{}
		for _, r := range ans.Results {
			if r.Status >= 200 && r.Status < 300 {
				ok[from+r.Index] = true
			}
		}
		return len(ok), func(seq int) bool { return ok[seq] }
	}
	return 0, func(int) bool { return false }
}

// result is the stream's report, once it ran.
func (s *stream) result(phaseStart time.Time) StreamResult {
	l := s.l
	mode := "closed"
	if l.Rate > 0 {
		mode = "open"
	}
	s.mu.Lock()
	status := map[string]int{}
	for code, n := range s.status {
		status[strconv.Itoa(code)] = n
	}
	end := s.end
	s.mu.Unlock()
	r := StreamResult{
		Name: l.Name, Mode: mode, Rate: l.Rate, Conns: l.Conns, Batch: l.batch(), PayloadBytes: len(l.Work.Payload),
		JobType: l.Work.Type, StartSeconds: l.After.Seconds(),
		Requests: int(s.requests.Load()), OK: int(s.ok.Load()), Dropped: int(s.dropped.Load()),
		JobsAccepted: int(s.accepted.Load()), Status: status, Enqueue: s.rec.summary(),
	}
	if !end.IsZero() {
		r.SendSeconds = round3(end.Sub(s.start).Seconds())
		if r.SendSeconds > 0 {
			r.EnqueueRate = round3(float64(r.JobsAccepted) / r.SendSeconds)
		}
	}
	return r
}
