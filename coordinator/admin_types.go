package coordinator

import (
	"time"

	"github.com/sluicehq/sluice/internal/admin"
)

// Wire types of the admin API (docs/admin.md) that carry a queue's topic
// where internal/admin's, which predate per-topic queues, have none. Each
// embeds its internal/admin type and adds fields: the JSON stays flat, so
// a client that decodes into the internal/admin type still reads the rest.

// PartitionList is GET /api/v1/partitions.
type PartitionList struct {
	At time.Time `json:"at"`
	// Holder is true when the answering coordinator holds the lock (its
	// scaler's targets are then known).
	Holder     bool             `json:"holder"`
	Partitions []PartitionState `json:"partitions"`
}

// PartitionState is one Redis partition: its counts summed over its queues
// (workers are per partition, whatever the topic: the PWQD is the
// partition's ready jobs of every topic per live worker), and each queue's
// own, by topic.
type PartitionState struct {
	admin.Partition
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

// GroupList is GET /api/v1/groups.
type GroupList struct {
	Active []ActiveLane      `json:"active"`
	Bulk   []admin.GroupInfo `json:"bulk"`
}

// ActiveLane is a lane in a queue partition's fair order, with the queue's
// topic.
type ActiveLane struct {
	admin.ActiveGroup
	Topic string `json:"topic"`
}
