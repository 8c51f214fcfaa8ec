package coordinator_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The coordinator over several topics: each topic is a queue, with keys of
// its own on every partition; the coordinator reads every topic the relays
// registered (and Config.Topics).

// Groups of two topics complete on the same partition: each is delivered
// within a fraction of GroupWait of its completion, because every queue
// partition has a watcher blocked on its own completed list (a watcher
// that visited the topics in turn, or polled, would take up to a
// GroupWait per topic).
func TestWatcherDeliversGroupsOfTwoTopicsPromptly(t *testing.T) {
	b := newBed(t, 2)
	b.register(t, "mail")
	rc := newReceiver(t, nil)
	r := b.start(t, "c", func(c *coordinator.Config) { c.GroupWait = 4 * time.Second })
	r.waitHolding(t)
	testenv.WaitFor(t, 10*time.Second, "a watcher per queue partition of both topics", func() bool {
		return testenv.Metric(t, r.c.Registry(), "sluice_coordinator_watched_queues") == 4
	})
	for _, g := range []struct{ topic, group string }{{"jobs", "g-jobs"}, {"mail", "g-mail"}, {"mail", "g-mail-2"}, {"jobs", "g-jobs-2"}} {
		b.completeGroupOf(t, g.topic, g.group, rc.URL, allDone(3))
		completed := time.Now()
		st := b.finishedOf(t, g.topic, g.group)
		calls := rc.callsFor(g.group)
		if st.CallbackState != coordinator.CallbackDelivered || len(calls) != 1 {
			t.Fatalf("group %s of %s: %+v, %d calls", g.group, g.topic, st, len(calls))
		}
		if took := calls[0].at.Sub(completed); took > 1500*time.Millisecond {
			t.Errorf("group %s of %s delivered %v after it completed: not prompt (GroupWait 4s)", g.group, g.topic, took)
		}
		var body callbackBody
		if err := json.Unmarshal(calls[0].body, &body); err != nil || body.Topic != g.topic || body.Total != 3 {
			t.Errorf("group %s: callback %s (%v), want topic %s", g.group, calls[0].body, err, g.topic)
		}
	}
}

// A new holder delivers the groups an earlier one left on the completing
// lists of every topic, not only the first's.
func TestANewHolderDeliversWhatWasLeftOnEveryTopicsCompletingList(t *testing.T) {
	b := newBed(t, 2)
	b.register(t, "mail")
	rc := newReceiver(t, nil)
	ctx := context.Background()
	for _, g := range []struct{ topic, group string }{{"jobs", "left-jobs"}, {"mail", "left-mail"}} {
		b.completeGroupOf(t, g.topic, g.group, rc.URL, allDone(2))
		// An earlier holder took it and died before delivering it.
		q := b.layout.QueueOf(g.topic, g.group, "")
		if got, err := b.pool.TakeCompleted(ctx, q); got != g.group || err != nil {
			t.Fatalf("take of %s: %q %v", q, got, err)
		}
	}
	b.start(t, "c", nil)
	for _, g := range []struct{ topic, group string }{{"jobs", "left-jobs"}, {"mail", "left-mail"}} {
		if st := b.finishedOf(t, g.topic, g.group); st.CallbackState != coordinator.CallbackDelivered {
			t.Errorf("group %s of %s: %+v", g.group, g.topic, st)
		}
		if n := len(rc.callsFor(g.group)); n != 1 {
			t.Errorf("group %s: %d callbacks", g.group, n)
		}
	}
}

// A topic registered after the coordinator took the lock is watched
// without a restart: its group is delivered.
func TestATopicRegisteredLaterIsWatched(t *testing.T) {
	b := newBed(t, 2)
	rc := newReceiver(t, nil)
	r := b.start(t, "c", nil)
	r.waitHolding(t)
	testenv.WaitFor(t, 10*time.Second, "the watchers of topic jobs", func() bool {
		return testenv.Metric(t, r.c.Registry(), "sluice_coordinator_watched_queues") == 2
	})
	b.register(t, "late")
	b.completeGroupOf(t, "late", "g-late", rc.URL, allDone(2))
	if st := b.finishedOf(t, "late", "g-late"); st.CallbackState != coordinator.CallbackDelivered {
		t.Fatalf("the late topic's group: %+v", st)
	}
	if n := testenv.Metric(t, r.c.Registry(), "sluice_coordinator_watched_queues"); n != 4 {
		t.Errorf("watched queues: %v, want 4", n)
	}
}

// Config.Topics names a topic no relay registered: its groups are
// delivered all the same.
func TestConfiguredTopicsAreWatchedBesideTheRegisteredOnes(t *testing.T) {
	b := newBed(t, 1)
	rc := newReceiver(t, nil)
	r := b.start(t, "c", func(c *coordinator.Config) { c.Topics = []string{"unregistered"} })
	r.waitHolding(t)
	b.completeGroupOf(t, "unregistered", "g-u", rc.URL, allDone(1))
	b.completeGroup(t, "g-j", rc.URL, allDone(1))
	b.finishedOf(t, "unregistered", "g-u")
	b.finished(t, "g-j")
	bad := b.config(func(c *coordinator.Config) { c.Topics = []string{"no:colons"} })
	if _, err := coordinator.New(bad, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "no:colons") {
		t.Error("a configured topic that names no queue was accepted")
	}
}

// The scaler's ready depth of a partition is the sum over its topics'
// queues: two topics whose backlogs alone are below the threshold scale
// the partition together; a topic registered later counts from then on.
func TestScalerSumsTheReadyDepthOfEveryTopic(t *testing.T) {
	b := newBed(t, 2)
	b.register(t, "mail")
	c0 := b.consumer(t, 0, 2)
	r := b.start(t, "a", scaling(fastParams())) // threshold 5, base 2
	r.waitHolding(t)
	ready := func() float64 {
		return testenv.Metric(t, r.c.Registry(), "sluice_coordinator_scaling_ready_jobs", "partition", "0")
	}
	// 8 ready per topic: a PWQD of 4 each on 2 workers, 8 together.
	b.backlogOf(t, "jobs", 0, 8)
	b.backlogOf(t, "mail", 0, 8)
	// A topic no relay registered yet: not read.
	b.backlogOf(t, "late", 0, 30)
	testenv.WaitFor(t, 10*time.Second, "partition 0 doubled to 4 workers", func() bool { return c0.workers.Load() == 4 })
	if got := c0.commands(); len(got) != 1 || got[0].Type != queue.ScaleUp || !strings.Contains(got[0].Reason, "16 ready / 2 workers") {
		t.Fatalf("commands: %+v", got)
	}
	r.waitCycles(t, 3)
	if n := ready(); n != 16 {
		t.Errorf("ready depth of partition 0: %v, want 16 (jobs and mail, not the unregistered topic)", n)
	}
	b.register(t, "late")
	testenv.WaitFor(t, 10*time.Second, "the late topic's backlog counted", func() bool { return ready() == 46 })
	testenv.WaitFor(t, 10*time.Second, "partition 0 doubled again", func() bool { return c0.workers.Load() == 8 })
}
