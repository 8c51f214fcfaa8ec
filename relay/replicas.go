package relay

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// replicaWait is WAIT's timeout under --durable-after replicas:N: how long
// one wait gives the replicas before the batch is written and waited for
// again. Under go-redis's read timeout (3s), which WAIT's reply must beat.
const replicaWait = time.Second

// waitReplicas is the replication form of the durable hold
// (Config.DurableReplicas): it returns nil once DurableReplicas replicas of
// the Redis of each of queues have every write made so far, at once when
// the form is off. Its error means the writes may not survive a failover:
// the caller writes the batch again (deduplicated by Kafka position, so a
// write the master kept is a no-op and one a failover lost is made again)
// and waits again, and nothing of the batch is committed meanwhile.
func (r *Relay) waitReplicas(ctx context.Context, topic string, queues []queue.Queue) error {
	if r.cfg.DurableReplicas <= 0 || len(queues) == 0 {
		return nil
	}
	err := r.pool.WaitReplicas(ctx, queues, r.cfg.DurableReplicas, replicaWait)
	if err != nil {
		r.m.replicaWaits.WithLabelValues(topic).Inc()
	}
	return err
}

// queuesOf are the queue partitions items go to, each once.
func queuesOf(layout queue.Keyspace, items []queue.Item) []queue.Queue {
	seen := map[queue.Queue]bool{}
	var queues []queue.Queue
	for i := range items {
		q := layout.QueueOf(items[i].Topic, items[i].Group, items[i].ID)
		if !seen[q] {
			seen[q] = true
			queues = append(queues, q)
		}
	}
	return queues
}
