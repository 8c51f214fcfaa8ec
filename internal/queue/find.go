package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/wire"
)

// Where a job is, as FindJob tells it (internal/wire says what each means).
const (
	WhereRunning    = wire.JobRunning
	WhereDelayed    = wire.JobDelayed
	WhereReady      = wire.JobReady
	WhereDead       = wire.JobDead
	WhereDone       = wire.JobDone
	WhereCancelled  = wire.JobCancelled
	WhereInKafka    = wire.JobInKafka
	WhereRatePaused = wire.JobRatePaused
	WhereNotFound   = wire.JobNotFound
)

// Why a delayed job waits.
const (
	DelayRetry = "retry"    // a failed attempt's backoff
	DelayRunAt = "run_at"   // the envelope's run_at
	DelayDefer = "deferred" // its rate limit's slot, or its idempotency key held by another job
)

// JobLookup is what FindJob needs: the job's topic and id, and what places
// it in a queue partition (its group, if it has one). A Kafka position (the
// gate's answer) lets a job Redis does not hold be told apart: still in
// Kafka, or relayed and since done without a record.
type JobLookup struct {
	Topic, ID, Group string
	HasPosition      bool
	KafkaPartition   int32
	Offset           int64
}

// JobWhereabouts is what Redis can tell of a job.
type JobWhereabouts struct {
	Queue Queue
	// Where is one of the Where* constants. NotFound with Relayed set:
	// it was written into Redis and is no longer there (done without a
	// record, or cancelled); without a position nothing more can be said.
	Where   string
	Relayed bool
	// Attempts made so far (from the entry or the record); LastError, the
	// last failed attempt's error, kept in the record while it retries
	// and after it died; Result, a done job's result when it asked for
	// retain.
	Attempts  int
	LastError string
	Result    string
	// Worker is who holds a running job (the claiming pool's Owner: a
	// worker's host/pid), "" when its pool named none; Since, when its
	// batch was claimed (by the claiming pool's clock).
	Worker string
	Since  time.Time
	// Batch and Until: a running job's batch and its lease deadline; a
	// delayed job's due time (Why says what for); a dead or done job's
	// time of death or completion.
	Batch string
	Until time.Time
	Why   string
	// Record is the job's record as stored, when it has one.
	Record map[string]string
	// CancelRequested: a running job's cancel was asked for (its record's
	// cancel_ms); its worker stops it at its next lease extension.
	CancelRequested time.Time
	// Paused: since when the topic's relay rate is paused (rate-paused).
	Paused time.Time
	// entry is the job's entry where it was found (ready, delayed or
	// running), place its place in its batch (running): what CancelJob
	// names to its scripts.
	entry string
	place int
}

// findScanBound bounds the entries FindJob reads on a lane and in
// delayed: a lookup must not stall Redis behind a million-job lane.
const findScanBound = 10000

// FindJob looks for a job in its queue partition: its record, the claimed
// batches, delayed and its lane (its group's; a job without a group is
// looked for on the partition's shared lanes), each within
// findScanBound entries, then the Kafka watermark. It reads only; what it
// reads may change between its commands, as the job moves on.
func (p *Pool) FindJob(ctx context.Context, l JobLookup) (JobWhereabouts, error) {
	w, err := p.findJob(ctx, l)
	if err != nil || (w.Where != WhereInKafka && (w.Where != WhereNotFound || w.Relayed)) {
		return w, err
	}
	// Not in Redis, not known relayed: a paused rate holds it in Kafka.
	paused, err := p.TopicPaused(ctx, l.Topic)
	if err != nil || paused.IsZero() {
		return w, err
	}
	w.Where, w.Paused = WhereRatePaused, paused
	return w, nil
}

