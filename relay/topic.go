package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/retry"
	"github.com/sluicehq/sluice/internal/tracing"
)

const (
	maxRedisBackoff   = 5 * time.Second
	firstRedisBackoff = 50 * time.Millisecond
)

var errLeaseLost = errors.New("the relay's lock lease is no longer valid")

// topicRun is one topic's relaying under one lock lease: what every
// partition's loop and batch shares.
type topicRun struct {
	r        *Relay
	topic    string
	lease    *consul.Lease
	th       *throttle
	log      *slog.Logger
	co       *coalescer           // merges the partitions' batches into enqueue calls
	consumer sarama.Consumer      // the topic's partition consumers come from it
	om       sarama.OffsetManager // nil for a shadow, which never commits
	durable  *durableMarks        // commits only what Redis kept (durable.go)
	topicID  string               // the topic's Kafka id, its log's identity ("": unknown; logid.go)
}

// relayTopic relays every partition of topic while lctx lives (the lease).
// Unless it is a shadow, it first raises the topic's fence in every Redis
// partition (raiseFence): nothing it does before can write.
func (r *Relay) relayTopic(lctx context.Context, topic string, lease *consul.Lease, th *throttle, log *slog.Logger) error {
	if !r.cfg.Shadow {
		if err := r.raiseFence(lctx, topic, lease, log); err != nil {
			return err
		}
	}
	sc, err := r.saramaConfig()
	if err != nil {
		return err
	}
	client, err := r.cfg.Kafka.Connect(lctx, sc)
	if err != nil {
		return err
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	group := kafka.RelayGroup(r.cfg.ConsumerGroup, topic)
	committed, err := kafka.GroupOffsets(client, group, topic, parts)
	if err != nil {
		return err
	}
	if committed == nil && !r.cfg.Shadow {
		if !lease.Valid() {
			return errLeaseLost
		}
		if err := seedGroup(client, group, topic, parts, log); err != nil {
			return err
		}
	}
	var (
		om      sarama.OffsetManager
		durable *durableMarks
	)
	if !r.cfg.Shadow {
		epoch := ""
		if r.cfg.DurableAfter > 0 {
			if epoch, err = r.currentEpoch(lctx, func(err error) { log.Warn("waiting for Redis before relaying", "err", err) }); err != nil {
				return err
			}
		}
		durable = newDurableMarks(r.cfg.DurableAfter, epoch, r.now)
		if om, err = sarama.NewOffsetManagerFromClient(group, client); err != nil {
			return fmt.Errorf("kafka offset manager: %w", err)
		}
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	defer consumer.Close()

	ctx, cancel := context.WithCancel(lctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		// progress is each partition's next offset to settle (-1: not
		// known yet), for the lag watcher.
		progress = map[int32]*atomic.Int64{}
	)
	for _, p := range parts {
		progress[p] = &atomic.Int64{}
		progress[p].Store(-1)
	}
	run := &topicRun{r: r, topic: topic, lease: lease, th: th, log: log, consumer: consumer, om: om, durable: durable}
	run.learnTopicID(client, parts)
	if !r.cfg.Shadow {
		if err := run.lowerTruncated(lctx, client, parts, committed); err != nil {
			return err
		}
	}
	run.co = newCoalescer(r.cfg.BatchSize*len(parts), run.enqueue)
	coDone := make(chan struct{})
	go func() { defer close(coDone); run.co.run(ctx) }()
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if r.cfg.Shadow {
				// A shadow reads along from where the live relay
				// would go on, and never commits.
				start := committed[p]
				if start <= 0 {
					start = sarama.OffsetOldest
				}
				err = run.relayPartition(ctx, p, start, nil, progress[p])
			} else {
				err = run.managedPartition(ctx, p, progress[p])
			}
			if err != nil && ctx.Err() == nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	// The committer: marks are set only after Redis accepted a job and all
	// before it, and only once those writes are durable (durable.go), so a
	// commit never skips a job. While the lease is valid it commits every
	// CommitEvery; after that the new holder owns the offsets and we stop
	// committing (a late commit could only move them back, which costs
	// redelivered, deduped jobs, never lost ones).
	lagDone := make(chan struct{})
	go func() { defer close(lagDone); r.watchLag(ctx, client, topic, progress) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := run.watchTopicID(ctx, client); err != nil {
			once.Do(func() { first = err; cancel() })
		}
	}()
	var restarted atomic.Bool
	committerDone := make(chan struct{})
	go func() {
		defer close(committerDone)
		t := time.NewTicker(r.cfg.CommitEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if om == nil || !lease.Valid() {
					continue
				}
				if r.settleDurable(ctx, durable) {
					restarted.Store(true)
					cancel()
					return
				}
				om.Commit()
			}
		}
	}()
	wg.Wait()
	cancel()
	<-committerDone
	<-lagDone
	<-coDone
	if om != nil {
		if lease.Valid() && !restarted.Load() {
			// A graceful stop hands over with every durable offset
			// committed; the new holder relays the rest again, deduped.
			sctx, scancel := context.WithTimeout(context.WithoutCancel(lctx), 2*time.Second)
			if r.settleDurable(sctx, durable) {
				restarted.Store(true)
			}
			scancel()
			om.Commit()
		}
		durable.closeAll()
		om.Close() // always: its goroutines must not outlive the lease
	}
	if restarted.Load() && lctx.Err() == nil {
		return errRedisRestarted
	}
	if first == nil && lctx.Err() == nil {
		first = errors.New("all partition consumers stopped")
	}
	return first
}

// seedGroup makes sure the consumer group exists before sarama's offset
// manager asks for its offsets. Kafka answers a group that never committed
// with "no offset"; kfake (and some brokers) answer GROUP_ID_NOT_FOUND,
// which the offset manager treats as fatal. Seeding the group with each
// partition's oldest offset skips nothing: it is where a new group starts
// anyway. Only the lock holder calls this, so nobody commits meanwhile.
func seedGroup(client sarama.Client, group, topic string, parts []int32, log *slog.Logger) error {
	broker, err := client.Coordinator(group)
	if err != nil {
		return fmt.Errorf("coordinator of %s: %w", group, err)
	}
	commit := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: group, ConsumerGroupGeneration: -1, RetentionTime: -1}
	for _, p := range parts {
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("oldest offset of %s/%d: %w", topic, p, err)
		}
		commit.AddBlock(topic, p, oldest, 0, "")
	}
	cresp, err := broker.CommitOffset(commit)
	if err != nil {
		return fmt.Errorf("seeding %s: %w", group, err)
	}
	for _, byPart := range cresp.Errors {
		for p, kerr := range byPart {
			if kerr != sarama.ErrNoError {
				return fmt.Errorf("seeding %s at %s/%d: %w", group, topic, p, kerr)
			}
		}
	}
	log.Info("new consumer group: starting at the oldest offsets", "group", group)
	return nil
}

