package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// jobSpec is one job the loader sends. Every job has an idempotency key;
// every twinEvery-th job reuses the key of the job before it (in another
// group or lane), so exactly one of the two may run; every failEvery-th job
// is of type fail, which the ledger always answers 500, with 2 attempts.
// Jobs come in groups of 4, and every laneEvery-th such group is sent
// without a group: those jobs share their partition's lane.
type jobSpec struct {
	N    int
	ID   string
	Key  string
	Fail bool
}

const (
	twinEvery = 25
	failEvery = 50
	laneEvery = 4
	batchSize = 20
)

func specOf(run string, n int) jobSpec {
	key := n
	if n%twinEvery == twinEvery-1 {
		key = n - 1
	}
	return jobSpec{N: n, ID: fmt.Sprintf("%s-j%06d", run, n), Key: fmt.Sprintf("%s-k%06d", run, key), Fail: n%failEvery == failEvery-7}
}

// group is the job's group, "" for a job sent without one.
func (j jobSpec) group() string {
	if (j.N/4)%laneEvery == laneEvery-1 {
		return ""
	}
	return fmt.Sprintf("g%d", j.N/4)
}

func (j jobSpec) envelope() map[string]any {
	typ, attempts := "work", 0
	if j.Fail {
		typ, attempts = "fail", 2
	}
	e := map[string]any{
		"id": j.ID, "type": typ, "idempotency_key": j.Key,
		"payload": map[string]any{"key": j.Key, "n": j.N},
	}
	if g := j.group(); g != "" {
		e["group"] = g
	}
	if attempts > 0 {
		e["max_attempts"] = attempts
	}
	return e
}

// request is one POST to a gate, as the loader saw it.
type request struct {
	At     time.Time
	Gate   int
	Status int // 0: no answer (connection error)
	Jobs   int
}

func (r request) failed() bool { return r.Status == 0 || r.Status >= 500 }

// loader posts batches of jobs to the gates in turn at a steady rate, and
// resends a batch's unaccepted jobs (same ids: the relay dedupes) until the
// gate takes them. It keeps every request and every accepted job.
type loader struct {
	run   string
	gates []string
	rate  float64 // jobs per second
	total int     // jobs to send at least

	mu       sync.Mutex
	requests []request
	accepted map[string]jobSpec
	lastErr  string
	began    time.Time // when the first batch was due
	done     bool
}

// finished says whether runUntil has returned.
func (l *loader) finished() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

func newLoader(run string, gates []*part, rate float64, total int) *loader {
	l := &loader{run: run, rate: rate, total: total, accepted: map[string]jobSpec{}}
	for _, g := range gates {
		l.gates = append(l.gates, "http://"+g.listen+"/v1/topics/"+topic+"/jobs:batch")
	}
	return l
}

// senders is how many batches may be on their way at once: a batch that
// fails is resent (with backoff) by its sender while the others keep the
// rate.
const senders = 32

// runUntil sends jobs until at least total were accepted and more is
// closed (or ctx ends). A batch goes out every batchSize/rate, to the
// gates in turn, by whichever sender is free; a batch that fails is resent
// to the other gate after a short backoff. When every sender is busy the
// batch waits (and the ticker drops ticks): the rate reached is what
// rate() reports.
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
	tick := time.NewTicker(time.Duration(float64(time.Second) * batchSize / l.rate))
	defer tick.Stop()
	l.mu.Lock()
	l.began = time.Now()
	l.mu.Unlock()
	for n := 0; ; n += batchSize {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if n >= l.total {
			select {
			case <-more:
				return
			default:
			}
		}
		select {
		case batches <- n:
		case <-ctx.Done():
			return
		}
	}
}

// send posts the batch of jobs first.. until the gates took all of it.
func (l *loader) send(ctx context.Context, client *http.Client, first int) {
	batch := make([]jobSpec, batchSize)
	for i := range batch {
		batch[i] = specOf(l.run, first+i)
	}
	gate := (first / batchSize) % len(l.gates)
	for backoff := 20 * time.Millisecond; len(batch) > 0 && ctx.Err() == nil; backoff = min(2*backoff, time.Second) {
		batch = l.post(ctx, client, gate, batch)
		gate = (gate + 1) % len(l.gates)
		if len(batch) > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
	}
}

// beganAt is when the first batch was due.
func (l *loader) beganAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.began
}

// post sends one batch and returns the jobs the gate did not accept.
func (l *loader) post(ctx context.Context, client *http.Client, gate int, batch []jobSpec) []jobSpec {
	var body bytes.Buffer
	for _, j := range batch {
		line, _ := json.Marshal(j.envelope())
		body.Write(line)
		body.WriteByte('\n')
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.gates[gate], &body)
	req.Header.Set("Content-Type", "application/x-ndjson")
	rec := request{At: time.Now(), Gate: gate, Jobs: len(batch)}
	resp, err := client.Do(req)
	if err != nil {
		l.record(rec, nil, err.Error())
		return batch
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	data, _ := io.ReadAll(resp.Body)
	var answer struct {
		Results []struct {
			Index  int    `json:"index"`
			Status int    `json:"status"`
			Error  string `json:"error"`
		} `json:"results"`
	}
	if json.Unmarshal(data, &answer) != nil || len(answer.Results) != len(batch) {
		l.record(rec, nil, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(data))))
		return batch
	}
	var rest, ok []jobSpec
	msg := ""
	for _, r := range answer.Results {
		if r.Status >= 200 && r.Status < 300 {
			ok = append(ok, batch[r.Index])
		} else {
			rest = append(rest, batch[r.Index])
			msg = fmt.Sprintf("item %d: %d %s", r.Index, r.Status, r.Error)
		}
	}
	l.record(rec, ok, msg)
	return rest
}

func (l *loader) record(r request, ok []jobSpec, errMsg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = append(l.requests, r)
	for _, j := range ok {
		l.accepted[j.ID] = j
	}
	if errMsg != "" {
		l.lastErr = errMsg
	}
}

func (l *loader) acceptedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted)
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
