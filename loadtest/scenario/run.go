package scenario

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"
)

// Runner runs phases against one pipeline and reports progress.
type Runner struct {
	ep       Endpoints
	t        *target
	progress *Progress
}

// NewRunner connects to the pipeline's Redis (and Consul); progress may be
// nil.
func NewRunner(ep Endpoints, progress *Progress) (*Runner, error) {
	t, err := openTarget(ep)
	if err != nil {
		return nil, err
	}
	if progress == nil {
		progress = NewProgress(io.Discard, false)
	}
	return &Runner{ep: ep, t: t, progress: progress}, nil
}

// Close releases the runner's connections.
func (r *Runner) Close() { r.t.close() }

// SetProcesses names the stack's processes on this machine (Dev.Processes):
// each phase then reports the CPU of each one (CPUUse.Parts).
func (r *Runner) SetProcesses(ps []Process) { r.t.procs = ps }

// Endpoints is where the runner sends load.
func (r *Runner) Endpoints() Endpoints { return r.ep }

// load returns a Load aimed at the runner's gate.
func (r *Runner) load(name string, w *Workload) *Load {
	return &Load{Name: name, Gate: r.ep.Gate, Topic: r.ep.Topic, Token: r.ep.Token, Acks: r.ep.Acks, Work: w}
}

// Phase is streams of load run together, then (WaitDone) the wait until
// Redis counted every accepted job done.
type Phase struct {
	Name    string
	Streams []*Load
	// WaitDone waits for the jobs' completion, at most DoneTimeout
	// (default 10 minutes) after the last stream ended.
	WaitDone    bool
	DoneTimeout time.Duration
	// MaxSamples bounds the completion times read from Redis afterwards
	// (default 200,000): past it, every k-th sample is read.
	MaxSamples int
}

// PhaseResult is what a phase measured. Times are from the phase's start.
type PhaseResult struct {
	Name    string         `json:"name"`
	Started time.Time      `json:"started"`
	Streams []StreamResult `json:"streams"`
	// Accepted is the jobs the gate accepted, all streams; Completed the
	// jobs Redis counted done from the phase's start until the wait ended
	// (other traffic included).
	Accepted  int `json:"jobs_accepted"`
	Completed int `json:"jobs_completed"`
	// AllDone: Redis counted at least Accepted done before the timeout.
	AllDone bool `json:"all_done"`
	// SendSeconds is until the last answer; DoneSeconds until Redis had
	// counted Accepted jobs done (polled every donePoll).
	SendSeconds float64 `json:"send_seconds"`
	DoneSeconds float64 `json:"done_seconds"`
	// EnqueueRate is Accepted / SendSeconds; EndToEndRate Accepted /
	// DoneSeconds: jobs through the whole pipeline per second.
	EnqueueRate  float64 `json:"enqueue_jobs_per_second"`
	EndToEndRate float64 `json:"end_to_end_jobs_per_second"`
	// EnqueueToStart is the worker's sluice_worker_queue_wait_seconds
	// observed during the phase: from the gate's enqueued_at to the first
	// attempt's start, in the worker's buckets.
	EnqueueToStart Buckets `json:"enqueue_to_start"`
	// EnqueueToDone is the worker's sluice_worker_enqueue_to_done_seconds
	// observed during the phase: every job, from enqueued_at to its ack
	// recorded, in the worker's buckets (the sampled jobs' exact times are
	// in each stream's EnqueueToDone).
	EnqueueToDone Buckets `json:"enqueue_to_done"`
	// Series is the pipeline's state, once a second.
	Series []Sample `json:"series"`
	// RedisMaxMemory is the highest used_memory / maxmemory sampled (0: no
	// maxmemory); GuardPausedSeconds the samples in which the relay's
	// memory guard held it.
	RedisMaxMemory     float64 `json:"redis_max_memory_ratio"`
	RedisMaxUsedMB     float64 `json:"redis_max_used_mb"`
	GuardPausedSeconds int     `json:"relay_guard_paused_samples"`
	// CPU is where the machine's time went, from the phase's start until
	// it ended (all done, or the last answer when it does not wait).
	CPU    *CPUUse  `json:"cpu,omitempty"`
	Errors []string `json:"errors,omitempty"`
}

