// Package canary is the contract of sluice's heartbeat canaries: which jobs
// are canaries, the routes they take (one per Kafka partition of a topic and
// per Redis partition), what their payload carries, and how a route's age
// decides an alert. The monitor that sends them lives in coordinator/, the
// handler that completes them in worker/, their records in Redis in
// internal/queue (canary.go); `sluice stats` reads the same records and
// judges them with Evaluate, so both say the same thing. See docs/canary.md.
package canary

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// Type is a canary job's type.
const Type = "sluice.canary"

// GroupPrefix starts every canary's group: what makes a job a canary for
// the worker (which completes it without a user handler) and for the stage
// funnel's counters (which count it apart from user jobs). The gate keeps
// the "sluice." prefix for tokens allowed to send canaries.
const GroupPrefix = "sluice.canary."

// ReservedPrefix is the prefix of group names and job types that clients
// may not use unless allowed to send canaries.
const ReservedPrefix = "sluice."

// IsCanary reports whether a job of this group is a canary.
func IsCanary(group string) bool { return strings.HasPrefix(group, GroupPrefix) }

// Path is one way through the pipeline: a topic's Kafka partition into a
// Redis partition.
type Path struct {
	Topic          string
	KafkaPartition int32
	RedisPartition int
}

func (p Path) String() string {
	return fmt.Sprintf("%s/k%d→r%d", p.Topic, p.KafkaPartition, p.RedisPartition)
}

// Field is the path's field in its Redis partition's canary hash,
// "<topic>/<kafka partition>": Kafka topic names cannot hold a slash.
func (p Path) Field() string { return p.Topic + "/" + strconv.Itoa(int(p.KafkaPartition)) }

// ParseField reads a Field back, given the Redis partition it was in.
func ParseField(field string, redisPartition int) (Path, error) {
	topic, kp, ok := strings.Cut(field, "/")
	n, err := strconv.ParseInt(kp, 10, 32)
	if !ok || topic == "" || err != nil || n < 0 || strconv.Itoa(int(n)) != kp {
		return Path{}, fmt.Errorf("canary field %q: want <topic>/<kafka partition>", field)
	}
	return Path{Topic: topic, KafkaPartition: int32(n), RedisPartition: redisPartition}, nil
}

// Route is a path with the group that takes a canary along it: the gate
// writes it to the path's Kafka partition (named explicitly), and the
// group's hash picks the path's Redis partition.
type Route struct {
	Path
	Group string
}

// Plan returns a topic's routes: max(kafka partitions, Redis partitions)
// of them, route i from Kafka partition i mod P to Redis partition i mod N,
// so every partition on both sides carries a canary each interval, at the
// fewest canaries that do.
func Plan(topic string, kafkaPartitions int32, layout queue.Keyspace) []Route {
	n := max(int(kafkaPartitions), layout.Partitions)
	routes := make([]Route, 0, n)
	for i := range n {
		p := Path{Topic: topic, KafkaPartition: int32(i % int(kafkaPartitions)), RedisPartition: i % layout.Partitions}
		routes = append(routes, Route{Path: p, Group: groupFor(p, layout)})
	}
	return routes
}

// groupFor finds a group name for the path whose hash picks its Redis
// partition: the path's name plus the first salt that lands there (about
// N tries).
func groupFor(p Path, layout queue.Keyspace) string {
	base := fmt.Sprintf("%s%s.%d.%d", GroupPrefix, p.Topic, p.KafkaPartition, p.RedisPartition)
	for salt := 0; ; salt++ {
		g := base + "." + strconv.Itoa(salt)
		if layout.PartitionOf(g) == p.RedisPartition {
			return g
		}
	}
}

// Payload is what a canary carries: its path and when it was sent.
type Payload struct {
	Topic          string `json:"topic"`
	KafkaPartition int32  `json:"kafka_partition"`
	RedisPartition int    `json:"redis_partition"`
	SentMS         int64  `json:"sent_ms"`
}

// Path is the payload's path.
func (p Payload) Path() Path {
	return Path{Topic: p.Topic, KafkaPartition: p.KafkaPartition, RedisPartition: p.RedisPartition}
}

// DecodePayload reads a canary's payload.
func DecodePayload(b []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil {
		return Payload{}, fmt.Errorf("canary payload: %w", err)
	}
	if p.Topic == "" || p.KafkaPartition < 0 || p.RedisPartition < 0 || p.SentMS <= 0 {
		return Payload{}, fmt.Errorf("canary payload %s: want topic, kafka_partition, redis_partition and sent_ms", b)
	}
	return p, nil
}

// Settings are the monitor's, recorded in Redis beside the canaries so that
// `sluice stats` judges them as the monitor does.
type Settings struct {
	Interval time.Duration
	Grace    time.Duration
	// Started is when the monitor began sending: a path's age counts from
	// then at the earliest, so a new monitor gives every path its first
	// two intervals.
	Started time.Time
	// Beat is the monitor's last round; a monitor that stopped shows here.
	Beat time.Time
	// Holder names the monitor's process.
	Holder string
}