// managedPartition relays one partition from its committed offset, marking
// each batch's offsets once it is settled.
func (t *topicRun) managedPartition(ctx context.Context, partition int32, progress *atomic.Int64) error {
	pom, err := t.om.ManagePartition(t.topic, partition)
	if err != nil {
		return fmt.Errorf("offsets of %s/%d: %w", t.topic, partition, err)
	}
	// relayTopic closes pom after its last commit (durable.closeAll).
	next, meta := pom.NextOffset()
	next = t.startOf(partition, next, meta)
	// The metadata names the log the offset belongs to (logid.go).
	mark := t.durable.track(partition, func(o int64) { pom.MarkOffset(o, t.topicID) }, pom.AsyncClose)
	return t.relayPartition(ctx, partition, next, mark, progress)
}

// relayPartition moves one Kafka partition's messages into Redis in
// batches from offset start until ctx ends, calling mark (if not nil) with
// the next offset after each settled batch, which progress holds too.
//
// Batches go one after the other: the next is read only once the one
// before it is settled, so every Redis partition sees this Kafka
// partition's records in offset order, which the watermark's dedupe needs
// (docs/relay.md).
func (t *topicRun) relayPartition(ctx context.Context, partition int32, start int64, mark func(int64), progress *atomic.Int64) error {
	r, topic := t.r, t.topic
	log := t.log.With("partition", partition)
	next := start
	pc, err := t.consumer.ConsumePartition(topic, partition, next)
	if errors.Is(err, sarama.ErrOffsetOutOfRange) {
		// The committed offset fell out of retention: relay what is left.
		log.Warn("committed offset is not in Kafka's log (retention removed it, or the log was truncated); starting at the oldest", "offset", next)
		pc, err = t.consumer.ConsumePartition(topic, partition, sarama.OffsetOldest)
	}
	if err != nil {
		return fmt.Errorf("consume %s/%d at %d: %w", topic, partition, next, err)
	}
	defer pc.AsyncClose()
	if start >= 0 {
		progress.Store(start)
	}
	lag := r.m.lag.WithLabelValues(topic, strconv.Itoa(int(partition)))
	batch := make([]*sarama.ConsumerMessage, 0, r.cfg.BatchSize)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return nil
		case err := <-pc.Errors():
			r.m.consumeErrors.WithLabelValues(topic).Inc()
			log.Warn("reading from Kafka", "err", err)
			continue
		case m, ok := <-pc.Messages():
			if !ok {
				return fmt.Errorf("%s/%d: consumer closed", topic, partition)
			}
			batch = append(batch, m)
		}
	fill: // take what is already buffered, up to a batch
		for len(batch) < r.cfg.BatchSize {
			select {
			case m := <-pc.Messages():
				batch = append(batch, m)
			default:
				break fill
			}
		}
		if err := t.relayBatch(ctx, batch, log); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		last := batch[len(batch)-1]
		if mark != nil {
			mark(last.Offset + 1)
		}
		progress.Store(last.Offset + 1)
		lag.Set(float64(max(pc.HighWaterMarkOffset()-(last.Offset+1), 0)))
	}
}

