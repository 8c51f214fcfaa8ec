package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// TopicWeight is a topic a worker serves and its weight.
type TopicWeight struct {
	// Topic names the topic's queue (sluice:{<stage>:<topic>:p<n>}:).
	Topic string
	// Weight is the topic's share of the claims against the other topics
	// served (jobs served / weight is its virtual time); at least 1.
	// Default 1. Ignored with Config.Strict.
	Weight int
}

// TopicWeights are the topics a worker serves, in order.
type TopicWeights []TopicWeight

// DefaultTopic is the topic a worker serves when Config.Topics is empty:
// the relay's default topic.
const DefaultTopic = "jobs"

// parseTopics reads --topics, "critical=6,default=3,low=1": topics in
// order, each with a positive integer weight; a topic without "=w" weighs
// 1. An empty list is nil (the default topic). Duplicates and names that
// cannot name a queue (queue.ValidTopic) are refused.
func parseTopics(s string) (TopicWeights, error) {
	var out TopicWeights
	for _, def := range strings.Split(s, ",") {
		if def = strings.TrimSpace(def); def == "" {
			continue
		}
		name, w, hasWeight := strings.Cut(def, "=")
		t := TopicWeight{Topic: strings.TrimSpace(name), Weight: 1}
		if hasWeight {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%q: the weight must be a positive integer (topic=3)", def)
			}
			t.Weight = n
		}
		out = append(out, t)
	}
	if err := out.check(); err != nil {
		return nil, err
	}
	return out, nil
}

// topicsValue is --topics (a flag.Value): it reads and writes
// "critical=6,default=3,low=1". A flag given twice keeps the last value,
// as every other flag.
type topicsValue struct{ p *TopicWeights }

func (v topicsValue) Set(s string) error {
	parsed, err := parseTopics(s)
	if err != nil {
		return err
	}
	*v.p = parsed
	return nil
}

func (v topicsValue) String() string {
	if v.p == nil {
		return ""
	}
	var b strings.Builder
	for i, t := range *v.p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.Topic + "=" + strconv.Itoa(t.Weight))
	}
	return b.String()
}

// Names lists the topics' names, in order.
func (ts TopicWeights) Names() []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Topic
	}
	return out
}

// check refuses invalid names, duplicates and weights below 1.
func (ts TopicWeights) check() error {
	seen := map[string]bool{}
	for _, t := range ts {
		if err := queue.ValidTopic(t.Topic); err != nil {
			return err
		}
		if seen[t.Topic] {
			return fmt.Errorf("topic %q given twice", t.Topic)
		}
		seen[t.Topic] = true
		if t.Weight < 1 {
			return fmt.Errorf("topic %q: weight %d, want a positive integer", t.Topic, t.Weight)
		}
	}
	return nil
}

// topicQueue is one served topic's queue on a consumer's partition, with
// its place in the consumer's choice among topics.
type topicQueue struct {
	q      queue.Queue
	weight float64
	// vt is the topic's virtual time: jobs claimed / weight, brought up
	// to the consumer's clock when the topic comes back from empty.
	vt float64
	// empty: the last claim found nothing ready. The topic is passed over
	// until a wake token, a probe or an idle timeout says it may have
	// work again.
	empty bool
}

// probeEvery is how often a consumer busy with some topics looks whether
// its empty ones have work again (one round trip for all of them). While
// idle it needs no probe: a job made ready on any served topic pushes a
// wake token, which ends the consumer's BLPOP.
const probeEvery = 10 * time.Millisecond

// topicChooser picks the queue of a consumer's next claim among its topics:
// weighted fair by jobs served, or in strict order. Only the consumer's
// run loop uses it.
type topicChooser struct {
	queues []*topicQueue // in the order of Config.Topics
	strict bool
	// clock is the virtual time of the last claim: the vt of the topic it
	// served, which was the lowest among the topics with work. A topic
	// that comes back from empty starts there, so that it gets its share
	// from now on and no burst for the time it was idle.
	clock  float64
	probed time.Time // last look at the empty topics
}

func newTopicChooser(topics TopicWeights, part int, strict bool) *topicChooser {
	ch := &topicChooser{strict: strict}
	for _, t := range topics {
		ch.queues = append(ch.queues, &topicQueue{q: queue.Queue{Topic: t.Topic, Part: part}, weight: float64(t.Weight)})
	}
	return ch
}

// next is the queue to claim from: in strict order the first topic not
// found empty, else the one with the lowest virtual time (the first given
// among equals). Nil when every topic was found empty.
func (ch *topicChooser) next() *topicQueue {
	var best *topicQueue
	for _, t := range ch.queues {
		if t.empty {
			continue
		}
		if ch.strict {
			return t
		}
		if best == nil || t.vt < best.vt {
			best = t
		}
	}
	return best
}

// claimed records a claim of n jobs from t; n == 0, or a claim that
// drained t (queue.Pool.ClaimDrained), marks it empty: its wake list says
// when it has work again.
func (ch *topicChooser) claimed(t *topicQueue, n int, drained bool) {
	if n > 0 {
		ch.clock = max(ch.clock, t.vt)
		t.vt += float64(n) / t.weight
	}
	if n == 0 || drained {
		t.empty = true
	}
}

// maybeWork marks t as possibly having work again, its virtual time
// brought up to the others'.
func (ch *topicChooser) maybeWork(t *topicQueue) {
	if t.empty {
		t.empty = false
		t.vt = max(t.vt, ch.clock)
	}
}

// woken marks the topic whose wake key is key as possibly having work,
// and returns it; all of them when key is "" (an idle spell ran out
// without a token), and then returns nil.
func (ch *topicChooser) woken(keys func(queue.Queue) queue.Keys, key string) (woke *topicQueue) {
	for _, t := range ch.queues {
		if key == "" || keys(t.q).Wake() == key {
			ch.maybeWork(t)
			if key != "" {
				woke = t
			}
		}
	}
	return woke
}

// emptyTopics are the topics found empty.
func (ch *topicChooser) emptyTopics() []*topicQueue {
	var out []*topicQueue
	for _, t := range ch.queues {
		if t.empty {
			out = append(out, t)
		}
	}
	return out
}

// probe looks, at most every probeEvery, whether topics found empty have
// work again while others keep the consumer busy, and marks those that do.
// One empty topic is simply tried again (its claim is as cheap as a look);
// several are looked at in one pipelined round trip (EXISTS of each one's
// lanes: a lane is active while it holds jobs).
func (c *consumer) probe(ctx context.Context, now time.Time) {
	ch := c.topics
	if now.Sub(ch.probed) < probeEvery {
		return
	}
	empty := ch.emptyTopics()
	if len(empty) == 0 || len(empty) == len(ch.queues) && !c.hasWaiting() {
		// Every topic empty and nothing claimed waits: the consumer
		// goes idle next, and its BLPOP looks for work (a probe here
		// made an idle partition claim twice per IdleRecheck).
		return
	}
	ch.probed = now
	if len(empty) == 1 {
		ch.maybeWork(empty[0])
		return
	}
	pool := c.w.pool
	pipe := pool.Client(c.part).Pipeline()
	looks := make([]interface{ Val() int64 }, len(empty))
	for i, t := range empty {
		looks[i] = pipe.Exists(ctx, pool.Keyspace().Keys(t.q).Lanes())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if !errors.Is(err, context.Canceled) {
			// Claims report Redis trouble; try them all rather than
			// pass over topics that may have work.
			for _, t := range empty {
				ch.maybeWork(t)
			}
		}
		return
	}
	for i, t := range empty {
		if looks[i].Val() > 0 {
			ch.maybeWork(t)
		}
	}
}