func (p *Pool) findJob(ctx context.Context, l JobLookup) (JobWhereabouts, error) {
	q := p.keyspace.QueueOf(l.Topic, l.Group, l.ID)
	w := JobWhereabouts{Queue: q, Where: WhereNotFound}
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	rec, err := c.HGetAll(ctx, k.Job(l.ID)).Result()
	if err != nil {
		return w, fmt.Errorf("job %s on %s: %w", l.ID, q, err)
	}
	if len(rec) > 0 {
		w.Record = rec
		w.Attempts, _ = strconv.Atoi(rec["attempts"])
		w.LastError, w.Result = rec["last_error"], rec["result"]
		switch rec["state"] {
		case "dead":
			w.Where, w.Until = WhereDead, msTime(rec["dead_ms"])
			return w, nil
		case "done":
			w.Where, w.Until = WhereDone, msTime(rec["done_ms"])
			return w, nil
		case "cancelled":
			w.Where, w.Until = WhereCancelled, msTime(rec["cancelled_ms"])
			return w, nil
		}
		w.CancelRequested = msTime(rec["cancel_ms"])
	}
	if found, err := p.findRunning(ctx, q, l.ID, &w); err != nil || found {
		return w, err
	}
	if found, err := p.findDelayed(ctx, q, l.ID, &w); err != nil || found {
		return w, err
	}
	if found, err := p.findReady(ctx, q, l.ID, l.Group, &w); err != nil || found {
		return w, err
	}
	if l.HasPosition {
		wm, err := c.HGet(ctx, k.Watermark(), strconv.Itoa(int(l.KafkaPartition))).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return w, fmt.Errorf("watermark of %s: %w", q, err)
		}
		if errors.Is(err, redis.Nil) || l.Offset > wm {
			w.Where = WhereInKafka
			return w, nil
		}
		w.Relayed = true
	}
	return w, nil
}