// watchLag sets the topic's lag gauges every LagEvery from Kafka's end
// offsets, so a relay that cannot write (paused, waiting on Redis or the
// memory guard) shows its lag growing; after each batch relayPartition sets
// them too. When the relay stops relaying the topic (lock lost, shutdown)
// the series go: the new holder reports them.
func (r *Relay) watchLag(ctx context.Context, client sarama.Client, topic string, progress map[int32]*atomic.Int64) {
	defer func() {
		for p := range progress {
			r.m.lag.DeleteLabelValues(topic, strconv.Itoa(int(p)))
		}
	}()
	t := time.NewTicker(r.cfg.LagEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for p, next := range progress {
			from := next.Load()
			if from < 0 {
				continue
			}
			end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				continue // Kafka unreachable: the consumers say so
			}
			r.m.lag.WithLabelValues(topic, strconv.Itoa(int(p))).Set(float64(max(end-from, 0)))
		}
	}
}

// relayBatch moves a batch into Redis, or to the DLQ or back to Kafka; when
// it returns nil every message of the batch is settled and its offset may
// be committed.
func (t *topicRun) relayBatch(ctx context.Context, batch []*sarama.ConsumerMessage, log *slog.Logger) error {
	r, topic := t.r, t.topic
	r.m.batchSize.Observe(float64(len(batch)))
	waitStart := time.Now()
	if err := t.th.Wait(ctx, len(batch)); err != nil {
		return err
	}
	r.m.rateWait.WithLabelValues(topic).Add(time.Since(waitStart).Seconds())

	now := r.now()
	items := make([]queue.Item, 0, len(batch))
	from := make([]*sarama.ConsumerMessage, 0, len(batch))
	var poison []kafka.Message
	var cancels []string
	var traced *batchTrace // the jobs whose envelopes carry a trace context
	if tracing.Enabled() {
		traced = &batchTrace{received: waitStart}
	}
	for _, m := range batch {
		it, reason := r.item(topic, m, now, traced)
		switch {
		case reason != "":
			poison = append(poison, deadLetter(topic, m, reason))
		case it.ID == "" && !it.Close:
			// A bulk submission that failed halfway: its items come
			// before this record, so cancel after enqueueing them.
			cancels = append(cancels, it.Group)
		default:
			it.TopicID = t.topicID
			items = append(items, it)
			from = append(from, m)
		}
	}
	if r.cfg.Shadow {
		r.m.jobs.WithLabelValues(topic, "shadowed").Add(float64(len(items)))
		r.m.jobs.WithLabelValues(topic, "dead_lettered").Add(float64(len(poison)))
		return nil
	}
	if len(poison) > 0 {
		if err := t.produce(ctx, poison, log); err != nil {
			if errors.Is(err, queue.ErrFenced) {
				r.m.jobs.WithLabelValues(topic, "fenced").Add(float64(len(poison)))
			}
			return err
		}
		r.m.jobs.WithLabelValues(topic, "dead_lettered").Add(float64(len(poison)))
		if err := t.countMilestone(ctx, queue.MilestoneDeadLettered, len(poison), log); err != nil {
			return err
		}
		log.Warn("poison messages sent to the DLQ", "count", len(poison), "dlq", kafka.DLQTopic(topic), "first_reason", string(poison[0].Headers[0].Value))
	}
	if len(items) == 0 {
		return t.cancelGroups(ctx, cancels, log)
	}
	results, err := t.co.Enqueue(ctx, items) // merged with the other partitions' waiting batches
	if traced != nil {
		traced.end(topic, r.pool.Keyspace(), items, results, err)
	}
	if err != nil {
		return err
	}
	// Fenced: deposed. Stop before any other side effect of the batch.
	fenced := 0
	for _, res := range results {
		if res.Outcome == queue.Fenced {
			fenced++
		}
	}
	if fenced > 0 {
		r.m.jobs.WithLabelValues(topic, "fenced").Add(float64(fenced))
		return queue.ErrFenced
	}
	if err := t.cancelGroups(ctx, cancels, log); err != nil {
		return err
	}
	var again []kafka.Message
	counts := map[string]int{}
	for i, res := range results {
		switch res.Outcome {
		case queue.Failed:
			msg := r.requeue(topic, from[i], res.Err)
			again = append(again, msg)
			if msg.Topic == topic {
				counts["requeued"]++
			} else {
				counts["dead_lettered"]++
			}
		default:
			counts[res.Outcome.String()]++
		}
	}
	if len(again) > 0 {
		if err := t.produce(ctx, again, log); err != nil {
			if errors.Is(err, queue.ErrFenced) {
				r.m.jobs.WithLabelValues(topic, "fenced").Add(float64(len(again)))
			}
			return err
		}
		if err := t.countMilestone(ctx, queue.MilestoneRequeued, counts["requeued"], log); err != nil {
			return err
		}
		if err := t.countMilestone(ctx, queue.MilestoneDeadLettered, counts["dead_lettered"], log); err != nil {
			return err
		}
	}
	for outcome, n := range counts {
		r.m.jobs.WithLabelValues(topic, outcome).Add(float64(n))
	}
	return nil
}

