package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicasBehindError says that fewer replicas than asked acknowledged a
// Redis server's writes within WaitReplicas' timeout.
type ReplicasBehindError struct {
	Server      string
	Acked, Want int
	Timeout     time.Duration
}

func (e *ReplicasBehindError) Error() string {
	return fmt.Sprintf("Redis %s: WAIT: %d of %d replicas acknowledged the writes within %v", e.Server, e.Acked, e.Want, e.Timeout)
}

// WaitReplicas returns once at least n replicas of the Redis of each of
// queues have every write that Redis had executed when it was called, or
// fails: a *ReplicasBehindError when fewer acknowledged within timeout, or
// the error of reaching Redis (a failover in progress).
//
// WAIT counts the replicas that have the last write of its own connection,
// which a pooled client does not control (the writes may have gone over
// another connection, or, when every item was a duplicate, written
// nothing). So WAIT follows a write of its own on the same connection, an
// INCR of the partition's key sluice:{<stage>:p<N>}:wait: Redis
// replicates in order, so a replica that has it has every write before it.
// On a Redis Cluster the key is the queue partition's,
// sluice:{<stage>:<topic>:p<N>}:wait, in the slot the writes went to, and
// the INCR and WAIT go to that slot's master.
func (p *Pool) WaitReplicas(ctx context.Context, queues []Queue, n int, timeout time.Duration) error {
	done := map[redis.UniversalClient]bool{}
	for _, q := range queues {
		key := p.keyspace.PartKeys(q.Part).Prefix() + "wait"
		if p.cluster != nil {
			key = p.keyspace.Keys(q).Prefix() + "wait"
		}
		c, err := p.MasterOf(ctx, q.Part, key)
		if err != nil {
			return fmt.Errorf("waiting for replicas: %w", err)
		}
		if done[c] {
			continue
		}
		done[c] = true
		pipe := c.Pipeline()
		pipe.Incr(ctx, key)
		// Not pipe.Wait (no such method): WAIT by hand. Keep timeout
		// under the client's read timeout (3s by default).
		wait := pipe.Do(ctx, "WAIT", n, timeout.Milliseconds())
		server := p.serverOf(c)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("waiting for replicas: %w", explain(server, err))
		}
		if acked, _ := wait.Int(); acked < n {
			return &ReplicasBehindError{Server: server, Acked: acked, Want: n, Timeout: timeout}
		}
	}
	return nil
}

// serverOf names c's server, as Servers does; a cluster's master as
// "cluster master <host:port>".
func (p *Pool) serverOf(c redis.UniversalClient) string {
	for i, d := range p.distinct {
		if d == c {
			return p.addrs[i]
		}
	}
	if m, ok := c.(*redis.Client); ok && p.cluster != nil {
		return "cluster master " + m.Options().Addr
	}
	return "?"
}
