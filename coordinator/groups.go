package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/groups"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
)

// Callback states, in the group hash's callback_state (GET
// /v1/topics/{topic}/groups/{id}): internal/groups defines them, with the
// group's status both APIs answer.
const (
	// CallbackPending: an attempt failed and the next one waits for its
	// time (callback_next_ms), or the coordinator stopped mid-delivery.
	CallbackPending = groups.CallbackPending
	// CallbackDelivering: an attempt is in flight.
	CallbackDelivering = groups.CallbackDelivering
	// CallbackDelivered: the receiver answered 2xx.
	CallbackDelivered = groups.CallbackDelivered
	// CallbackFailed: given up; callback_error holds the last error.
	CallbackFailed = groups.CallbackFailed
)

// redisRetryMax bounds the wait between retries of a failed Redis call.
const redisRetryMax = 5 * time.Second

// topics are the topics whose queues the coordinator reads: those the
// stage's relays registered, and Config.Topics.
func (c *Coordinator) topics(ctx context.Context) ([]string, error) {
	return c.pool.Topics(ctx, c.cfg.Topics...)
}

// watchGroups runs a groupWatcher per queue partition of every topic while
// the coordinator holds the lock: at once for the topics known then, and
// for each topic that appears later within a GroupWait (the registry, one
// HKEYS, is read again every GroupWait). A topic stays watched until the
// lock goes, even if it leaves the registry: its groups may still complete.
// It returns once every watcher has stopped.
func (c *Coordinator) watchGroups(ctx context.Context, valid func() bool) {
	waits, err := c.openWaits()
	if err != nil {
		c.log.Error("group watcher: opening the Redis clients of the watchers' waits failed; no group is delivered this term", "err", err)
		return
	}
	// Closing the waits' clients as the term ends ends the blocked
	// BLMOVEs at once: go-redis cannot interrupt one on its context. A
	// group moved to completing as its reply is cut off stays there for
	// the next holder.
	defer context.AfterFunc(ctx, func() { waits.pool.Close() })()
	var wg sync.WaitGroup
	defer wg.Wait()
	watched := map[string]bool{}
	t := time.NewTicker(c.cfg.GroupWait)
	defer t.Stop()
	failing := false
	for {
		topics, err := c.topics(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.m.redisErrors.Inc()
			if !failing {
				failing = true
				c.log.Warn("group watcher: reading the stage's topics failed; the topics known stay watched, new ones wait", "err", err)
			}
		case err == nil:
			if failing {
				failing = false
				c.log.Info("group watcher: the stage's topics can be read again")
			}
			for _, topic := range topics {
				if watched[topic] {
					continue
				}
				if err := queue.ValidTopic(topic); err != nil {
					// A registry entry no relay could have written:
					// it names no queue.
					c.log.Warn("group watcher: ignoring a registered topic that names no queue", "err", err)
					watched[topic] = true
					continue
				}
				watched[topic] = true
				c.log.Info("group watcher: watching a topic's queues", "topic", topic, "partitions", c.cfg.Partitions)
				for part := range c.cfg.Partitions {
					w := c.newGroupWatcher(queue.Queue{Topic: topic, Part: part}, waits, valid)
					wg.Go(func() { w.run(ctx) })
				}
				c.m.watchedQueues.Add(float64(c.cfg.Partitions))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// groupWatcher delivers the completed groups of one queue partition while
// its coordinator holds the lock: what an earlier holder left on the
// queue's completing list first, then each group the completed list
// receives. Up to Deliveries groups are delivered at once, so a receiver
// that keeps failing delays only its own group.
type groupWatcher struct {
	c     *Coordinator
	q     queue.Queue
	valid func() bool // the lock's lease is still valid
	log   *slog.Logger
	slots chan struct{}
	waits *groupWaits
	turns chan struct{} // the waits on q's Redis server (Config.WaitConns)
	wg    sync.WaitGroup

	mu     sync.Mutex
	active map[string]bool
}

func (c *Coordinator) newGroupWatcher(q queue.Queue, waits *groupWaits, valid func() bool) *groupWatcher {
	return &groupWatcher{
		c: c, q: q, valid: valid, log: c.log.With("topic", q.Topic, "partition", q.Part),
		slots: make(chan struct{}, c.cfg.Deliveries), waits: waits, turns: waits.turns[waits.pool.Client(q.Part)], active: map[string]bool{},
	}
}

// groupWaits are a lock term's clients for the watchers' blocking BLMOVEs,
// and turns, a channel per Redis server bounding its waits to its
// clients' pool size (Config.WaitConns).
type groupWaits struct {
	pool  redisSide
	turns map[redis.UniversalClient]chan struct{}
}

func (c *Coordinator) openWaits() (*groupWaits, error) {
	pool, err := openRedis(c.waitsConfig)
	if err != nil {
		return nil, err
	}
	turns := map[redis.UniversalClient]chan struct{}{}
	for part := range c.cfg.Partitions {
		if cl := pool.Client(part); turns[cl] == nil {
			turns[cl] = make(chan struct{}, c.cfg.WaitConns)
		}
	}
	return &groupWaits{pool: pool, turns: turns}, nil
}

// run delivers groups until ctx ends, then waits for the deliveries in
// flight to stop. A group taken but not delivered stays on the completing
// list for the next holder.
func (w *groupWatcher) run(ctx context.Context) {
	defer w.c.m.watchedQueues.Dec()
	defer w.wg.Wait()
	pool := w.c.pool
	var pending []string
	var nextScan time.Time
	failing := false
	redisFailed := func(err error) {
		w.c.m.redisErrors.Inc()
		if !failing {
			failing = true
			w.log.Warn("group watcher: Redis failing; retrying every second", "err", err)
		}
		retry.Sleep(ctx, time.Second)
	}
	for ctx.Err() == nil {
		if !time.Now().Before(nextScan) {
			// At start and every RescanEvery: groups on completing that
			// no delivery of ours holds were left by an earlier holder
			// (one that died, or a take that ended after it lost the
			// lock).
			left, err := pool.Completing(ctx, w.q)
			if err != nil {
				redisFailed(err)
				continue
			}
			pending = w.orphans(left, pending)
			nextScan = time.Now().Add(w.c.cfg.RescanEvery)
			if len(pending) > 0 {
				w.log.Info("delivering groups an earlier coordinator left unfinished", "groups", len(pending))
			}
		}
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		var group string
		if len(pending) > 0 {
			group, pending = pending[0], pending[1:]
		} else {
			var err error
			if group, err = w.wait(ctx); err != nil {
				<-w.slots
				if ctx.Err() == nil {
					redisFailed(err)
				}
				continue
			}
		}
		if failing {
			failing = false
			w.log.Info("group watcher: Redis answers again")
		}
		// A group taken after ctx ended stays on completing: the next
		// holder delivers it.
		if group == "" || ctx.Err() != nil || !w.begin(group) {
			<-w.slots
			continue
		}
		w.wg.Go(func() {
			sl := &slot{w: w, held: true}
			defer func() { w.end(group); sl.release() }()
			w.deliver(ctx, group, sl)
		})
	}
}

// slot is a delivery's hold on one of its watcher's Deliveries: held while
// it aggregates or POSTs, given back while its callback waits for the next
// attempt, so that a receiver that keeps failing stalls no other group.
type slot struct {
	w    *groupWatcher
	held bool
}

func (s *slot) release() {
	if s.held {
		<-s.w.slots
		s.held = false
	}
}

func (s *slot) take(ctx context.Context) error {
	if s.held {
		return nil
	}
	select {
	case s.w.slots <- struct{}{}:
		s.held = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait blocks up to GroupWait for a group of the queue to complete
// (BLMOVE on the watchers' own clients), once its Redis server has a
// connection free for it: "" when none came.
func (w *groupWatcher) wait(ctx context.Context) (string, error) {
	select {
	case w.turns <- struct{}{}:
	default:
		if w.c.waitsFull.CompareAndSwap(false, true) {
			w.log.Warn("group watchers take turns: a Redis serves more queue partitions than --wait-conns; a completed group may wait a GroupWait per turn",
				"wait_conns", w.c.cfg.WaitConns)
		}
		select {
		case w.turns <- struct{}{}:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	defer func() { <-w.turns }()
	return w.waits.pool.WaitCompleted(ctx, w.q, w.c.cfg.GroupWait)
}

// orphans adds to pending the groups of left that are neither being
// delivered nor pending already.
func (w *groupWatcher) orphans(left, pending []string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	queued := map[string]bool{}
	for _, g := range pending {
		queued[g] = true
	}
	for _, g := range left {
		if !w.active[g] && !queued[g] {
			queued[g] = true
			pending = append(pending, g)
		}
	}
	return pending
}

func (w *groupWatcher) begin(group string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.active[group] {
		return false
	}
	w.active[group] = true
	return true
}

func (w *groupWatcher) end(group string) {
	w.mu.Lock()
	delete(w.active, group)
	w.mu.Unlock()
}

// redo calls fn until it succeeds, backing off between failures (Redis
// down or loading). It reports false when ctx ended first.
func (w *groupWatcher) redo(ctx context.Context, log *slog.Logger, what string, fn func() error) bool {
	wait := 100 * time.Millisecond
	for logged := false; ; logged = true {
		err := fn()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.c.m.redisErrors.Inc()
		if !logged {
			log.Warn("group watcher: Redis call failed; retrying", "doing", what, "err", err)
		}
		if retry.Sleep(ctx, wait) != nil {
			return false
		}
		wait = min(2*wait, redisRetryMax)
	}
}

// deliver aggregates a completed group and delivers its callback, then
// finishes the group (keeps its status for Keep and takes it off the
// completing list). It returns early, leaving the group on completing, when
// ctx ends.
func (w *groupWatcher) deliver(ctx context.Context, group string, sl *slot) {
	c := w.c
	log := w.log.With("group", group)
	c.m.delivering.Inc()
	defer c.m.delivering.Dec()

	var st queue.GroupStatus
	var extra []string
	if !w.redo(ctx, log, "reading the group", func() (err error) {
		if st, err = c.pool.GroupStatus(ctx, w.q.Topic, group); err != nil {
			return err
		}
		extra, err = c.pool.GroupFields(ctx, w.q.Topic, group, "callback_first_ms")
		return err
	}) {
		return
	}
	switch {
	case !st.Found:
		// Nothing left to aggregate or to send to: say so where the
		// status is read.
		log.Error("a completed group's record is gone; finishing it as failed")
		w.finish(ctx, log, group, CallbackFailed, map[string]any{
			"callback_state": CallbackFailed, "callback_error": "the group's record was gone when its callback was due",
		})
		return
	case st.CallbackState == CallbackDelivered || st.CallbackState == CallbackFailed:
		// An earlier holder decided and died before finishing.
		w.finish(ctx, log, group, st.CallbackState, map[string]any{"callback_state": st.CallbackState})
		return
	case st.CallbackURL == "":
		w.finish(ctx, log, group, "none", map[string]any{"finished_ms": c.cfg.Now().UnixMilli()})
		return
	}

	sum := GroupSummary{
		Group: group, Topic: w.q.Topic, Total: st.Total, Done: st.Done, Dead: st.Dead, Cancelled: st.Cancelled,
		CompletedAt: st.CompletedAt, CancelledAt: st.CancelledAt,
	}
	body, err := w.aggregate(ctx, log, sum)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		w.giveUp(ctx, log, group, int(st.CallbackAttempts), &attemptError{
			public: "the coordinator could not build the callback body (its log says why)", err: fmt.Errorf("building the callback body: %w", err)})
		return
	}
	defer func() {
		if body.Close != nil {
			if err := body.Close(); err != nil {
				log.Warn("freeing a callback body", "err", err)
			}
		}
	}()
	var first time.Time
	if ms, _ := strconv.ParseInt(extra[0], 10, 64); ms > 0 {
		first = time.UnixMilli(ms)
	}
	w.send(ctx, log, group, st, first, body, sl)
}

// aggregate reads the group's items in chunks, in index order, and feeds
// them to a reducer of the group's. Only Redis errors are retried; a
// reducer's error is returned.
func (w *groupWatcher) aggregate(ctx context.Context, log *slog.Logger, sum GroupSummary) (Body, error) {
	c := w.c
	start := time.Now()
	red, err := c.cfg.Reducer(sum)
	if err != nil {
		return Body{}, err
	}
	abandon := func(err error) (Body, error) {
		if b, ferr := red.Finish(); ferr == nil && b.Close != nil {
			b.Close()
		}
		return Body{}, err
	}
	chunk := int64(c.cfg.ReadChunk)
	ids := make([]string, 0, chunk)
	var states []queue.JobState
	var dead, cancelled int64 // items the group's results name so
	for from := int64(0); from < sum.Total; from += chunk {
		ids = ids[:0]
		for i := from; i < min(from+chunk, sum.Total); i++ {
			ids = append(ids, job.BulkID(sum.Group, i))
		}
		if !w.redo(ctx, log, "reading the group's items", func() (err error) {
			states, err = c.pool.JobStates(ctx, w.q.Topic, sum.Group, ids)
			return err
		}) {
			return abandon(ctx.Err())
		}
		for k, js := range states {
			switch js.State {
			case "dead":
				dead++
			case "cancelled":
				cancelled++
			}
			if err := red.Add(itemResult(from+int64(k), js)); err != nil {
				return abandon(err)
			}
		}
	}
	if dead != sum.Dead || cancelled != sum.Cancelled {
		// An item the results do not name reads as done: a dead or
		// cancelled one whose entry is missing shows as done, and one
		// replayed from the dead set may still show dead. The counts
		// above the items come from the counters, which are right.
		log.Warn("the group's results disagree with its counters; the callback's items may show the wrong state",
			"dead_items", dead, "dead", sum.Dead, "cancelled_items", cancelled, "cancelled", sum.Cancelled)
	}
	body, err := red.Finish()
	if err != nil {
		return Body{}, err
	}
	c.m.aggregation.Observe(time.Since(start).Seconds())
	log.Debug("group aggregated", "items", sum.Total, "bytes", body.Size, "took", time.Since(start).String())
	return body, nil
}

// itemResult is what a reducer sees of one item's state, as the group's
// results record it (queue.Pool.JobStates): an item they do not name
// completed without a result, and reads as done.
func itemResult(index int64, js queue.JobState) ItemResult {
	it := ItemResult{Index: index, ID: js.ID, State: js.State, Result: js.Result, Error: js.LastError, Attempts: js.Attempts}
	if js.State == "done" {
		it.Error = "" // an earlier failed attempt's error: it succeeded in the end
	}
	return it
}

// send POSTs the body until the receiver answers 2xx or the attempts or
// time run out, recording each attempt on the group's hash. It holds sl
// for each POST and gives it back while it waits for the next attempt.
func (w *groupWatcher) send(ctx context.Context, log *slog.Logger, name string, st queue.GroupStatus, first time.Time, body Body, sl *slot) {
	c := w.c
	attempts := int(st.CallbackAttempts)
	maxAttempts := c.cfg.CallbackMaxAttempts
	for {
		if maxAttempts > 0 && attempts >= maxAttempts {
			// An earlier holder used them all and died before giving up.
			// Its error, as recorded, is already what the submitter reads.
			w.giveUp(ctx, log, name, attempts, &attemptError{public: st.CallbackError, err: errors.New(st.CallbackError)})
			return
		}
		if sl.take(ctx) != nil {
			return // stopping: the next holder goes on
		}
		if !w.valid() {
			return // the lock is going: ctx ends next
		}
		attempts++
		if first.IsZero() {
			first = c.cfg.Now()
		}
		if !w.redo(ctx, log, "recording a callback attempt", func() error {
			return c.pool.SetGroupFields(ctx, w.q.Topic, name, map[string]any{
				"callback_state": CallbackDelivering, "callback_attempts": attempts, "callback_first_ms": first.UnixMilli(),
			})
		}) {
			return
		}
		// One of the receiver host's turns, waited for without the
		// partition's slot: a busy receiver must not hold the slots of
		// the partition's other groups.
		release, err := c.hosts.acquire(ctx, urlHost(st.CallbackURL), sl.release)
		if err == nil {
			err = sl.take(ctx)
		}
		var got answer
		if err == nil {
			got, err = c.post(ctx, st.CallbackURL, name, attempts, body)
		}
		if release != nil {
			release()
		}
		status := got.status
		if ctx.Err() != nil {
			// Stopped mid-POST: the attempt counts, the next holder
			// goes on.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			c.pool.SetGroupFields(rctx, w.q.Topic, name, map[string]any{"callback_state": CallbackPending})
			cancel()
			return
		}
		c.m.attempts.WithLabelValues(attemptResult(status)).Inc()
		if err == nil {
			now := c.cfg.Now()
			fields := map[string]any{
				"callback_state": CallbackDelivered, "callback_attempts": attempts, "callback_error": "",
				"callback_delivered_ms": now.UnixMilli(), "finished_ms": now.UnixMilli(),
			}
			// The state first, on its own: should the finish not happen,
			// the next holder sees "delivered" and does not POST again.
			if !w.redo(ctx, log, "recording the delivery", func() error { return c.pool.SetGroupFields(ctx, w.q.Topic, name, fields) }) {
				return
			}
			if !st.CompletedAt.IsZero() {
				c.m.deliveryLatency.Observe(now.Sub(st.CompletedAt).Seconds())
			}
			log.Info("group callback delivered", "attempts", attempts, "status", status, "url", st.CallbackURL,
				"since_completed", now.Sub(st.CompletedAt).String())
			w.finish(ctx, log, name, CallbackDelivered, fields)
			return
		}
		delay := c.nextDelay(attempts, got)
		next := c.cfg.Now().Add(delay)
		if isPermanent(err) || (maxAttempts > 0 && attempts >= maxAttempts) ||
			(c.cfg.CallbackGiveUp > 0 && next.Sub(first) > c.cfg.CallbackGiveUp) {
			w.giveUp(ctx, log, name, attempts, err)
			return
		}
		log.Warn("group callback failed; retrying", "attempt", attempts, "err", err, "retry_in", delay.String())
		if !w.redo(ctx, log, "recording a failed callback attempt", func() error {
			return c.pool.SetGroupFields(ctx, w.q.Topic, name, map[string]any{
				"callback_state": CallbackPending, "callback_error": publicReason(err), "callback_next_ms": next.UnixMilli(),
			})
		}) {
			return
		}
		sl.release()
		if c.cfg.Sleep(ctx, delay) != nil {
			return
		}
	}
}

// giveUp finishes a group whose callback will not be delivered: its status
// shows callback_state failed with what the submitter may read of the last
// error (publicReason); the log has all of it.
func (w *groupWatcher) giveUp(ctx context.Context, log *slog.Logger, group string, attempts int, last error) {
	msg, public := "gave up", "gave up"
	if last != nil && last.Error() != "" {
		msg, public = last.Error(), publicReason(last)
	}
	log.Error("group callback given up", "attempts", attempts, "err", msg)
	fields := map[string]any{"callback_state": CallbackFailed, "callback_error": public, "finished_ms": w.c.cfg.Now().UnixMilli()}
	if w.redo(ctx, log, "recording a given-up callback", func() error { return w.c.pool.SetGroupFields(ctx, w.q.Topic, group, fields) }) {
		w.finish(ctx, log, group, CallbackFailed, fields)
	}
}

// finish records the final fields, keeps the group for Keep and takes it
// off the completing list; outcome labels the callbacks metric.
func (w *groupWatcher) finish(ctx context.Context, log *slog.Logger, group, outcome string, fields map[string]any) {
	if !w.redo(ctx, log, "finishing the group", func() error {
		return w.c.pool.FinishCompleted(ctx, w.q.Topic, group, fields, w.c.cfg.Keep)
	}) {
		return
	}
	w.c.m.groupsCompleted.Inc()
	w.c.m.callbacks.WithLabelValues(outcome).Inc()
}
