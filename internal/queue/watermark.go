package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// LogChange is a Kafka partition whose watermark in a queue partition
// belonged to another log of the topic: it was stored under another topic
// id, so the topic was deleted and created again. The enqueue script did
// not dedupe the batch against OldOffset: it reset the watermark to the
// new log and counted the change (stats wm_log_changed). What it costs is
// a rerun of the records the new log shares offsets with, never a drop.
type LogChange struct {
	Queue          Queue
	KafkaPartition int32
	OldTopicID     string
	NewTopicID     string
	OldOffset      int64 // the old log's watermark, now forgotten
}

// enqueueCodes splits the enqueue script's answer into its want codes and
// the log changes after them (three values each: Kafka partition, old
// topic id, old offset; see enqueueScript).
func enqueueCodes(val any, want int) ([]int64, []LogChange, error) {
	vals, ok := val.([]any)
	if !ok || len(vals) < want || (len(vals)-want)%3 != 0 {
		return nil, nil, fmt.Errorf("%d values returned, want %d codes and three per log change", len(vals), want)
	}
	codes := make([]int64, want)
	for i := range codes {
		if codes[i], ok = vals[i].(int64); !ok {
			return nil, nil, fmt.Errorf("code %d is %T, not an integer", i, vals[i])
		}
	}
	var changes []LogChange
	for rest := vals[want:]; len(rest) > 0; rest = rest[3:] {
		kp, _ := rest[0].(string)
		part, err := strconv.ParseInt(kp, 10, 32)
		old, isStr := rest[1].(string)
		off, isInt := rest[2].(int64)
		if err != nil || !isStr || !isInt {
			return nil, nil, fmt.Errorf("log change %v is not Kafka partition, topic id and offset", rest[:3])
		}
		changes = append(changes, LogChange{KafkaPartition: int32(part), OldTopicID: old, OldOffset: off})
	}
	return codes, changes, nil
}

// truncatedScript lowers a Kafka partition's watermark in one queue
// partition to just below where the relay resumes reading, when the
// watermark lies at or past ARGV[3]. Every offset a watermark holds was
// read from the log, so a log that now ends before it was truncated (an
// unclean leader election), and the records Kafka wrote since at those
// offsets are new ones that the old watermark would drop as duplicates.
// Which of the records from the resume offset on are new cannot be told
// (that takes the batches' leader epochs), so all of them apply: the old
// ones among them run again. Fenced: a deposed relay lowers nothing.
// LowerTruncated passes the log's end; once one queue partition's
// watermark shows the log truncated, it passes the resume offset for the
// others (see there).
//
// KEYS[1] fence:<topic>   string: newest lock token seen for the topic
// KEYS[2] wm:<topic>      hash: Kafka partition -> highest offset applied
// KEYS[3] stats           hash: partition counters (wm_truncated)
// ARGV[1] lock token   ARGV[2] Kafka partition   ARGV[3] the offset from
// which a watermark is lowered: the log's end offset (the next offset
// Kafka will write), or the resume offset   ARGV[4] the offset the relay
// resumes at, at most the log's end
// Returns -2 when fenced (nothing written), -1 when the watermark lies
// below ARGV[3] (nothing written), else the watermark it lowered.
var truncatedScript = newScript("truncated", `
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[1]) or '0') then
  return -2
end
local wm = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '-1')
local logEnd = tonumber(ARGV[3])
if wm < logEnd then
  return -1
end
redis.call('HSET', KEYS[2], ARGV[2], tonumber(ARGV[4]) - 1)
redis.call('HINCRBY', KEYS[3], 'wm_truncated', 1)
return wm
`)

// Truncation is a queue partition whose watermark for a Kafka partition
// lay at or past the log's end: the log was truncated below records the
// partition had applied. LowerTruncated set the watermark to Resume-1.
type Truncation struct {
	Queue          Queue
	KafkaPartition int32
	OldOffset      int64 // the watermark before, at or past End
	End            int64 // the log's end offset when it was read
	Resume         int64 // where the relay resumes reading
}

// LowerTruncated checks Kafka partition kp's watermark in every queue
// partition of topic against logEnd, the log's end offset read from Kafka
// just before (truncatedScript), and lowers each that lies at or past it to
// resume-1, resume being where the relay will read from (at most logEnd).
// The relay calls it before it relays a partition: a truncated log would
// otherwise have its new records up to the old watermark dropped as
// duplicates. It returns the watermarks it lowered; ErrFenced (wrapped)
// when a newer lock holder exists.
//
// The log is one, so one watermark at or past its end is proof enough for
// every queue partition: each watermark at or past resume is lowered too,
// though it lies below the log's end (its queue partition's last records
// came earlier in the lost stretch, and the log grew back past them), or
// the new records written at its offsets would be dropped. Those are
// lowered first and the proofs last, so that a relay that dies in
// between finds the proof again.
func (p *Pool) LowerTruncated(ctx context.Context, token uint64, topic string, kp int32, logEnd, resume int64) ([]Truncation, error) {
	resume = min(resume, logEnd)
	if err := ValidTopic(topic); err != nil {
		return nil, err
	}
	tok, part := strconv.FormatUint(token, 10), strconv.Itoa(int(kp))
	// A read needs no fence: only the writes below are fenced.
	var proofs, others []int
	for qp := range p.keyspace.Partitions {
		q := Queue{Topic: topic, Part: qp}
		wm, err := p.byPart[qp].HGet(ctx, p.keyspace.Keys(q).Watermark(), part).Int64()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading the watermark of %s: %w", q, err)
		case wm >= logEnd:
			proofs = append(proofs, qp)
		case wm >= resume:
			others = append(others, qp)
		}
	}
	if len(proofs) == 0 {
		return nil, nil
	}
	var lowered []Truncation
	for _, qp := range append(others, proofs...) {
		q := Queue{Topic: topic, Part: qp}
		k := p.keyspace.Keys(q)
		res, err := truncatedScript.run(ctx, p.byPart[qp], []string{k.Fence(), k.Watermark(), k.Stats()}, tok, part, resume, resume)
		if err != nil {
			return lowered, fmt.Errorf("lowering the watermark of %s below the truncated log's end: %w", q, err)
		}
		switch old, _ := res.(int64); {
		case old == -2:
			return lowered, fmt.Errorf("%w: lowering the watermark of %s", ErrFenced, q)
		case old >= 0:
			lowered = append(lowered, Truncation{Queue: q, KafkaPartition: kp, OldOffset: old, End: logEnd, Resume: resume})
		}
	}
	return lowered, nil
}
