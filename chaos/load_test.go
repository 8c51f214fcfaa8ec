package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
)

// kind is what a job of the workload is: the mix of issue 29, where most
// jobs are plain (the gate assigns the id, no key, no group), so that the
// dedupe by Kafka position decides their fate, and the other kinds each
// take a path of their own.
type kind int

const (
	kindPlain    kind = iota // no id, no key, no group: the gate assigns the id
	kindPriority             // plain, with a priority class
	kindDelayed              // plain, run_at a little ahead
	kindFail                 // type fail: the ledger answers 500, max_attempts 2
	kindKeyed                // an idempotency key, the id from the gate
	kindClientID             // an id the client chose, no key
	kindGroup                // an item of a bulk group (POST .../groups)
	kindKill                 // type kill: the ledger kills the worker that runs it (a fault's)
	kindSlow                 // type slow: the ledger holds it for slowRun (a fault's)
)

var kindNames = [...]string{"plain", "priority", "delayed", "fail", "keyed", "client id", "group", "kill", "slow"}

func (k kind) String() string { return kindNames[k] }

// jobType is the job's type, which names the ledger's path.
func (k kind) jobType() string {
	switch k {
	case kindFail:
		return "fail"
	case kindKill:
		return "kill"
	case kindSlow:
		return "slow"
	}
	return "work"
}

// plainLike says whether a job has neither key nor failing handler: its
// reruns are counted and each must be explained.
func (k kind) plainLike() bool {
	return k == kindPlain || k == kindPriority || k == kindDelayed || k == kindClientID || k == kindGroup
}

// jobSpec is one job of the workload; an op is one POST of it. In every
// batch of batchSize, by position: 0-9 plain (2 and 6 with a priority), 10
// delayed by runAtAhead, 11 always failing, 12-16 keyed (in every
// twinEvery-th batch, 16 reuses 15's key: exactly one of the two may
// run), 17-18 with a client-chosen id, 19 plain. Every groupEvery-th batch
// is a bulk group of batchSize items instead. So 60% plain, 22% keyed.
type jobSpec struct {
	N        int
	Kind     kind
	ID       string // the client's id (kindClientID); else the gate assigns one
	Key      string // the idempotency key (kindKeyed)
	Priority int
	MaxAtt   int // max_attempts, 0 for the default
}

const (
	twinEvery  = 5
	groupEvery = 10
	batchSize  = 20
	// runAtAhead is how far ahead a delayed job's run_at is.
	runAtAhead = 2 * time.Second
)

func specOf(run string, n int) jobSpec {
	b, pos := n/batchSize, n%batchSize
	j := jobSpec{N: n, Kind: kindPlain}
	switch {
	case b%groupEvery == groupEvery-1:
		j.Kind = kindGroup
	case pos == 2 || pos == 6:
		j.Kind, j.Priority = kindPriority, 1+b%9
	case pos == 10:
		j.Kind = kindDelayed
	case pos == 11:
		j.Kind, j.MaxAtt = kindFail, 2
	case pos >= 12 && pos <= 16:
		key := n
		if pos == 16 && b%twinEvery == 0 {
			key = n - 1
		}
		j.Kind, j.Key = kindKeyed, fmt.Sprintf("%s-k%06d", run, key)
	case pos == 17 || pos == 18:
		j.Kind, j.ID = kindClientID, fmt.Sprintf("%s-c%06d", run, n)
	}
	return j
}

// payload is what the handler receives: the op's tag, so that a run of a
// job whose POST got no answer can be told, and the key (the worker's
// headers do not carry it).
func payload(tag, key string) map[string]any {
	p := map[string]any{"op": tag}
	if key != "" {
		p["key"] = key
	}
	return p
}

