// Package funnel builds the funnel report of `sluice stats`: per
// topic, the jobs counted at every hand-off (the gate's counters, Kafka's
// lag, the Redis scripts' counters), each gap between two milestones explained
// by where the jobs are (answered 5xx, waiting in Kafka, held in Redis),
// and a gap that nothing explains flagged. It also judges the canaries.
// It reads nothing itself: cmd/sluice gathers the inputs. See docs/stats.md.
package funnel

import (
	"fmt"
	"sort"
	"time"

	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/queue"
)

// Input is what the report is built from.
type Input struct {
	// Partitions are every Redis partition's funnel, read one by one.
	Partitions []queue.PartitionFunnel
	// KafkaLag is the relay's backlog per topic, in records; a topic
	// missing was not read (KafkaErr says why, if anything failed).
	KafkaLag map[string]int64
	KafkaErr string
	// Gate holds the gates' sluice_gate_jobs_total by topic and outcome,
	// summed over the gates read; nil when none was.
	Gate map[string]map[string]float64
	// Canary state, when a monitor has run.
	CanarySettings canary.Settings
	CanaryMonitor  bool
	CanaryRecords  []canary.Record
	Now            time.Time
}

// Report is the funnel per topic, the partitions' holdings and the
// canaries' state.
type Report struct {
	Topics     []Topic     `json:"topics"`
	Partitions []Partition `json:"partitions"`
	Canary     *Canary     `json:"canary,omitempty"`
	// Problems are the gaps nothing explains and the stale canaries: an
	// empty list is a clean bill.
	Problems []string `json:"problems"`
	// Unread says which optional sources could not be read.
	Unread []string `json:"unread,omitempty"`
}

// Topic is one topic's funnel.
type Topic struct {
	Topic string `json:"topic"`
	// The gate's counters (since each gate started), when read.
	Gate *GateCounts `json:"gate,omitempty"`
	// Milestones are the Redis-side counters by milestone name (queue.Stage*).
	Milestones map[string]int64 `json:"milestones"`
	// KafkaLag is the relay's backlog in records, when read.
	KafkaLag *int64 `json:"kafka_lag_records,omitempty"`
	// RelayedOut is every job the relay settled: relayed, deduplicated,
	// dropped or dead-lettered.
	RelayedOut int64 `json:"relay_settled"`
	// InKafka is produced minus relay-settled: jobs on their way, when the
	// gate's counters were read.
	InKafka *int64 `json:"in_kafka,omitempty"`
	// InRedis is relayed minus ended (completed, dead, cancelled): jobs
	// ready, delayed or in flight.
	InRedis int64 `json:"in_redis"`
	// Notes explain gaps; Unexplained flags those nothing explains.
	Notes       []string `json:"notes,omitempty"`
	Unexplained []string `json:"unexplained,omitempty"`
}

// GateCounts are sluice_gate_jobs_total's outcomes.
type GateCounts struct {
	Accepted int64 `json:"accepted"` // produced to Kafka, answered 2xx
	Failed   int64 `json:"failed"`   // valid, not produced: answered 5xx or 504
	Rejected int64 `json:"rejected"` // invalid or not allowed: answered 4xx
}

// Partition is what a queue partition (a topic's Redis partition) holds,
// against what its counters say it should.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Ready     int64  `json:"ready"`
	Delayed   int64  `json:"delayed"`
	Inflight  int64  `json:"inflight"`
	Dead      int64  `json:"dead_set"`
	// Open is relayed minus ended over every topic (canaries too): it
	// must equal ready + delayed + in flight.
	Open int64 `json:"open"`
}

// Canary is the canaries' state.
type Canary struct {
	Monitor   string          `json:"monitor"`
	Interval  time.Duration   `json:"interval"`
	Grace     time.Duration   `json:"grace"`
	LastRound time.Time       `json:"last_round"`
	Paths     []canary.Status `json:"paths"`
	Alerts    []string        `json:"alerts"`
	// Funnel counts canaries per topic and milestone, apart from user jobs.
	Funnel map[string]map[string]int64 `json:"funnel"`
}

