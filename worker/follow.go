package worker

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/topics"
)

// followed are the topics the stage's topic list added to Config.Topics
// (Config.FollowTopics). Topics are only ever added: a topic that leaves
// the list may still hold jobs in Redis, which its workers should finish.
type followed struct {
	// version grows with every topic added; a consumer compares it with
	// the one it has, so its loop costs one atomic load when nothing
	// changed.
	version atomic.Int64
	mu      sync.Mutex
	added   []string
}

// servedTopics are the topics served now: Config.Topics, then those the
// list added, weight 1.
func (w *Worker) servedTopics() TopicWeights {
	w.follow.mu.Lock()
	defer w.follow.mu.Unlock()
	out := slices.Clone(w.cfg.Topics)
	for _, t := range w.follow.added {
		out = append(out, TopicWeight{Topic: t, Weight: 1})
	}
	return out
}

// followTopics watches the stage's topic list until ctx ends, adding the
// topics it gains (Config.FollowTopics).
func (w *Worker) followTopics(ctx context.Context) {
	if !w.cfg.FollowTopics {
		return
	}
	if w.limits.consul == nil {
		w.log.Warn("--follow-topics needs Consul (--consul-addr): serving --topics only")
		return
	}
	err := topics.Watch(ctx, w.limits.consul, w.cfg.Stage, consul.WatchOptions{Log: w.log}, func(m map[string]topics.Spec) {
		w.follow.mu.Lock()
		defer w.follow.mu.Unlock()
		for _, name := range topics.Names(m) {
			if slices.Contains(w.cfg.Topics.Names(), name) || slices.Contains(w.follow.added, name) {
				continue
			}
			w.follow.added = append(w.follow.added, name)
			w.follow.version.Add(1)
			w.log.Info("serving a topic the stage's topic list gained", "topic", name)
		}
	})
	if err != nil {
		w.log.Error("cannot follow the stage's topic list", "err", err)
	}
}

// followTopics adds to the consumer's chooser the topics the list added
// since it last looked. A consumer waiting for work notices within its
// wait (a second at most).
func (c *consumer) followTopics() {
	v := c.w.follow.version.Load()
	if v == c.topicsSeen {
		return
	}
	c.topicsSeen = v
	for _, t := range c.w.servedTopics() {
		if !slices.ContainsFunc(c.topics.queues, func(q *topicQueue) bool { return q.q.Topic == t.Topic }) {
			// It starts at the chooser's clock: its share from now on.
			c.topics.queues = append(c.topics.queues, &topicQueue{q: queue.Queue{Topic: t.Topic, Part: c.part}, weight: float64(t.Weight), vt: c.topics.clock})
		}
	}
}