// envelope is the job as one line of a batch POST.
func (j jobSpec) envelope(tag string, now time.Time) map[string]any {
	e := map[string]any{"type": j.Kind.jobType(), "payload": payload(tag, j.Key)}
	if j.ID != "" {
		e["id"] = j.ID
	}
	if j.Key != "" {
		e["idempotency_key"] = j.Key
	}
	if j.Priority > 0 {
		e["priority"] = j.Priority
	}
	if j.MaxAtt > 0 {
		e["max_attempts"] = j.MaxAtt
	}
	if j.Kind == kindDelayed {
		e["run_at"] = now.Add(runAtAhead).UTC().Format(time.RFC3339Nano)
	}
	return e
}

// op is one POST of one job (Jepsen's operation). Answered 2xx, it is
// acknowledged with the id of the answer; with no answer (a connection
// error, a timeout, a 5xx) its outcome is unknown: it may run or not, and
// the loader posts the job again as a new op (a plain job under a new id,
// a keyed one with its key, one with a client id with that id).
type op struct {
	Tag  string // "<run>-o<n>.<try>", in the payload
	Spec jobSpec
	ID   string    // the acknowledged id ("" while unknown)
	At   time.Time // when the POST went out
	// AckedAt is when the answer came; zero for an op of unknown outcome.
	AckedAt time.Time
}

func (o *op) acked() bool { return !o.AckedAt.IsZero() }

// group is the acknowledged job's group: a bulk group's item has its
// group's id before the item's index (job.BulkID); the others none.
func (o *op) group() string {
	if o.Spec.Kind != kindGroup {
		return ""
	}
	return o.ID[:max(0, strings.LastIndexByte(o.ID, '.'))]
}

// request is one POST to a gate, as the loader saw it.
type request struct {
	At       time.Time
	Answered time.Time // when the answer (or the error) came
	Gate     int
	Status   int // 0: no answer (connection error)
	Jobs     int
	Accepted int    // items answered 2xx
	Msg      string // the error of the answer, if any (an item's, for a batch)
}

func (r request) failed() bool { return r.Status == 0 || r.Status >= 500 }

// loader posts batches of jobs to the gates in turn at a steady rate, and
// posts a job again until a gate acknowledges it. It keeps every request
// and every op.
type loader struct {
	run    string
	gates  []string
	groups []string
	rate   float64 // jobs per second
	total  int     // jobs to send at least

	// posting is read-held by each POST: pause takes it to hold the
	// load back (a fault that reads the log whole).
	posting sync.RWMutex

	mu       sync.Mutex
	requests []request
	ops      []*op          // every op, acknowledged or not
	acked    map[string]*op // acknowledged ops by id (the first one)
	rejected []string       // items refused with a 4xx: never an op
	lastErr  string
	began    time.Time // when the first batch was due
	// behind is how late batches went out against the schedule: the
	// latest lag, and the longest.
	behind, mostBehind time.Duration
	mostBehindAt       time.Time
	// held is how long pause held the load back: the schedule moves on by
	// it, and the rate leaves it out.
	held  time.Duration
	done  bool
	tries map[int]int // posts per job number
}

// finished says whether runUntil has returned.
func (l *loader) finished() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

func newLoader(run string, gates []*part, rate float64, total int) *loader {
	l := &loader{run: run, rate: rate, total: total, acked: map[string]*op{}, tries: map[int]int{}}
	for _, g := range gates {
		l.gates = append(l.gates, "http://"+g.listen+"/v1/topics/"+topic+"/jobs:batch")
		l.groups = append(l.groups, "http://"+g.listen+"/v1/topics/"+topic+"/groups")
	}
	return l
}

// senders is how many batches may be on their way at once: a batch that
// fails is resent (with backoff) by its sender while the others keep the
// rate.
const senders = 32