// countMilestone adds to a milestone of the topic's funnel that no script counts:
// messages produced to Kafka again or to the DLQ. After the produce and
// before the commit: a relay that dies between the two counts them again
// when it relays them again (the funnel's docs say so). A count Redis
// refuses for a reason of its own is logged and lost, showing as a gap;
// one refused because Redis cannot serve or write now (MISCONF, loading,
// down) waits for it with the batch. Fenced by the lease's token: a
// deposed relay's count is refused (the new holder counts the same records
// when it relays them again), and the error wrapping queue.ErrFenced, or
// errLeaseLost, is returned so that the relay stops.
func (t *topicRun) countMilestone(ctx context.Context, milestone string, n int, log *slog.Logger) error {
	if n == 0 {
		return nil
	}
	failures := 0
	rw := t.r.redisWait("counting the funnel of topic "+t.topic, log)
	defer rw.end()
	for {
		if !t.lease.Valid() {
			return errLeaseLost
		}
		err := t.r.pool.CountMilestoneFenced(ctx, t.lease.Token(), t.topic, milestone, int64(n))
		switch {
		case err == nil || ctx.Err() != nil:
			return nil
		case errors.Is(err, queue.ErrFenced):
			return err
		case !queue.Transient(err):
			log.Warn("counting the funnel's milestone failed", "milestone", milestone, "jobs", n, "err", err)
			return nil
		}
		rw.failed(err, "")
		if waitBackoff(ctx, &failures) != nil {
			return nil
		}
	}
}

