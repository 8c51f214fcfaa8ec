package queue

import (
	"fmt"
	"strconv"
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