// runUntil sends jobs until at least total were sent and more is closed
// (or ctx ends), then the batches that fell due before more closed. Batch k is due batchSize*k/rate after the start,
// to the gates in turn, by whichever sender is free; a batch that fails
// is resent to the other gate after a short backoff. The schedule is open
// loop: when every sender is busy (a gate stalled) the batches that fall
// due meanwhile are sent as soon as senders free up, as a population of
// clients would keep producing through a stall, so the rate asked is the
// rate offered (no coordinated omission). rate() reports what the gates
// took.
func (l *loader) runUntil(ctx context.Context, more <-chan struct{}) {
	defer func() { l.mu.Lock(); l.done = true; l.mu.Unlock() }()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: senders}}
	batches := make(chan int)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := range batches {
				l.send(ctx, client, first)
			}
		}()
	}
	defer wg.Wait()
	defer close(batches)
	interval := time.Duration(float64(time.Second) * batchSize / l.rate)
	began := time.Now()
	l.mu.Lock()
	l.began = began
	l.mu.Unlock()
	due := time.NewTimer(interval)
	defer due.Stop()
	// stopAt is when more was seen closed: the batches due until then
	// are still sent, so that the load offered is the rate asked.
	var stopAt time.Time
	for n, k := 0, 1; ; n, k = n+batchSize, k+1 {
		select {
		case <-ctx.Done():
			return
		case <-due.C:
		}
		dueAt := began.Add(l.heldFor() + time.Duration(k)*interval)
		if n >= l.total && stopAt.IsZero() {
			select {
			case <-more:
				stopAt = time.Now()
			default:
			}
		}
		if !stopAt.IsZero() && dueAt.After(stopAt) {
			return
		}
		select {
		case batches <- n:
		case <-ctx.Done():
			return
		}
		// A pause may have ended meanwhile: it moved the schedule on.
		l.sentDue(began.Add(l.heldFor() + time.Duration(k)*interval))
		due.Reset(time.Until(began.Add(l.heldFor() + time.Duration(k+1)*interval)))
	}
}

// send posts the batch of jobs first.. until the gates acknowledged all
// of it.
func (l *loader) send(ctx context.Context, client *http.Client, first int) {
	batch := make([]jobSpec, batchSize)
	for i := range batch {
		batch[i] = specOf(l.run, first+i)
	}
	gate := (first / batchSize) % len(l.gates)
	for backoff := 20 * time.Millisecond; len(batch) > 0 && ctx.Err() == nil; backoff = min(2*backoff, time.Second) {
		if batch[0].Kind == kindGroup {
			batch = l.postGroup(ctx, client, gate, batch)
		} else {
			batch = l.post(ctx, client, gate, batch)
		}
		gate = (gate + 1) % len(l.gates)
		if len(batch) > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
	}
}

// sentDue notes a batch handed to a sender, and when it was due.
func (l *loader) sentDue(due time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.behind = time.Since(due)
	if l.behind > l.mostBehind {
		l.mostBehind, l.mostBehindAt = l.behind, time.Now()
	}
}

// behindAtEnd is how late the last batch went out: the backlog the load
// ended with. The loader sends every batch due before the steps ended, so
// a gate that cannot take the rate asked shows here.
func (l *loader) behindAtEnd() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.behind
}

// lag says how far behind its schedule the load fell: at worst, and at
// its last batch (the backlog it ended with).
func (l *loader) lag() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("batches went out at worst %s behind their schedule (%s into the load), the last %s behind",
		l.mostBehind.Round(time.Millisecond), l.mostBehindAt.Sub(l.began).Round(time.Second), l.behind.Round(time.Millisecond))
}

// slowest gives the n windows of width w in which the gates acknowledged
// the fewest jobs, with their counts: where the rate went.
func (l *loader) slowest(w time.Duration, n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.requests) == 0 {
		return "no requests"
	}
	last := l.requests[len(l.requests)-1].At
	counts := make([]int, int(last.Sub(l.began)/w)+1)
	for _, r := range l.requests {
		if i := int(r.At.Sub(l.began) / w); i >= 0 && i < len(counts) {
			counts[i] += r.Accepted
		}
	}
	idx := make([]int, len(counts)-1) // the last window is partial
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return counts[idx[a]] < counts[idx[b]] })
	var parts []string
	for _, i := range idx[:min(n, len(idx))] {
		parts = append(parts, fmt.Sprintf("%d jobs at %s", counts[i], (time.Duration(i)*w).Round(time.Second)))
	}
	return strings.Join(parts, ", ")
}

