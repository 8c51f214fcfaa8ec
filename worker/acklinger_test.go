package worker

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// While other claimed jobs still run, the acker waits up to AckLinger for
// their acks, so that a claimed batch's successes share one call; with
// nothing else held it sends at once, and never waits past the linger.
func TestAcksLingerOnlyWhileOtherJobsRun(t *testing.T) {
	newConsumer := func(linger time.Duration) *consumer {
		return &consumer{
			w:    &Worker{cfg: Config{AckLinger: linger}},
			acks: make(chan ackRequest, maxAckBatch), held: map[heldKey]*heldJob{},
		}
	}
	hold := func(c *consumer, id string, acking bool) ackRequest {
		h := &heldJob{claimed: queue.Claimed{ID: id, Batch: "b"}, acking: acking}
		c.mu.Lock()
		c.held[h.key()] = h
		if acking {
			c.acking++
		}
		c.mu.Unlock()
		return ackRequest{job: h}
	}

	// Alone: the one success goes out at once, however long the linger.
	c := newConsumer(10 * time.Second)
	first := hold(c, "a", true)
	if got := c.gatherAcks([]ackRequest{first}); len(got) != 1 {
		t.Fatalf("alone: gathered %d acks, want 1", len(got))
	}

	// Two more jobs running: their acks, sent later, join the first.
	c = newConsumer(10 * time.Second)
	first = hold(c, "a", true)
	later := []ackRequest{hold(c, "b", false), hold(c, "c", false)}
	go func() {
		for _, r := range later {
			time.Sleep(5 * time.Millisecond) // the jobs end a little apart
			c.mu.Lock()
			r.job.acking = true
			c.acking++
			c.mu.Unlock()
			c.acks <- r
		}
	}()
	if got := c.gatherAcks([]ackRequest{first}); len(got) != 3 {
		t.Fatalf("with two jobs running: gathered %d acks, want 3 in one call", len(got))
	}

	// A job that runs on: the linger bounds the wait.
	c = newConsumer(20 * time.Millisecond)
	first = hold(c, "a", true)
	hold(c, "slow", false)
	start := time.Now()
	if got := c.gatherAcks([]ackRequest{first}); len(got) != 1 {
		t.Fatalf("beside a slow job: gathered %d acks, want 1", len(got))
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("sent after %s, before the 20ms linger", waited)
	}

	// No linger: at once, even with jobs running.
	c = newConsumer(0)
	first = hold(c, "a", true)
	hold(c, "running", false)
	if got := c.gatherAcks([]ackRequest{first}); len(got) != 1 {
		t.Fatalf("linger 0: gathered %d acks, want 1", len(got))
	}
}