// cancelGroups cancels bulk groups whose submission failed halfway,
// retrying while Redis cannot serve: the cancel is settled, and its offset
// committed, only once Redis took it. Each cancel is fenced by the lease's
// token: a deposed relay's is refused, and the relay stops.
func (t *topicRun) cancelGroups(ctx context.Context, groups []string, log *slog.Logger) error {
	r, topic := t.r, t.topic
	for i, g := range groups {
		failures := 0
		rw := r.redisWait("cancelling a bulk group of topic "+topic, log)
		for {
			if !t.lease.Valid() {
				rw.end()
				return errLeaseLost
			}
			n, err := r.pool.CancelGroupFenced(ctx, t.lease.Token(), topic, g, r.now())
			if errors.Is(err, queue.ErrFenced) {
				rw.end()
				r.m.jobs.WithLabelValues(topic, "fenced").Add(float64(len(groups) - i))
				return err
			}
			if err == nil {
				// Settled once the replicas have it, as an enqueue.
				err = r.waitReplicas(ctx, topic, []queue.Queue{r.pool.Keyspace().QueueOf(topic, g, "")})
			}
			if err == nil {
				rw.end()
				log.Info("bulk group cancelled: its submission failed halfway", "group", g, "removed", n)
				r.m.jobs.WithLabelValues(topic, "group_cancelled").Inc()
				break
			}
			if ctx.Err() != nil {
				rw.end()
				return ctx.Err()
			}
			rw.failed(err, "cancelling a bulk group failed; retrying", "group", g)
			if err := waitBackoff(ctx, &failures); err != nil {
				rw.end()
				return err
			}
		}
	}
	return nil
}

// item turns a Kafka message into a queue item, or says why it is poison. A
// bulk group's close is an item with Close set; its cancel, one with
// neither an id nor Close.
func (r *Relay) item(topic string, m *sarama.ConsumerMessage, now time.Time, traced *batchTrace) (queue.Item, string) {
	for _, h := range m.Headers {
		if h == nil || string(h.Key) != job.ControlHeader {
			continue
		}
		if string(h.Value) != job.GroupCloseControl {
			return queue.Item{}, fmt.Sprintf("unknown control record %q", h.Value)
		}
		c, err := job.DecodeGroupClose(m.Value)
		if err != nil {
			return queue.Item{}, err.Error()
		}
		return queue.Item{Close: !c.Cancel, Group: c.Group, Topic: topic, GroupTotal: c.Total, CallbackURL: c.CallbackURL,
			KafkaPartition: m.Partition, Offset: m.Offset, HasPosition: true}, ""
	}
	j, err := job.Decode(m.Value)
	if err != nil {
		return queue.Item{}, "not a job envelope: " + err.Error()
	}
	if j.ID == "" {
		// Written by another producer: an id from the record's place in
		// Kafka is stable across redeliveries, so dedupe still holds.
		j.ID = fmt.Sprintf("%s-%d-%d", topic, m.Partition, m.Offset)
	}
	if err := j.Validate(topic, now); err != nil {
		return queue.Item{}, "invalid job envelope: " + err.Error()
	}
	if traced != nil && j.Traceparent != "" {
		traced.add(j, m)
	}
	return queue.Item{
		ID: j.ID, Group: j.Group, Tenant: j.Tenant, Topic: topic, Weight: j.Priority + 1, IDGiven: j.IDGiven,
		KafkaPartition: m.Partition, Offset: m.Offset, HasPosition: true,
		RunAt: j.RunAt, GroupTotal: j.GroupTotal, CallbackURL: j.CallbackURL, Envelope: m.Value,
	}, ""
}