// Sample is the pipeline's state at T seconds from the phase's start.
type Sample struct {
	T float64 `json:"t"`
	// Accepted is jobs accepted in the second before, per stream; Done
	// jobs Redis counted done in it.
	Accepted []int `json:"accepted"`
	Done     int   `json:"done"`
	// Ready and Workers are the coordinator's view per partition (its
	// sluice_coordinator_scaling_ready_jobs and _workers gauges, updated
	// each scaling cycle); NaN where absent.
	Ready   []float64 `json:"ready"`
	Workers []float64 `json:"workers"`
	// RedisMemory is used_memory / maxmemory, RedisUsedMB used_memory.
	RedisMemory float64 `json:"redis_memory_ratio"`
	RedisUsedMB float64 `json:"redis_used_mb"`
	// GuardPaused is the relay's sluice_relay_memory_guard_paused, summed;
	// RelayLag its sluice_relay_lag_messages: the Kafka backlog.
	GuardPaused float64 `json:"relay_guard_paused"`
	RelayLag    float64 `json:"relay_lag"`
}

// StreamResult is one stream's numbers.
type StreamResult struct {
	Name         string         `json:"name"`
	Mode         string         `json:"mode"` // open or closed loop
	Rate         float64        `json:"rate,omitempty"`
	Conns        int            `json:"conns"`
	Batch        int            `json:"batch"`
	PayloadBytes int            `json:"payload_bytes"`
	JobType      string         `json:"job_type"`
	StartSeconds float64        `json:"start_seconds"`
	Requests     int            `json:"requests"`
	OK           int            `json:"requests_ok"`
	Dropped      int            `json:"dropped"`
	Status       map[string]int `json:"status"`
	JobsAccepted int            `json:"jobs_accepted"`
	SendSeconds  float64        `json:"send_seconds"`
	EnqueueRate  float64        `json:"enqueue_jobs_per_second"`
	// Enqueue is each request's latency: from its due time in an open
	// loop (so a stall counts for every request it delayed), from its
	// send in a closed loop.
	Enqueue Latency `json:"enqueue"`
	// EnqueueToDone is sampled jobs' time from the same start to the
	// worker's ack in Redis (done_ms, 1 ms resolution; half a millisecond
	// is added to each). Missing is sampled jobs not done (or expired).
	EnqueueToDone Latency `json:"enqueue_to_done"`
	Sampled       int     `json:"sampled"`
	Missing       int     `json:"sampled_missing"`
	// Latency over time: the enqueue latency's percentiles in each second.
	Series []LatencyPoint `json:"latency_series"`
	jobs   []jobDone
	rec    *recorder
}

// LatencyPoint is a second's enqueue latency.
type LatencyPoint struct {
	T     float64 `json:"t"`
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
}

// jobDone is a sampled job: when it was sent and done, Unix ns (done 0:
// not done).
type jobDone struct {
	seq      int
	at, done int64
}