// beganAt is when the first batch was due.
func (l *loader) beganAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.began
}

// pause waits for the POSTs on their way and holds new ones back until
// the returned resume is called. The time held is the suite's, not the
// load's: the schedule resumes where it stopped, and heldFor says how long.
func (l *loader) pause() (resume func()) {
	l.posting.Lock()
	at := time.Now()
	return func() {
		l.mu.Lock()
		l.held += time.Since(at)
		l.mu.Unlock()
		l.posting.Unlock()
	}
}

// heldFor is how long pauses held the load back so far.
func (l *loader) heldFor() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// newOps makes one op per job of a POST about to go out.
func (l *loader) newOps(batch []jobSpec, at time.Time) []*op {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops := make([]*op, len(batch))
	for i, j := range batch {
		l.tries[j.N]++
		ops[i] = &op{Tag: fmt.Sprintf("%s-o%06d.%d", l.run, j.N, l.tries[j.N]), Spec: j, At: at}
		l.ops = append(l.ops, ops[i])
	}
	return ops
}

// postNDJSON POSTs batch to url as NDJSON: head first (unless ""), then one
// line per job, line(its op) encoded. It returns the jobs' ops, the
// request's record (with the answer's status) and the answer's body; ok is
// false when no answer came, and the record is then written with the
// error. The caller holds l.posting.
func (l *loader) postNDJSON(ctx context.Context, client *http.Client, gate int, url string, batch []jobSpec, head string, line func(*op) any) (ops []*op, rec request, data []byte, ok bool) {
	now := time.Now()
	ops = l.newOps(batch, now)
	var body bytes.Buffer
	if head != "" {
		body.WriteString(head + "\n")
	}
	for _, o := range ops {
		b, _ := json.Marshal(line(o))
		body.Write(b)
		body.WriteByte('\n')
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, &body)
	req.Header.Set("Content-Type", "application/x-ndjson")
	rec = request{At: now, Gate: gate, Jobs: len(batch)}
	resp, err := client.Do(req)
	if err != nil {
		l.record(rec, err.Error())
		return ops, rec, nil, false
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	data, _ = io.ReadAll(resp.Body)
	return ops, rec, data, true
}

// post sends one batch and returns the jobs to post again: those whose
// outcome is unknown.
func (l *loader) post(ctx context.Context, client *http.Client, gate int, batch []jobSpec) []jobSpec {
	l.posting.RLock()
	defer l.posting.RUnlock()
	ops, rec, data, ok := l.postNDJSON(ctx, client, gate, l.gates[gate], batch, "", func(o *op) any { return o.Spec.envelope(o.Tag, o.At) })
	if !ok {
		return batch
	}
	var answer struct {
		Results []struct {
			Index  int    `json:"index"`
			Status int    `json:"status"`
			ID     string `json:"id"`
			Error  string `json:"error"`
		} `json:"results"`
	}
	if json.Unmarshal(data, &answer) != nil || len(answer.Results) != len(batch) {
		l.record(rec, fmt.Sprintf("%d %s", rec.Status, strings.TrimSpace(string(data))))
		return batch
	}
	var rest []jobSpec
	msg := ""
	answered := time.Now()
	l.mu.Lock()
	for _, r := range answer.Results {
		o := ops[r.Index]
		switch {
		case r.Status >= 200 && r.Status < 300:
			rec.Accepted++
			o.ID, o.AckedAt = r.ID, answered
			if o.Spec.ID != "" && r.ID != o.Spec.ID {
				msg = fmt.Sprintf("item %d: the gate answered id %q for the client's %q", r.Index, r.ID, o.Spec.ID)
			}
			if l.acked[r.ID] == nil {
				l.acked[r.ID] = o
			}
		case r.Status >= 400 && r.Status < 500 && r.Status != http.StatusRequestTimeout && r.Status != http.StatusTooManyRequests:
			// Refused: never written, never an op. The workload sends
			// only valid jobs, so the verdict fails on any.
			l.rejected = append(l.rejected, fmt.Sprintf("%s: %d %s", o.Tag, r.Status, r.Error))
			msg = fmt.Sprintf("item %d: %d %s", r.Index, r.Status, r.Error)
		default:
			rest = append(rest, batch[r.Index])
			msg = fmt.Sprintf("item %d: %d %s", r.Index, r.Status, r.Error)
		}
	}
	l.mu.Unlock()
	l.record(rec, msg)
	return rest
}

// postGroup sends the jobs as one bulk group (the gate assigns the group's
// id; item i's id is job.BulkID(group, i)) and returns them all when the
// outcome is unknown: a group answered otherwise than 202 may have been
// written in part and cancelled, so its items may run or not, and the
// items are posted again as a new group.
func (l *loader) postGroup(ctx context.Context, client *http.Client, gate int, batch []jobSpec) []jobSpec {
	l.posting.RLock()
	defer l.posting.RUnlock()
	ops, rec, data, ok := l.postNDJSON(ctx, client, gate, l.groups[gate], batch, `{"type":"work"}`, func(o *op) any { return payload(o.Tag, "") })
	if !ok {
		return batch
	}
	var answer struct {
		Group string `json:"group"`
		Count int    `json:"count"`
	}
	if rec.Status != http.StatusAccepted || json.Unmarshal(data, &answer) != nil || answer.Count != len(batch) {
		l.record(rec, fmt.Sprintf("group: %d %s", rec.Status, strings.TrimSpace(string(data))))
		return batch
	}
	answered := time.Now()
	l.mu.Lock()
	for i, o := range ops {
		o.ID, o.AckedAt = job.BulkID(answer.Group, int64(i)), answered
		l.acked[o.ID] = o
	}
	l.mu.Unlock()
	rec.Accepted = len(ops)
	l.record(rec, "")
	return nil
}

// postOne sends one job of a fault's own (kindKill, kindSlow) to the first
// gate, as an op of the run, and returns it acknowledged, or an error.
func (l *loader) postOne(ctx context.Context, j jobSpec) (*op, error) {
	now := time.Now()
	o := l.newOps([]jobSpec{j}, now)[0]
	line, _ := json.Marshal(j.envelope(o.Tag, now))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(l.gates[0], ":batch"), bytes.NewReader(line))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var answer struct {
		ID string `json:"id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(data, &answer) != nil || answer.ID == "" {
		return nil, fmt.Errorf("posting a %s job: %d %s", j.Kind, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	l.mu.Lock()
	o.ID, o.AckedAt = answer.ID, time.Now()
	l.acked[o.ID] = o
	l.mu.Unlock()
	return o, nil
}

func (l *loader) record(r request, errMsg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Answered, r.Msg = time.Now(), errMsg
	l.requests = append(l.requests, r)
	if errMsg != "" {
		l.lastErr = errMsg
	}
}

// snapshot copies the ops so far and the acknowledged ones by id.
func (l *loader) snapshot() (ops []op, acked map[string]op, rejected []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops = make([]op, len(l.ops))
	for i, o := range l.ops {
		ops[i] = *o
	}
	acked = make(map[string]op, len(l.acked))
	for id, o := range l.acked {
		acked[id] = *o
	}
	return ops, acked, append([]string(nil), l.rejected...)
}

// answeredWithin returns the requests sent at or after from and answered
// before to.
func (l *loader) answeredWithin(from, to time.Time) []request {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []request
	for _, r := range l.requests {
		if !r.At.Before(from) && r.Answered.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// window counts the requests sent in [from, to] and those that failed.
func (l *loader) window(from, to time.Time) (total, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.requests {
		if r.At.Before(from) || r.At.After(to) {
			continue
		}
		total++
		if r.failed() {
			failed++
		}
	}
	return total, failed
}

// poison writes records the relay cannot take straight into the topic (the
// gate refuses such input), one partition after another, and returns how
// many it wrote.
func producePoison(brokers []string, n int) (int, error) {
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Metadata.AllowAutoTopicCreation = false
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	bad := []string{`not json at all`, `{"type":""}`, `{"payload":{"no":"type"}}`, `{"type":"work","bogus":1}`, `{"type":"work","priority":"high"}`, `[1,2,3]`}
	for i := range n {
		_, _, err := p.SendMessage(&sarama.ProducerMessage{
			Topic: topic, Partition: int32(i % kafkaPartitions),
			Key: sarama.StringEncoder(fmt.Sprintf("poison-%d", i)), Value: sarama.StringEncoder(bad[i%len(bad)]),
		})
		if err != nil {
			return i, err
		}
	}
	return n, nil
}

// dlqSources reads every record of the DLQ topic and returns the distinct
// sources (sluice-source: topic/partition/offset) with their reasons.
func dlqSources(brokers []string) (map[string]string, error) {
	cfg := sarama.NewConfig()
	cfg.Metadata.AllowAutoTopicCreation = false
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out := map[string]string{}
	for p := int32(0); p < kafkaPartitions; p++ {
		end, err := client.GetOffset(topic+".dlq", p, sarama.OffsetNewest)
		if err != nil {
			return nil, err
		}
		if end == 0 {
			continue
		}
		pc, err := c.ConsumePartition(topic+".dlq", p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		timeout := time.After(10 * time.Second)
		for done := false; !done; {
			select {
			case m := <-pc.Messages():
				src, reason := "", ""
				for _, h := range m.Headers {
					switch string(h.Key) {
					case "sluice-source":
						src = string(h.Value)
					case "sluice-dlq-reason":
						reason = string(h.Value)
					}
				}
				out[src] = reason
				done = m.Offset+1 >= end
			case err := <-pc.Errors():
				pc.Close()
				return nil, err
			case <-timeout:
				pc.Close()
				return nil, fmt.Errorf("reading %s.dlq/%d: timed out", topic, p)
			}
		}
		pc.Close()
	}
	return out, nil
}

// logRecord is what the topic's log holds of one job id: how many
// records (a producer's retry writes one twice), whether the id was the
// client's (the relay keeps one, the others are deduplicated), and the
// ops whose payload they carry.
type logRecord struct {
	Copies int
	Given  bool
	Ops    []string
}

// scanLog reads every job record of the topic's log, from its start to
// its end: control records, canaries and poison are left out.
func scanLog(brokers []string) (map[string]logRecord, error) {
	cfg := sarama.NewConfig()
	cfg.Metadata.AllowAutoTopicCreation = false
	cfg.Consumer.Fetch.Default = 4 << 20
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out := map[string]logRecord{}
	for p := int32(0); p < kafkaPartitions; p++ {
		first, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, err
		}
		if end <= first {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, first)
		if err != nil {
			return nil, err
		}
		timeout := time.After(2 * time.Minute)
		for done := false; !done; {
			select {
			case m := <-pc.Messages():
				done = m.Offset+1 >= end
				control := false
				for _, h := range m.Headers {
					control = control || string(h.Key) == job.ControlHeader
				}
				var j struct {
					ID      string `json:"id"`
					IDGiven bool   `json:"id_given"`
					Group   string `json:"group"`
					Payload struct {
						Op string `json:"op"`
					} `json:"payload"`
				}
				if control || json.Unmarshal(m.Value, &j) != nil || j.ID == "" || strings.HasPrefix(j.Group, queue.CanaryGroupPrefix) {
					continue
				}
				r := out[j.ID]
				r.Copies++
				r.Given = r.Given || j.IDGiven
				if j.Payload.Op != "" {
					r.Ops = append(r.Ops, j.Payload.Op)
				}
				out[j.ID] = r
			case err := <-pc.Errors():
				pc.Close()
				return nil, err
			case <-timeout:
				pc.Close()
				return nil, fmt.Errorf("reading %s/%d: timed out", topic, p)
			}
		}
		pc.Close()
	}
	return out, nil
}