func msTime(ms string) time.Time {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// findRunning looks through the claimed batches (the findScanBound/100
// due first) for the job's entry in a place not settled yet.
func (p *Pool) findRunning(ctx context.Context, q Queue, id string, w *JobWhereabouts) (bool, error) {
	found := false
	err := p.eachRunning(ctx, q, findScanBound/100, func(batch string, deadline time.Time, pe ParsedEntry, place int, e string) bool {
		if pe.ID != id {
			return true
		}
		w.Where, w.Batch, w.Until, w.Worker, w.Since = WhereRunning, batch, deadline, batchOwner(batch), batchClaimed(batch)
		w.entry, w.place = e, place
		w.Attempts = max(w.Attempts, pe.Attempts+1) // the attempt under way
		found = true
		return false
	})
	return found, err
}

// eachRunning calls fn with each job of the batches claimed in q (the
// first batches due, up to batches) whose place is not settled yet,
// until fn returns false.
func (p *Pool) eachRunning(ctx context.Context, q Queue, batches int, fn func(batch string, deadline time.Time, pe ParsedEntry, place int, entry string) bool) error {
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	leased, err := c.ZRangeWithScores(ctx, k.Leases(), 0, int64(batches)-1).Result()
	if err != nil || len(leased) == 0 {
		return err
	}
	pipe := c.Pipeline()
	lists := make([]*redis.StringSliceCmd, len(leased))
	settled := make([]*redis.StringCmd, len(leased))
	for i, b := range leased {
		name, _ := b.Member.(string)
		lists[i] = pipe.LRange(ctx, k.Lease(name), 0, -1)
		settled[i] = pipe.Get(ctx, k.Settled(name))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("claimed batches of %s: %w", q, err)
	}
	for i, b := range leased {
		name, _ := b.Member.(string)
		done := settled[i].Val()
		for place, e := range lists[i].Val() {
			pe, err := ParseEntry(e)
			if err != nil || (place < len(done) && done[place] != 0) {
				continue
			}
			if !fn(name, time.UnixMilli(int64(b.Score)), pe, place, e) {
				return nil
			}
		}
	}
	return nil
}

// findDelayed scans delayed for the job's entry (ZSCAN with a pattern of
// its head, so Redis does the matching).
func (p *Pool) findDelayed(ctx context.Context, q Queue, id string, w *JobWhereabouts) (bool, error) {
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	pattern := "[0-9]* " + globEscape(id) + " *"
	var cursor uint64
	for read := 0; read < findScanBound; {
		members, next, err := c.ZScan(ctx, k.Delayed(), cursor, pattern, 1000).Result()
		if err != nil {
			return false, fmt.Errorf("delayed of %s: %w", q, err)
		}
		for i := 0; i+1 < len(members); i += 2 {
			pe, err := ParseEntry(members[i])
			if err != nil || pe.ID != id {
				continue
			}
			due, _ := strconv.ParseFloat(members[i+1], 64)
			w.Where, w.Until, w.Attempts = WhereDelayed, time.UnixMilli(int64(due)), pe.Attempts
			w.entry = members[i]
			w.Why = delayReason(pe, w.Record["state"], int64(due))
			return true, nil
		}
		read += 1000
		if cursor = next; cursor == 0 {
			break
		}
	}
	return false, nil
}

// delayReason tells a retry (an attempt failed: its record's state says
// so) from the envelope's run_at (due when it says) and a deferral
// (neither).
func delayReason(pe ParsedEntry, recordState string, due int64) string {
	if pe.Attempts > 0 && recordState == "retrying" {
		return DelayRetry
	}
	if env, err := job.Decode([]byte(pe.Envelope)); err == nil && !env.RunAt.IsZero() && env.RunAt.UnixMilli() == due {
		return DelayRunAt
	}
	return DelayDefer
}

// findReady reads the job's lane (its group's, or the partition's shared
// lanes of the topic), findScanBound entries at most in all.
func (p *Pool) findReady(ctx context.Context, q Queue, id, group string, w *JobWhereabouts) (bool, error) {
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	var lanes []string
	if group != "" {
		lanes = []string{LaneOf(group, "", q.Topic, 0)}
	} else {
		names, err := c.ZRange(ctx, k.Lanes(), 0, -1).Result()
		if err != nil {
			return false, fmt.Errorf("lanes of %s: %w", q, err)
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "g/") {
				lanes = append(lanes, n)
			}
		}
	}
	needle := " " + id + " "
	read := 0
	for _, lane := range lanes {
		for from := int64(0); read < findScanBound; from += 1000 {
			entries, err := c.LRange(ctx, k.Lane(lane), from, from+999).Result()
			if err != nil {
				return false, fmt.Errorf("lane %s of %s: %w", lane, q, err)
			}
			for _, e := range entries {
				if !strings.Contains(e, needle) {
					continue
				}
				if pe, err := ParseEntry(e); err == nil && pe.ID == id {
					w.Where, w.Attempts, w.Why = WhereReady, pe.Attempts, lane
					w.entry = e
					return true, nil
				}
			}
			read += len(entries)
			if len(entries) < 1000 {
				break
			}
		}
	}
	return false, nil
}

// globEscape quotes the characters a Redis MATCH pattern reads.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// JobView is a lookup's answer as the gate's and the admin API's
// GET .../topics/{topic}/jobs/{id} render it: one JSON for both, and the
// Go client's (internal/wire).
type JobView = wire.JobView