// Run runs a phase and reports what it measured.
func (r *Runner) Run(ctx context.Context, ph Phase) (PhaseResult, error) {
	if ph.DoneTimeout <= 0 {
		ph.DoneTimeout = 10 * time.Minute
	}
	if ph.MaxSamples <= 0 {
		ph.MaxSamples = 200000
	}
	res := PhaseResult{Name: ph.Name}
	done0, err := r.t.done(ctx)
	if err != nil {
		return res, fmt.Errorf("reading Redis's done counters at %s: %w", r.ep.Redis, err)
	}
	wait0, done0h := r.workerHistograms(ctx)
	cpu0 := r.t.cpuMark(ctx)
	start := time.Now()
	res.Started = start
	streams := make([]*stream, len(ph.Streams))
	for i, l := range ph.Streams {
		streams[i] = newStream(l, start)
		// A sampled job's record must outlive the phase: its sending, the
		// wait for the last job, and the reading after it.
		streams[i].keep = defaultRetain + l.After + l.Duration + ph.DoneTimeout
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(streams))
	for i, s := range streams {
		wg.Go(func() { errs[i] = s.run(runCtx) })
	}
	sent := make(chan struct{})
	go func() { wg.Wait(); close(sent) }()

	// Observe once a second, show progress four times a second, and poll
	// the done counter every 50 ms once the load has been sent.
	sampler := &sampler{r: r, start: start, streams: streams, done0: done0}
	sampler.observe(ctx)
	obs := time.NewTicker(time.Second)
	defer obs.Stop()
	prog := time.NewTicker(250 * time.Millisecond)
	defer prog.Stop()
	var poll <-chan time.Time
	var waitUntil time.Time
	accepted := func() int {
		n := 0
		for _, s := range streams {
			n += int(s.accepted.Load())
		}
		return n
	}
	doneNow := 0
	ended := false
	for !ended {
		select {
		case <-sent:
			sent = nil
			res.SendSeconds = round3(time.Since(start).Seconds())
			if !ph.WaitDone {
				ended = true
				break
			}
			waitUntil = time.Now().Add(ph.DoneTimeout)
			// The phase ends at the first poll that finds every job done:
			// a poll costs Redis one HGET per partition, and a coarse one
			// would add up to its period to a phase of a second or two
			// (50 ms was 4% of the asynq comparison's batch phase).
			p := time.NewTicker(donePoll)
			defer p.Stop()
			poll = p.C
		case <-poll:
			n, err := r.t.done(ctx)
			if err != nil {
				continue
			}
			doneNow = n - done0
			if doneNow >= accepted() {
				res.AllDone = true
				res.DoneSeconds = round3(time.Since(start).Seconds())
				ended = true
			} else if time.Now().After(waitUntil) {
				res.Errors = append(res.Errors, fmt.Sprintf("%d of %d jobs done after waiting %s", doneNow, accepted(), ph.DoneTimeout))
				ended = true
			}
		case <-obs.C:
			sampler.observe(ctx)
		case <-prog.C:
			r.progress.Update(sampler.progressLine(ph, sent == nil, doneNow))
		case <-ctx.Done():
			cancel()
			<-sentOrClosed(sent)
			r.progress.Done()
			return res, ctx.Err()
		}
	}
	cpu1 := r.t.cpuMark(ctx)
	sampler.observe(ctx)
	r.progress.Done()
	for _, err := range errs {
		if err != nil && ctx.Err() == nil {
			res.Errors = append(res.Errors, err.Error())
		}
	}
	res.Series = sampler.series
	for _, s := range res.Series {
		res.RedisMaxMemory = math.Max(res.RedisMaxMemory, s.RedisMemory)
		res.RedisMaxUsedMB = math.Max(res.RedisMaxUsedMB, s.RedisUsedMB)
		if s.GuardPaused > 0 {
			res.GuardPausedSeconds++
		}
	}
	if n, err := r.t.done(ctx); err == nil {
		res.Completed = n - done0
	}
	wait1, done1h := r.workerHistograms(ctx)
	res.EnqueueToStart, res.EnqueueToDone = wait1.Sub(wait0), done1h.Sub(done0h)

	for _, s := range streams {
		sr := s.result(start)
		res.Accepted += sr.JobsAccepted
		sr.Series = latencySeries(s.rec)
		sr.rec = s.rec
		if ph.WaitDone {
			if err := r.completions(ctx, s, &sr, ph.MaxSamples); err != nil {
				res.Errors = append(res.Errors, "reading completion times: "+err.Error())
			}
		}
		res.Streams = append(res.Streams, sr)
	}
	if res.SendSeconds > 0 {
		res.EnqueueRate = round3(float64(res.Accepted) / res.SendSeconds)
	}
	if res.DoneSeconds > 0 {
		res.EndToEndRate = round3(float64(res.Accepted) / res.DoneSeconds)
	}
	use := cpuUse(cpu0, cpu1, res.Accepted)
	res.CPU = &use
	return res, nil
}

func sentOrClosed(c chan struct{}) <-chan struct{} {
	if c == nil {
		c = make(chan struct{})
		close(c)
	}
	return c
}

// completions reads the sampled jobs' done_ms and fills the stream's
// enqueue-to-done histogram.
func (r *Runner) completions(ctx context.Context, s *stream, sr *StreamResult, maxSamples int) error {
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	slices.SortFunc(samples, func(a, b jobSample) int { return a.seq - b.seq })
	if k := (len(samples) + maxSamples - 1) / maxSamples; k > 1 {
		thin := samples[:0]
		for i := 0; i < len(samples); i += k {
			thin = append(thin, samples[i])
		}
		samples = thin
	}
	seqs := make([]int, len(samples))
	for i, smp := range samples {
		seqs[i] = smp.seq
	}
	done, err := r.t.doneAt(ctx, s.l.Work, seqs)
	if err != nil {
		return err
	}
	h := NewHist()
	sr.jobs = make([]jobDone, len(samples))
	for i, smp := range samples {
		jd := jobDone{seq: smp.seq, at: smp.at}
		if done[i] > 0 {
			jd.done = done[i]*int64(time.Millisecond) + int64(time.Millisecond)/2
			h.Record(time.Duration(jd.done - jd.at))
		} else {
			sr.Missing++
		}
		sr.jobs[i] = jd
	}
	sr.Sampled = len(samples)
	sr.EnqueueToDone = h.Summary()
	return nil
}

func latencySeries(rec *recorder) []LatencyPoint {
	var out []LatencyPoint
	for s := 0; ; s++ {
		rec.mu.Lock()
		n := len(rec.seconds)
		rec.mu.Unlock()
		if s >= n {
			return out
		}
		h := rec.second(s)
		if h == nil || h.Count() == 0 {
			continue
		}
		out = append(out, LatencyPoint{
			T: float64(s) + 0.5, Count: h.Count(),
			P50: float64(h.Quantile(.5).Microseconds()) / 1000, P99: float64(h.Quantile(.99).Microseconds()) / 1000,
		})
	}
}

