package admin

import (
	"encoding/json"
	"time"

	"github.com/sluicehq/sluice/internal/groups"
	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/queue"
)

// The wire types of the admin API, docs/admin.md. Times are RFC 3339 (Go's
// encoding, to the nanosecond the server had); durations are seconds.

// Error is every error answer: what went wrong and what to do about it.
type Error struct {
	Status  int    `json:"-"`
	Message string `json:"error"`
	Fix     string `json:"fix,omitempty"`
}

func (e *Error) Error() string {
	if e.Fix == "" {
		return e.Message
	}
	return e.Message + " (fix: " + e.Fix + ")"
}

// WhoAmI is GET /api/v1/whoami.
type WhoAmI struct {
	Role     string `json:"role"`
	Insecure bool   `json:"insecure,omitempty"`
}

// PartitionList is GET /api/v1/partitions.
type PartitionList struct {
	At time.Time `json:"at"`
	// Holder is true when a coordinator in the answering process holds
	// the lock (its scaler's targets are then known).
	Holder     bool             `json:"holder"`
	Partitions []PartitionState `json:"partitions"`
}

// PartitionState is one Redis partition: its counts summed over its queues
// (workers are per partition, whatever the topic: the PWQD is the
// partition's ready jobs of every topic per live worker), and each queue's
// own, by topic. The JSON is flat: Partition's fields, then queues.
type PartitionState struct {
	Partition
	Queues []QueueState `json:"queues"`
}

// QueueState is what one queue partition (a topic's partition) holds.
type QueueState struct {
	Topic    string `json:"topic"`
	Ready    int64  `json:"ready"`
	Delayed  int64  `json:"delayed"`
	Inflight int64  `json:"inflight"`
	Dead     int64  `json:"dead"`
	// Completed counts the queue's acks since its counters began.
	Completed    int64 `json:"completed"`
	ActiveGroups int64 `json:"active_groups"`
}

// Partition is one Redis partition's state.
type Partition struct {
	Partition int   `json:"partition"`
	Ready     int64 `json:"ready"`
	Delayed   int64 `json:"delayed"`
	Inflight  int64 `json:"inflight"`
	Dead      int64 `json:"dead"`
	// Workers are the live workers (summed heartbeats), Consumers their
	// count; Checkpoint the worker-count checkpoint (0: none).
	Workers    int `json:"workers"`
	Consumers  int `json:"consumers"`
	Checkpoint int `json:"checkpoint"`
	// Target is the scaler's target per consumer: nil unless a coordinator
	// in the answering process holds the lock.
	Target *int `json:"target"`
	Pin    *Pin `json:"pin"`
	// PWQD is ready / workers; nil without workers.
	PWQD *float64 `json:"pwqd"`
	// Completed counts the partition's acks since its counters began: diff
	// two reads for throughput.
	Completed    int64 `json:"completed"`
	ActiveGroups int64 `json:"active_groups"`
}

// Pin is an operator's fixed worker count for a partition.
type Pin struct {
	Workers int       `json:"workers"`
	At      time.Time `json:"at"`
	By      string    `json:"by,omitempty"`
}

// DLQ sources.
const (
	SourceRedis = "redis"
	SourceKafka = "kafka"
)

// DLQList is GET /api/v1/dlq.
type DLQList struct {
	Source     string     `json:"source"`
	Topic      string     `json:"topic,omitempty"`
	Entries    []DLQEntry `json:"entries"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

// DLQEntry is a dead job (source redis) or a record of <topic>.dlq
// (source kafka).
type DLQEntry struct {
	ID        string `json:"id"`
	Partition int    `json:"partition"`
	// Redis: the job.
	Topic     string     `json:"topic,omitempty"`
	Group     string     `json:"group,omitempty"`
	Type      string     `json:"type,omitempty"`
	Attempts  int        `json:"attempts,omitempty"`
	LastError string     `json:"last_error,omitempty"`
	DeadAt    *time.Time `json:"dead_at,omitempty"`
	// Envelope is the job's whole envelope (GET /api/v1/dlq/entry only).
	Envelope json.RawMessage `json:"envelope,omitempty"`
	// Kafka: the record.
	Offset       *int64            `json:"offset,omitempty"`
	Key          string            `json:"key,omitempty"`
	Reason       string            `json:"reason,omitempty"`
	SourceRecord string            `json:"source_record,omitempty"`
	Value        string            `json:"value,omitempty"`
	ValueBase64  string            `json:"value_base64,omitempty"`
	ValueBytes   int               `json:"value_bytes,omitempty"`
	Timestamp    *time.Time        `json:"timestamp,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
}