// View renders a lookup's answer.
func (w JobWhereabouts) View(l JobLookup) JobView {
	v := JobView{Topic: l.Topic, ID: l.ID, RedisPartition: w.Queue.Part, State: w.Where, Relayed: w.Relayed,
		Attempts: w.Attempts, LastError: w.LastError, Result: w.Result, Worker: w.Worker, Batch: w.Batch, Why: w.Why}
	if !w.Until.IsZero() {
		u := w.Until.UTC()
		v.Until = &u
	}
	if !w.Since.IsZero() {
		u := w.Since.UTC()
		v.Since = &u
	}
	switch w.Where {
	case WhereRunning:
		v.Note = "claimed in batch " + w.Batch + "; until is its lease deadline, which the worker extends while it runs the job"
		if w.Worker != "" {
			v.Note = "held by worker " + w.Worker + ", " + v.Note
		}
		if !w.CancelRequested.IsZero() {
			v.Note = "cancel requested at " + w.CancelRequested.UTC().Format(time.RFC3339Nano) + ": its worker cancels its handler's context at its next lease extension, then settles it cancelled; " + v.Note
		}
	case WhereDelayed:
		v.Note = "waiting until " + w.Until.UTC().Format(time.RFC3339Nano) + " (" + w.Why + "), then back on its lane"
	case WhereReady:
		v.Note = "on lane " + w.Why + ", waiting its turn in the fair order"
	case WhereDead:
		v.Note = "dead after its last attempt; until is when it died; replay it with the admin API"
	case WhereDone:
		v.Note = "done; until is when; its record is kept for its retain, or because an attempt had failed"
	case WhereCancelled:
		v.Note = "cancelled by an operator before it ended; until is when"
	case WhereInKafka:
		v.Note = "in Kafka: its offset is above what the relay applied to Redis"
	case WhereRatePaused:
		since := w.Paused.UTC()
		v.Until = &since
		v.Why = "rate paused"
		v.Note = "waiting in Kafka: the topic's relay rate is paused (since " + since.Format(time.RFC3339) + "; until is when), so the relay moves nothing to Redis; sluice rate resume " + l.Topic + " lets it through"
		if !l.HasPosition {
			v.Note += " (without the job's Kafka position, a job done long ago without a record reads the same)"
		}
	default:
		switch {
		case w.Relayed:
			v.Note = "relayed to Redis and no longer there: done without a record (a plain job keeps none unless it asks for retain), or cancelled with its group"
		case l.HasPosition:
			v.Note = "not found"
		default:
			v.Note = "not in Redis (lanes read up to 10,000 entries): done without a record, cancelled, or not relayed yet; give the Kafka partition and offset the gate answered to tell"
		}
	}
	return v
}

// ParseJobLookup reads a lookup's query: group (the job's group, which
// places it), and partition and offset (its Kafka position, as the gate
// answered), both or neither.
func ParseJobLookup(topic, id string, group, partition, offset string) (JobLookup, error) {
	l := JobLookup{Topic: topic, ID: id, Group: group}
	if err := ValidTopic(topic); err != nil {
		return l, err
	}
	if id == "" || strings.ContainsAny(id, " \t\r\n") {
		return l, fmt.Errorf("job id %q: want a non-empty id without spaces", id)
	}
	if (partition == "") != (offset == "") {
		return l, errors.New("give both partition and offset (the job's Kafka position, as the gate answered), or neither")
	}
	if partition != "" {
		kp, err := strconv.ParseInt(partition, 10, 32)
		if err != nil || kp < 0 {
			return l, fmt.Errorf("partition %q: want a Kafka partition number", partition)
		}
		off, err := strconv.ParseInt(offset, 10, 64)
		if err != nil || off < 0 {
			return l, fmt.Errorf("offset %q: want a Kafka offset", offset)
		}
		l.HasPosition, l.KafkaPartition, l.Offset = true, int32(kp), off
	}
	return l, nil
}

// JobListing is one job of ListJobs: running or delayed, with what
// FindJob would say of it.
type JobListing struct {
	ID        string    `json:"id"`
	Lane      string    `json:"lane,omitempty"`
	State     string    `json:"state"` // a Where* constant
	Partition int       `json:"partition"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error,omitempty"` // a dead job's
	Worker    string    `json:"worker,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	Batch     string    `json:"batch,omitempty"`
	Until     time.Time `json:"until,omitzero"` // a running job's lease deadline, a delayed one's due time, when a dead or retained one ended; none for a ready job
	Why       string    `json:"why,omitempty"`
}