// workerHistograms are the worker's enqueue-to-start and enqueue-to-done
// histograms now (empty when its metrics cannot be read).
func (r *Runner) workerHistograms(ctx context.Context) (toStart, toDone Buckets) {
	ms, err := r.t.scrape(ctx, r.ep.Worker)
	if err != nil {
		return Buckets{}, Buckets{}
	}
	return ms.histogram("sluice_worker_queue_wait_seconds"), ms.histogram("sluice_worker_enqueue_to_done_seconds")
}

// sampler builds a phase's series.
type sampler struct {
	r         *Runner
	start     time.Time
	streams   []*stream
	done0     int
	series    []Sample
	lastAcc   []int
	lastDone  int
	lastTime  time.Time
	lastRate  float64
	lastReady float64
}

func (s *sampler) observe(ctx context.Context) {
	now := time.Now()
	n := s.r.ep.Partitions
	smp := Sample{T: round3(now.Sub(s.start).Seconds()), Accepted: make([]int, len(s.streams))}
	if s.lastAcc == nil {
		s.lastAcc = make([]int, len(s.streams))
	}
	total := 0
	for i, st := range s.streams {
		a := int(st.accepted.Load())
		smp.Accepted[i] = a - s.lastAcc[i]
		s.lastAcc[i] = a
		total += smp.Accepted[i]
	}
	if d, err := s.r.t.done(ctx); err == nil {
		d -= s.done0
		if len(s.series) > 0 {
			smp.Done = d - s.lastDone
		}
		s.lastDone = d
	}
	if !s.lastTime.IsZero() {
		if dt := now.Sub(s.lastTime).Seconds(); dt > 0 {
			s.lastRate = float64(total) / dt
		}
	}
	s.lastTime = now
	if used, maxmem, err := s.r.t.memory(ctx); err == nil {
		smp.RedisUsedMB = round3(float64(used) / (1 << 20))
		if maxmem > 0 {
			smp.RedisMemory = round3(float64(used) / float64(maxmem))
		}
	}
	smp.Ready, smp.Workers = nanSlice(n), nanSlice(n)
	if ms, err := s.r.t.scrape(ctx, s.r.ep.Coordinator); err == nil {
		smp.Ready = ms.byPartition("sluice_coordinator_scaling_ready_jobs", n)
		smp.Workers = ms.byPartition("sluice_coordinator_scaling_workers", n)
	}
	s.lastReady = 0
	for _, v := range smp.Ready {
		if !math.IsNaN(v) {
			s.lastReady += v
		}
	}
	if ms, err := s.r.t.scrape(ctx, s.r.ep.Relay); err == nil {
		smp.GuardPaused = ms.sum("sluice_relay_memory_guard_paused")
		smp.RelayLag = ms.sum("sluice_relay_lag_messages")
	}
	s.series = append(s.series, smp)
}

func nanSlice(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.NaN()
	}
	return out
}

// progressLine is the live line: the phase, how far, the rates.
func (s *sampler) progressLine(ph Phase, waiting bool, done int) string {
	elapsed := time.Since(s.start)
	acc, req := 0, 0
	frac := 0.0
	for i, st := range s.streams {
		a := int(st.accepted.Load())
		acc += a
		req += int(st.requests.Load())
		l := ph.Streams[i]
		var f float64
		switch {
		case st.finished.Load():
			f = 1
		case l.Jobs > 0:
			f = float64(a) / float64(l.Jobs)
		case l.Duration > 0:
			f = (elapsed - l.After).Seconds() / l.Duration.Seconds()
		}
		frac += max(0, min(f, 1)) / float64(len(s.streams))
	}
	line := fmt.Sprintf("%-10s %s %3.0f%% %6.1fs  accepted %s jobs (%s req, ~%s jobs/s)",
		ph.Name, bar(frac, 20), frac*100, elapsed.Seconds(), thousands(acc), thousands(req), thousands(int(s.lastRate)))
	if waiting {
		line += fmt.Sprintf("  done %s/%s", thousands(done), thousands(acc))
	} else if len(s.series) > 0 {
		line += fmt.Sprintf("  done %s", thousands(s.lastDone))
	}
	if s.lastReady > 0 {
		line += fmt.Sprintf("  ready %s", thousands(int(s.lastReady)))
	}
	return line
}

// donePoll is how often a phase that waits for its jobs reads Redis's done
// counters once its load has been sent.
const donePoll = 5 * time.Millisecond