// DLQAction is the body of POST /api/v1/dlq/replay and /purge.
type DLQAction struct {
	Source string   `json:"source"`
	Topic  string   `json:"topic,omitempty"`
	IDs    []string `json:"ids,omitempty"`
	All    bool     `json:"all,omitempty"`
}

// DLQResult answers a replay (Replayed set) or a purge (Purged set).
type DLQResult struct {
	Replayed *int `json:"replayed,omitempty"`
	Purged   *int `json:"purged,omitempty"`
	// Missing are named ids no longer there.
	Missing int `json:"missing"`
	// Skipped says why some were left as they are (a cancelled group).
	Skipped []string `json:"skipped,omitempty"`
}

// RateList is GET /api/v1/rates.
type RateList struct {
	Rates []RateState `json:"rates"`
}

// RateState is a topic's relay rate. A paused rate keeps the rate it
// resumes to.
type RateState struct {
	Topic     string  `json:"topic"`
	Rate      float64 `json:"rate,omitempty"`
	Burst     int     `json:"burst,omitempty"`
	Paused    bool    `json:"paused"`
	Unlimited bool    `json:"unlimited"`
	// Error is set when the value in Consul does not parse (the relay
	// keeps its last good rate meanwhile).
	Error string `json:"error,omitempty"`
}

// RateSet is the body of PUT /api/v1/rates/{topic}.
type RateSet struct {
	Rate      float64 `json:"rate,omitempty"`
	Burst     int     `json:"burst,omitempty"`
	Unlimited bool    `json:"unlimited,omitempty"`
}

// LimitList is GET /api/v1/limits.
type LimitList struct {
	Limits []LimitState `json:"limits"`
}

// LimitState is a resource's execution limit (also PUT's body).
type LimitState struct {
	Resource string  `json:"resource,omitempty"`
	Rate     float64 `json:"rate"`
	Burst    int     `json:"burst,omitempty"`
	// Error is set when the value in Consul does not parse.
	Error string `json:"error,omitempty"`
}

// GroupList is GET /api/v1/groups.
type GroupList struct {
	Active []ActiveLane `json:"active"`
	Bulk   []GroupInfo  `json:"bulk"`
}

// ActiveLane is a lane in a queue partition's fair order, with the queue's
// topic. The JSON is flat.
type ActiveLane struct {
	ActiveGroup
	Topic string `json:"topic"`
}

// ActiveGroup is a lane in a partition's fair order.
type ActiveGroup struct {
	Partition int `json:"partition"`
	// Lane is the fair order's unit: g/<group>, or a shared lane of
	// jobs without a group (q/<topic>/<priority>, t/<topic>/<priority>/<tenant>).
	Lane string `json:"lane"`
	// Group is the lane's group, empty for a shared lane.
	Group string `json:"group,omitempty"`
	Ready int64  `json:"ready"`
}

// GroupInfo is a group's status: GET /api/v1/groups/{group} and GET
// /api/v1/groups' bulk groups. It is internal/groups' Status, the type the
// gate's GET /v1/topics/{topic}/groups/{id} answers too; the name stays
// for the admin API's Go clients.
type GroupInfo = groups.Status

// CancelResult answers POST /api/v1/groups/{group}/cancel: internal/groups'
// Cancelled (the group's status after the cancel, and removed), the answer
// of the gate's DELETE too.
type CancelResult = groups.Cancelled