// enqueue writes items into Redis, waiting out the memory guard and
// retrying while Redis cannot serve, logging state changes only.
func (t *topicRun) enqueue(ctx context.Context, items []queue.Item) ([]queue.Result, error) {
	r, topic, lease, log := t.r, t.topic, t.lease, t.log
	start := time.Now()
	defer func() { r.m.enqueueTime.Observe(time.Since(start).Seconds()) }()
	failures := 0
	rw := r.redisWait("relaying topic "+topic, log)
	defer rw.end()
	// Reserve each Redis's share of the batch with its memory guard, once.
	bytes := map[redis.UniversalClient]uint64{}
	layout := r.pool.Keyspace()
	for i := range items {
		bytes[r.pool.Client(layout.PartitionOfJob(items[i].Group, items[i].ID))] += uint64(len(items[i].Envelope) + jobFootprint)
	}
	for c, n := range bytes {
		if err := r.guards[c].Reserve(ctx, n); err != nil {
			return nil, err
		}
	}
	for {
		if !lease.Valid() {
			return nil, errLeaseLost
		}
		results, err := r.pool.EnqueueReporting(ctx, lease.Token(), items, r.now(), t.logChanged)
		if err == nil {
			// --durable-after replicas:N: settled only once the
			// replicas have it; else written again, deduplicated.
			err = r.waitReplicas(ctx, topic, queuesOf(layout, items))
		}
		if err == nil {
			return results, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		rw.failed(err, "Redis cannot take the batch; retrying with backoff, nothing committed")
		r.m.redisRetries.WithLabelValues(topic).Inc()
		if err := waitBackoff(ctx, &failures); err != nil {
			return nil, err
		}
	}
}

// redisWait is one call's retries of a write Redis must take: a Transient
// failure (Redis down, loading, unable to persist) joins the relay's
// outage, logged once per outage however many calls wait, and its time
// counted; any other failure is logged once for the call. end closes it.
type redisWait struct {
	r      *Relay
	what   string
	log    *slog.Logger
	done   func() // set while the call waits in the outage
	logged bool   // a failure of another kind was logged
}

func (r *Relay) redisWait(what string, log *slog.Logger) *redisWait {
	return &redisWait{r: r, what: what, log: log}
}

// failed records a failure that the caller retries; msg is how a failure
// other than Redis's unavailability is logged.
func (w *redisWait) failed(err error, msg string, args ...any) {
	switch {
	case queue.Transient(err):
		if w.done == nil {
			w.done = w.r.outage.Wait(w.what, err)
		}
	case !w.logged:
		w.log.Warn(msg, append(args, "err", err)...)
		w.logged = true
	}
}

// end closes the call's wait, whether it went through or gave up; again,
// it does nothing.
func (w *redisWait) end() {
	if w.done != nil {
		w.done()
		w.done = nil
	}
	if w.logged {
		w.log.Info(w.what + ": Redis takes the writes again")
		w.logged = false
	}
}

// produce writes records to Kafka (all replicas), retrying until Kafka
// takes them: a message is only settled, and its offset committed, once its
// dead letter or requeued copy is durable.
//
// Kafka cannot refuse a deposed relay's record, so before each try the
// relay checks its lease and then the fence in Redis (queue.CheckFence),
// which every new holder raises before it writes: a relay that was deposed
// before the check produces nothing and stops (an error wrapping
// queue.ErrFenced). One paused between the check and Kafka's answer can
// still add a copy of a record the new holder also produces
// (docs/relay.md says what that costs).
func (t *topicRun) produce(ctx context.Context, msgs []kafka.Message, log *slog.Logger) error {
	r := t.r
	failures := 0
	for {
		if !t.lease.Valid() {
			return errLeaseLost
		}
		if err := r.pool.CheckFence(ctx, t.topic, t.lease.Token()); err != nil {
			if errors.Is(err, queue.ErrFenced) || ctx.Err() != nil {
				return err
			}
			log.Warn("cannot check the fence before producing to Kafka; retrying", "err", err)
			if err := waitBackoff(ctx, &failures); err != nil {
				return err
			}
			continue
		}
		results, err := r.producer.Produce(ctx, kafka.AcksAll, msgs)
		if err != nil {
			return err
		}
		var failed []kafka.Message
		for i, res := range results {
			if res.Err != nil {
				failed = append(failed, msgs[i])
			}
		}
		if len(failed) == 0 {
			return nil
		}
		log.Warn("producing to Kafka failed; retrying", "count", len(failed), "err", results[0].Err)
		msgs = failed
		if err := waitBackoff(ctx, &failures); err != nil {
			return err
		}
	}
}

// waitBackoff counts one more failure and waits the backoff after it
// (firstRedisBackoff doubled per failure up to maxRedisBackoff, with jitter,
// so relays of many topics failing together do not retry in step), or
// until ctx ends.
func waitBackoff(ctx context.Context, failures *int) error {
	*failures++
	return retry.Sleep(ctx, retry.Backoff(firstRedisBackoff, maxRedisBackoff, *failures))
}

// deadLetter is a poison message's record for <topic>.dlq: the original key
// and bytes, the reason and where it came from in headers.
func deadLetter(topic string, m *sarama.ConsumerMessage, reason string) kafka.Message {
	headers := []sarama.RecordHeader{
		{Key: []byte(kafka.HeaderDLQReason), Value: []byte(reason)},
		{Key: []byte(kafka.HeaderSource), Value: fmt.Appendf(nil, "%s/%d/%d", topic, m.Partition, m.Offset)},
	}
	for _, h := range m.Headers {
		if h != nil && string(h.Key) != kafka.HeaderDLQReason && string(h.Key) != kafka.HeaderSource {
			headers = append(headers, *h)
		}
	}
	return kafka.Message{Topic: kafka.DLQTopic(topic), Key: m.Key, Value: m.Value, Partition: -1, Headers: headers}
}

// requeue is the record that puts a job Redis refused back on its topic, or
// into the DLQ once it has been requeued MaxRequeues times.
func (r *Relay) requeue(topic string, m *sarama.ConsumerMessage, cause error) kafka.Message {
	n := 0
	for _, h := range m.Headers {
		if h != nil && string(h.Key) == kafka.HeaderRequeues {
			n, _ = strconv.Atoi(string(h.Value))
		}
	}
	if n >= r.cfg.MaxRequeues {
		return deadLetter(topic, m, fmt.Sprintf("Redis refused the job %d times: %v", n+1, cause))
	}
	headers := []sarama.RecordHeader{{Key: []byte(kafka.HeaderRequeues), Value: []byte(strconv.Itoa(n + 1))}}
	for _, h := range m.Headers {
		if h != nil && string(h.Key) != kafka.HeaderRequeues {
			headers = append(headers, *h)
		}
	}
	return kafka.Message{Topic: topic, Key: m.Key, Value: m.Value, Partition: -1, Headers: headers}
}
