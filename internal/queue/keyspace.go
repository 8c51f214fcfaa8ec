// Package queue is sluice's Redis side: the key layout of a partition, the
// pool of Redis clients that serves the partitions, and the Lua scripts that
// change a partition's state. Every state change is one script that names
// all its keys in KEYS (never built from ARGV inside the script, so a
// partition can move to a Redis Cluster slot of its own) and documents its
// KEYS, ARGV and return values above it. docs/redis-layout.md describes the
// layout for operators.
package queue

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Keyspace says how many partitions there are and which stage's keys to use.
type Keyspace struct {
	Stage      string
	Partitions int
}

// Validate checks the layout.
func (l Keyspace) Validate() error {
	if l.Stage == "" || strings.ContainsAny(l.Stage, "{}: \t\n") {
		return fmt.Errorf("stage %q: want a non-empty name without braces, colons or spaces", l.Stage)
	}
	if l.Partitions < 1 || l.Partitions > 4096 {
		return fmt.Errorf("partitions %d: want 1..4096", l.Partitions)
	}
	return nil
}

// PartitionOfJob is a job's Redis partition: its group's when it has one
// (a group's counters and fan-in stay in one place), else its id's, so
// single jobs spread over the partitions.
func (l Keyspace) PartitionOfJob(group, id string) int {
	if group != "" {
		return l.PartitionOf(group)
	}
	return l.PartitionOf(id)
}

// PartitionOf is the Redis partition of a name (a group, a job id, a
// resource, an idempotency key): fnv1a32(name) % N.
func (l Keyspace) PartitionOf(group string) int {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int(h.Sum32() % uint32(l.Partitions))
}

// Queue names one queue partition: partition Part of topic Topic. A topic
// is a queue; its jobs live in its own keys on each partition.
type Queue struct {
	Topic string
	Part  int
}

func (q Queue) String() string { return q.Topic + "/p" + strconv.Itoa(q.Part) }

// QueueOf is the queue partition of a job of topic (see PartitionOfJob).
func (l Keyspace) QueueOf(topic, group, id string) Queue {
	return Queue{Topic: topic, Part: l.PartitionOfJob(group, id)}
}

