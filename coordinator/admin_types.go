package coordinator

import "github.com/sluicehq/sluice/internal/admin"

// The admin API's wire types (docs/admin.md) live in internal/admin, a
// group's status in internal/groups: a contract lives once, in internal/.
// The API itself is package console's. These names stay for the Go
// programs that used them from this package.

// PartitionList is GET /api/v1/partitions (admin.PartitionList).
//
// Deprecated: use admin.PartitionList.
type PartitionList = admin.PartitionList

// PartitionState is one Redis partition and its queues (admin.PartitionState).
//
// Deprecated: use admin.PartitionState.
type PartitionState = admin.PartitionState

// QueueState is one queue partition (admin.QueueState).
//
// Deprecated: use admin.QueueState.
type QueueState = admin.QueueState

// GroupList is GET /api/v1/groups (admin.GroupList).
//
// Deprecated: use admin.GroupList.
type GroupList = admin.GroupList

// ActiveLane is a lane in a queue partition's fair order (admin.ActiveLane).
//
// Deprecated: use admin.ActiveLane.
type ActiveLane = admin.ActiveLane