// Build makes the report.
func Build(in Input) Report {
	r := Report{Problems: []string{}}
	if in.KafkaErr != "" {
		r.Unread = append(r.Unread, "Kafka: "+in.KafkaErr)
	}
	if in.Gate == nil {
		r.Unread = append(r.Unread, "the gates' counters: no --gate-metrics given")
	}
	milestones := map[string]map[string]int64{}
	canaries := map[string]map[string]int64{}
	add := func(dst, src map[string]map[string]int64) {
		for topic, s := range src {
			if dst[topic] == nil {
				dst[topic] = map[string]int64{}
			}
			for k, n := range s {
				dst[topic][k] += n
			}
		}
	}
	for _, f := range in.Partitions {
		add(milestones, f.Milestones)
		add(canaries, f.Canaries)
		p := Partition{Topic: f.Queue.Topic, Partition: f.Queue.Part, Ready: f.Ready, Delayed: f.Delayed, Inflight: f.Inflight, Dead: f.Dead}
		for _, s := range []map[string]map[string]int64{f.Milestones, f.Canaries} {
			for _, st := range s {
				p.Open += open(st)
			}
		}
		if p.Open != f.Held() {
			r.Problems = append(r.Problems, fmt.Sprintf(
				"queue partition %s: its counters say %d jobs are open (relayed, not ended), but it holds %d (ready %d, delayed %d, in flight %d): %d unexplained",
				f.Queue, p.Open, f.Held(), f.Ready, f.Delayed, f.Inflight, p.Open-f.Held()))
		}
		r.Partitions = append(r.Partitions, p)
	}
	sort.Slice(r.Partitions, func(i, j int) bool {
		a, b := r.Partitions[i], r.Partitions[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})

	names := map[string]bool{}
	for t := range milestones {
		names[t] = true
	}
	for t := range in.Gate {
		names[t] = true
	}
	for t := range in.KafkaLag {
		names[t] = true
	}
	for _, name := range sortedKeys(names) {
		t := topic(name, milestones[name], in)
		r.Topics = append(r.Topics, t)
		for _, u := range t.Unexplained {
			r.Problems = append(r.Problems, "topic "+name+": "+u)
		}
	}

	if in.CanaryMonitor || len(in.CanaryRecords) > 0 {
		c := &Canary{
			Monitor: in.CanarySettings.Holder, Interval: in.CanarySettings.Interval, Grace: in.CanarySettings.Grace,
			LastRound: in.CanarySettings.Beat, Funnel: canaries, Alerts: []string{},
		}
		if in.CanaryMonitor {
			c.Paths = canary.Evaluate(in.Now, in.CanarySettings, in.CanaryRecords)
			c.Alerts = append(c.Alerts, canary.Diagnose(c.Paths)...)
			if late := in.Now.Sub(in.CanarySettings.Beat); late > in.CanarySettings.StaleAfter() {
				c.Alerts = append(c.Alerts, fmt.Sprintf("the canary monitor (%s) last sent %s ago: is it running?", in.CanarySettings.Holder, late.Round(time.Second)))
			}
		}
		for _, a := range c.Alerts {
			r.Problems = append(r.Problems, "canary: "+a)
		}
		r.Canary = c
	}
	return r
}

// open is a milestone map's relayed jobs that have not ended. A dead job an
// operator replayed (admin API) is open again.
func open(s map[string]int64) int64 {
	return s[queue.MilestoneRelayed] + s[queue.MilestoneReplayed] - s[queue.MilestoneCompleted] - s[queue.MilestoneDead] - s[queue.MilestoneCancelled]
}

func topic(name string, milestones map[string]int64, in Input) Topic {
	if milestones == nil {
		milestones = map[string]int64{}
	}
	t := Topic{Topic: name, Milestones: milestones, InRedis: open(milestones)}
	t.RelayedOut = milestones[queue.MilestoneRelayed] + milestones[queue.MilestoneDeduplicated] + milestones[queue.MilestoneDropped] + milestones[queue.MilestoneDeadLettered]
	if lag, ok := in.KafkaLag[name]; ok {
		t.KafkaLag = &lag
	}
	if g, ok := in.Gate[name]; ok {
		t.Gate = &GateCounts{Accepted: int64(g["accepted"]), Failed: int64(g["failed"]), Rejected: int64(g["rejected"])}
		if t.Gate.Failed > 0 {
			t.Notes = append(t.Notes, fmt.Sprintf("%d valid jobs were not produced (answered 5xx or 504): their clients resend them", t.Gate.Failed))
		}
		// Records replayed from <topic>.dlq by the admin API were produced
		// without a gate.
		inKafka := t.Gate.Accepted + milestones[queue.MilestoneDLQReplayed] - t.RelayedOut
		t.InKafka = &inKafka
		switch {
		case inKafka < 0:
			t.Notes = append(t.Notes, fmt.Sprintf("the relay settled %d more jobs than the gates read produced: the gates' counters start at each gate's start (or a gate was not read, or another producer writes the topic)", -inKafka))
		case t.KafkaLag == nil:
			if inKafka > 0 {
				t.Notes = append(t.Notes, fmt.Sprintf("%d produced jobs not relayed yet; Kafka's lag was not read to confirm", inKafka))
			}
		case inKafka <= *t.KafkaLag:
			if inKafka > 0 {
				t.Notes = append(t.Notes, fmt.Sprintf("%d produced jobs not relayed yet: in Kafka (the relay's lag is %d records)", inKafka, *t.KafkaLag))
			}
		default:
			t.Unexplained = append(t.Unexplained, fmt.Sprintf("%d jobs were produced but neither relayed nor in Kafka's lag (%d records)", inKafka-*t.KafkaLag, *t.KafkaLag))
		}
	} else if t.KafkaLag != nil && *t.KafkaLag > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d records wait in Kafka for the relay", *t.KafkaLag))
	}
	if t.InRedis > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d relayed jobs have not ended: ready, delayed or in flight in Redis", t.InRedis))
	}
	if t.InRedis < 0 {
		t.Unexplained = append(t.Unexplained, fmt.Sprintf("%d more jobs ended than were relayed", -t.InRedis))
	}
	return t
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
