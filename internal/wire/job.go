package wire

import "time"

// Where a job is (JobView.State), as a lookup tells it.
const (
	// JobRunning: in a claimed batch, not settled yet; Until is the
	// lease deadline.
	JobRunning = "running"
	// JobDelayed: waiting until Until; Why is "retry", "run_at" or
	// "deferred" (a rate-limit slot, or an idempotency key another job
	// holds).
	JobDelayed = "delayed"
	// JobReady: on its lane, waiting its turn.
	JobReady = "ready"
	// JobDead: used up its attempts; LastError and Attempts say how.
	JobDead = "dead"
	// JobDone: acked, and its record kept (retain, or an earlier failed
	// attempt); Result is what the handler returned.
	JobDone = "done"
	// JobCancelled: cancelled by an operator before it ended (sluice jobs
	// cancel); Until is when.
	JobCancelled = "cancelled"
	// JobRatePaused: Redis does not hold it, nothing says it was relayed,
	// and its topic's relay rate is paused: waiting in Kafka, held by the
	// pause; Until is since when.
	JobRatePaused = "rate-paused"
	// JobInKafka: its Kafka offset is above what the relay applied to
	// Redis (known only when the lookup gave its position).
	JobInKafka = "in-kafka"
	// JobNotFound: Redis holds nothing of it. With its position given,
	// Relayed tells a job done without a record (or cancelled) from an
	// unknown one.
	JobNotFound = "not-found"
)

// JobView is where a job is, from what Redis holds, as the gate's and the
// admin API's GET .../topics/{topic}/jobs/{id} answer it (docs/gate.md).
type JobView struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	// RedisPartition is the queue partition looked in.
	RedisPartition int `json:"redis_partition"`
	// State is one of the Job* constants.
	State string `json:"state"`
	// Relayed: the job's Kafka position is at or below the watermark
	// (only said for a job Redis no longer holds).
	Relayed   bool   `json:"relayed,omitempty"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error,omitempty"`
	Result    string `json:"result,omitempty"`
	// Worker is who holds a running job (its host/pid), and Since when
	// its batch was claimed.
	Worker string     `json:"worker,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
	// Batch is a running job's claimed batch.
	Batch string `json:"batch,omitempty"`
	// Until is a running job's lease deadline, a delayed job's due time,
	// when a dead or done job ended.
	Until *time.Time `json:"until,omitempty"`
	// Why is a delayed job's reason, a ready job's lane.
	Why string `json:"why,omitempty"`
	// Note says in words what the state means, and what cannot be known.
	Note string `json:"note"`
}