// ValidTopic checks that topic can name a queue: Kafka's topic names
// (letters, digits, '.', '_', '-') fit in a hash tag as they are.
func ValidTopic(topic string) error {
	if topic == "" || len(topic) > 249 || strings.IndexFunc(topic, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0 {
		return fmt.Errorf("topic %q: want 1 to 249 letters, digits, '.', '_' or '-' (a Kafka topic's name)", topic)
	}
	return nil
}

// Keys returns the key names of queue partition q.
func (l Keyspace) Keys(q Queue) Keys {
	// All of a queue partition's keys share the hash tag {stage:topic:pN},
	// so one script can touch them together on a Redis Cluster too, and
	// one topic's partition can live apart from another's.
	return Keys{prefix: "sluice:{" + l.Stage + ":" + q.Topic + ":p" + strconv.Itoa(q.Part) + "}:"}
}

// PartKeys returns the key names of partition p that serve every topic:
// the workers' and the coordinator's, and those named by something other
// than a job (a resource's rate limit, an idempotency key, canary records).
func (l Keyspace) PartKeys(p int) PartKeys {
	return PartKeys{prefix: "sluice:{" + l.Stage + ":p" + strconv.Itoa(p) + "}:"}
}

// Keys names the keys of one queue partition. See docs/redis-layout.md.
type Keys struct{ prefix string }

// Prefix is the queue partition's key prefix, "sluice:{<stage>:<topic>:p<n>}:".
func (k Keys) Prefix() string { return k.prefix }

// Job is a job's record, kept only when something needs it: the client
// chose its id (the resend dedupe, for the dedupe TTL), it asked for
// retain, or an attempt failed (its last error, and its envelope once
// dead). A plain job that succeeded has none.
func (k Keys) Job(id string) string { return k.prefix + "job:" + id }

// Lane is a lane's list of entries (see Entry), FIFO.
func (k Keys) Lane(lane string) string { return k.prefix + "lane:" + lane }

// Group is the group's hash: counters, weight and virtual finish time.
func (k Keys) Group(group string) string { return k.prefix + "group:" + group }

// Results is a group's gathered results, one hash per group (never a
// key per item): id -> "<state> <attempts> <result or last error>", for
// the items that returned a result, died or were cancelled. An item
// without a field completed with an empty result. Every group gathers
// them (a bulk group's first items may end before its close says it is
// one); a group without a total expires with them.
func (k Keys) Results(group string) string { return k.prefix + "results:" + group }

// Lanes is the sorted set of lanes with ready entries, by virtual time:
// the partition's fair order.
func (k Keys) Lanes() string { return k.prefix + "lanes" }

// Shared is the hash of the shared lanes' virtual finish times (lane ->
// vfinish): a group lane keeps its own in its group hash.
func (k Keys) Shared() string { return k.prefix + "shared" }

// VirtualTime is the partition's virtual clock: the virtual time of the last
// job served. A lane that becomes active starts there, so it cannot claim
// service for the time it was idle.
func (k Keys) VirtualTime() string { return k.prefix + "vt" }

// Delayed is the sorted set of entries by due time (Unix ms).
func (k Keys) Delayed() string { return k.prefix + "delayed" }

// Leases is the sorted set of claimed batches by lease deadline (Unix ms).
func (k Keys) Leases() string { return k.prefix + "leases" }

// Lease is a claimed batch: a list of its jobs' entries in the order
// claimed, a job's place in it (Claimed.Index) naming it to the scripts
// that settle it. It is written once and deleted whole.
func (k Keys) Lease(batch string) string { return k.prefix + "lease:" + batch }

// Settled is a claimed batch's bitmap: bit i is set once job i of the
// lease is settled (acked, failed, deferred, released or reaped). The
// batch ends, both keys deleted, when every job is settled.
func (k Keys) Settled(batch string) string { return k.prefix + "settled:" + batch }

// Cancels is the hash of cancel requests for claimed jobs: batch -> the
// places of its jobs whose cancel was asked for (" 3 7 "). The lease
// extension reads it; the cancelled job's settlement clears its place,
// and an extension that finds the batch gone clears the field.
func (k Keys) Cancels() string { return k.prefix + "cancels" }

// Watermark is the hash of the highest Kafka offset applied per Kafka
// partition of the topic (the relay's dedupe by Kafka position).
func (k Keys) Watermark() string { return k.prefix + "wm" }

// Dead is the sorted set of dead job ids by time of death (Unix ms); each
// has a record (Job) with its entry and last error.
func (k Keys) Dead() string { return k.prefix + "dead" }

// Wake is the partition's wake-up list: scripts that make jobs ready push
// a token, and idle consumers block on it (BLPOP) instead of polling.
func (k Keys) Wake() string { return k.prefix + "wake" }

// Fence holds the newest relay lock token seen for the topic; writes with
// an older one are refused.
func (k Keys) Fence() string { return k.prefix + "fence" }

// Completed is the partition's list of bulk groups whose every job has
// ended: the group watcher takes them from here (see Completing).
func (k Keys) Completed() string { return k.prefix + "completed" }

// Completing is the partition's list of completed groups the watcher is
// delivering: moved here from Completed, removed once delivered or given
// up, so a watcher that dies mid-delivery leaves them for the next one.
func (k Keys) Completing() string { return k.prefix + "completing" }

// Stats is the partition's hash of counters (relayed, deduped, fenced, ...).
// Its ready field is the partition's ready depth: the ids on the ready
// lists of the groups in Groups, kept by the scripts that move them.
func (k Keys) Stats() string { return k.prefix + "stats" }

// PartKeys names the keys of one partition that serve every topic. See
// docs/redis-layout.md.
type PartKeys struct{ prefix string }

// Prefix is the partition's key prefix, "sluice:{<stage>:p<n>}:".
func (k PartKeys) Prefix() string { return k.prefix }

// Idempotency is the marker of an idempotency key: "running:<job id>:<attempt>"
// while a job with that key runs, "done:<job id>" for the key's TTL after
// one succeeded. It lives in the partition PartitionOf(key) picks, whatever
// the jobs' groups.
func (k PartKeys) Idempotency(key string) string { return k.prefix + "idem:" + key }

// IdempotencyWaiters is the set of jobs deferred behind an idempotency
// key's running mark ("<topic> <partition> <entry>"), which the run's end
// wakes; beside the mark, and expiring with it at the latest.
func (k PartKeys) IdempotencyWaiters(key string) string { return k.prefix + "idemwait:" + key }

// Limit is the execution rate-limit schedule of a resource key: the GCRA
// state and the slots reserved for throttled jobs (see ratelimit.go). Like
// idempotency markers it lives in the partition PartitionOf(resource)
// picks, because a resource's jobs come from any group and partition.
func (k PartKeys) Limit(resource string) string { return k.prefix + "limit:" + resource }

// LimitStarts is the log of a resource key's recent starts (the last
// second's), beside its Limit schedule: no window may hold more than the
// limit allows.
func (k PartKeys) LimitStarts(resource string) string { return k.prefix + "starts:" + resource }

// WorkerCount is the checkpoint of the partition's worker count, restored
// when a worker starts.
func (k PartKeys) WorkerCount() string { return k.prefix + "workers" }

// Cmd is the partition's list of coordinator commands.
func (k PartKeys) Cmd() string { return k.prefix + "cmd" }

// Stop is a list a consumer's idle BLPOP also waits on, so that its stop
// can end the wait at once (Pool.StopWaiting): go-redis does not interrupt
// a blocked command when its context ends.
func (k PartKeys) Stop(consumer string) string { return k.prefix + "stop:" + consumer }

// Consumers is the partition's hash of consumer heartbeats: consumer id ->
// "<workers>:<unix ms>:<busy ms>", refreshed by each worker consumer every
// --liveness-every (see Heartbeat). The coordinator sums the live ones.
func (k PartKeys) Consumers() string { return k.prefix + "consumers" }

// Canary is the partition's hash of heartbeat canary records, one set of
// fields per path (see internal/canary): "sent:<topic>/<kafka partition>"
// is when the monitor last sent one along it, "done:<...>" the newest one
// completed here, "<sent ms>:<done ms>". Partition 0's also holds the
// monitor's settings ("monitor").
func (k PartKeys) Canary() string { return k.prefix + "canary" }

// ParsePartitionAddrs reads "0=host:port,3=host:port": partitions that live
// on a Redis of their own. The others use the default address.
func ParsePartitionAddrs(s string, partitions int) (map[int]string, error) {
	out := map[int]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, def := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(def), "=")
		p, err := strconv.Atoi(id)
		if !ok || err != nil || addr == "" {
			return nil, fmt.Errorf("partition address %q: want <partition>=<host:port>", def)
		}
		if p < 0 || p >= partitions {
			return nil, fmt.Errorf("partition address %q: partition out of range 0..%d", def, partitions-1)
		}
		if _, dup := out[p]; dup {
			return nil, fmt.Errorf("partition %d given twice", p)
		}
		out[p] = addr
	}
	return out, nil
}

// ErrFenced means a write carried a lock token older than the newest the
// partition has seen: the writer was deposed.
var ErrFenced = errors.New("fenced: a newer lock holder has written to this partition")