// StaleAfter is the age at which a path alerts: two intervals plus the grace.
func (s Settings) StaleAfter() time.Duration { return 2*s.Interval + s.Grace }

// Record is what Redis holds of one path.
type Record struct {
	Path
	// Sent is when the newest canary was sent along the path.
	Sent time.Time
	// DoneSent and Done are when the newest completed canary was sent and
	// completed (zero: none has).
	DoneSent, Done time.Time
}

// Status is a path judged at a moment.
type Status struct {
	Record
	// Age is how long ago the newest completed canary was sent, counted
	// from the monitor's start at the earliest.
	Age time.Duration
	// Latency is the newest completed canary's end-to-end time.
	Latency time.Duration
	Stale   bool
}

// Evaluate judges every record at now, in path order.
func Evaluate(now time.Time, s Settings, records []Record) []Status {
	out := make([]Status, 0, len(records))
	for _, r := range records {
		from := s.Started
		if r.DoneSent.After(from) {
			from = r.DoneSent
		}
		st := Status{Record: r, Age: max(now.Sub(from), 0)}
		if !r.Done.IsZero() {
			st.Latency = max(r.Done.Sub(r.DoneSent), 0)
		}
		st.Stale = st.Age > s.StaleAfter()
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return less(out[i].Path, out[j].Path) })
	return out
}

func less(a, b Path) bool {
	if a.Topic != b.Topic {
		return a.Topic < b.Topic
	}
	if a.KafkaPartition != b.KafkaPartition {
		return a.KafkaPartition < b.KafkaPartition
	}
	return a.RedisPartition < b.RedisPartition
}

// Diagnose says what is stuck, in words an on-call can act on: stale
// paths into a Redis partition listed in unconsumed (known to have no live
// consumer) point at the missing worker, not at the relay or the gate; a
// topic whose every other path is stale points at its relay (paused, no
// lock holder) or at the gate and Kafka; a Redis partition whose every
// path is stale, at that partition's consumers or its Redis; other stale
// paths are named one by one. It returns nothing when no path is stale.
func Diagnose(statuses []Status, unconsumed ...int) []string {
	var out []string
	explained := map[Path]bool{}
	noConsumer := map[int]bool{}
	for _, p := range unconsumed {
		noConsumer[p] = true
	}
	idle := map[int]bool{}
	for _, s := range statuses {
		if s.Stale && noConsumer[s.RedisPartition] {
			explained[s.Path] = true
			idle[s.RedisPartition] = true
		}
	}
	if len(idle) > 0 {
		parts := make([]int, 0, len(idle))
		for p := range idle {
			parts = append(parts, p)
		}
		sort.Ints(parts)
		out = append(out, fmt.Sprintf("Redis partitions %v: no worker consumes them (no live consumer heartbeat), so their canaries wait in the queue: start a worker that serves them", parts))
	}
	// The tallies leave out what a missing worker explains: a topic
	// whose paths are stale only there is not the relay's fault.
	byTopic, byPart := map[string]*tally{}, map[int]*tally{}
	for _, s := range statuses {
		if explained[s.Path] {
			continue
		}
		for _, t := range []*tally{get(byTopic, s.Topic), get(byPart, s.RedisPartition)} {
			t.all++
			if s.Stale {
				t.stale++
			}
		}
	}
	topics := make([]string, 0, len(byTopic))
	for t := range byTopic {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		if c := byTopic[t]; c.stale == c.all && c.all > 1 {
			out = append(out, fmt.Sprintf("topic %s: no canary completes on any of its %d paths: check the topic's relay (paused rate, lock holder) and the gate's writes to Kafka", t, c.all))
			for _, s := range statuses {
				if s.Topic == t {
					explained[s.Path] = true
				}
			}
		}
	}
	parts := make([]int, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	for _, p := range parts {
		c := byPart[p]
		if c.stale == 0 {
			continue
		}
		left := 0
		for _, s := range statuses {
			if s.RedisPartition == p && s.Stale && !explained[s.Path] {
				left++
			}
		}
		if left > 0 && c.stale == c.all {
			out = append(out, fmt.Sprintf("Redis partition %d: no canary completes on any of its %d paths: check that a worker consumes partition %d and that its Redis answers", p, c.all, p))
			for _, s := range statuses {
				if s.RedisPartition == p {
					explained[s.Path] = true
				}
			}
		}
	}
	for _, s := range statuses {
		if s.Stale && !explained[s.Path] {
			out = append(out, fmt.Sprintf("path %s: no canary completed for %s", s.Path, s.Age.Round(time.Millisecond)))
		}
	}
	return out
}

// tally counts a topic's or a partition's paths, and the stale ones.
type tally struct{ all, stale int }

func get[K comparable](m map[K]*tally, k K) *tally {
	t := m[k]
	if t == nil {
		t = &tally{}
		m[k] = t
	}
	return t
}

// TopicInfo is the gate's answer to GET /v1/topics/{topic}: the topic's
// Kafka partition count, from which the monitor plans the topic's routes
// (Plan). The gate encodes it, the monitor decodes it.
type TopicInfo struct {
	Topic      string `json:"topic"`
	Partitions int32  `json:"partitions"`
}