// ScaleList is GET /api/v1/scale.
type ScaleList struct {
	// Holder is true when a coordinator in the answering process holds
	// the lock (its scaler's targets are then known).
	Holder bool        `json:"holder"`
	Params ScaleParams `json:"params"`
	// ParamsFrom says where Params come from: ParamsFromCoordinator or
	// ParamsFromConsul.
	ParamsFrom string           `json:"params_from,omitempty"`
	Partitions []ScalePartition `json:"partitions"`
}

// Where GET /api/v1/scale's parameters come from (ScaleList.ParamsFrom).
const (
	// ParamsFromCoordinator: the parameters in force in the coordinator
	// that runs in the answering process, holder or standby.
	ParamsFromCoordinator = "coordinator"
	// ParamsFromConsul: no coordinator runs in the answering process (a
	// console alone): Consul's value over the default parameters; a
	// coordinator started with other --scale-* flags uses those instead
	// of the defaults.
	ParamsFromConsul = "consul"
)

// ScaleParams are the scaling parameters in force.
type ScaleParams struct {
	Threshold float64 `json:"threshold"`
	Cycles    int     `json:"cycles"`
	Base      int     `json:"base"`
	Max       int     `json:"max"`
	HalfLife  float64 `json:"half_life"`
	Paused    bool    `json:"paused"`
}

// ScalePartition is one partition's workers as the scaler sees them.
type ScalePartition struct {
	Partition  int  `json:"partition"`
	Workers    int  `json:"workers"`
	Consumers  int  `json:"consumers"`
	Checkpoint int  `json:"checkpoint"`
	Target     *int `json:"target"`
	Pin        *Pin `json:"pin"`
}

// ScaleSet is the body of PUT /api/v1/scale/{partition}: a pin, or auto.
type ScaleSet struct {
	Workers int  `json:"workers,omitempty"`
	Auto    bool `json:"auto,omitempty"`
}

// CanaryState is GET /api/v1/canary.
type CanaryState struct {
	// Monitor is false when no canary monitor has run on the stage.
	Monitor   bool         `json:"monitor"`
	Holder    string       `json:"holder,omitempty"`
	Interval  float64      `json:"interval"`
	Grace     float64      `json:"grace"`
	LastRound *time.Time   `json:"last_round"`
	Paths     []CanaryPath `json:"paths"`
	Alerts    []string     `json:"alerts"`
}

// CanaryPath is one path's state.
type CanaryPath struct {
	Topic          string     `json:"topic"`
	KafkaPartition int32      `json:"kafka_partition"`
	RedisPartition int        `json:"redis_partition"`
	Age            float64    `json:"age"`
	Latency        float64    `json:"latency"`
	Sent           *time.Time `json:"sent"`
	Done           *time.Time `json:"done"`
	Stale          bool       `json:"stale"`
}

// TimePtr is t, or nil when zero: absent times are null on the wire.
func TimePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// PeriodicState is a periodic schedule (GET /api/v1/periodic/{name}):
// its value in Consul, its next slots and what the scheduler recorded.
type PeriodicState struct {
	Name string `json:"name"`
	// Schedule is the value in force; nil with Error when the value in
	// Consul does not parse (the scheduler keeps its last good one).
	Schedule *periodic.Schedule `json:"schedule,omitempty"`
	Error    string             `json:"error,omitempty"`
	// Next are the next slots (up to 3; none while paused).
	Next []time.Time `json:"next,omitempty"`
	// State is the scheduler's record: last slot, last fire, last job.
	State *periodic.State `json:"state,omitempty"`
	// LastJob is where the last job is now (GET /api/v1/topics/{topic}/jobs/{id}).
	LastJob *queue.JobView `json:"last_job,omitempty"`
}

// PeriodicList is GET /api/v1/periodic.
type PeriodicList struct {
	Schedules []PeriodicState `json:"schedules"`
}
