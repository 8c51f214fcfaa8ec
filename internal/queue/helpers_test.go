package queue

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// positioned gives items consecutive Kafka positions in Kafka partition kp
// from offset from, as the relay does for the records it reads.
func positioned(kp int32, from int64, items ...Item) []Item {
	for i := range items {
		items[i].HasPosition, items[i].KafkaPartition, items[i].Offset = true, kp, from+int64(i)
	}
	return items
}

// enqueueOK enqueues items and fails the test on an error of the batch.
func enqueueOK(t testing.TB, p *Pool, token uint64, items []Item, at time.Time) []Result {
	t.Helper()
	res, err := p.Enqueue(context.Background(), token, items, at)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// dump reads every key of a Redis into a comparable form: key -> its type
// and contents (hash fields and set members sorted, zset members with
// their scores, whether it expires). drop, if set, leaves out a hash's
// field (or a whole key, with field "").
func dump(t testing.TB, rdb *redis.Client, drop func(key, field string) bool) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		if drop != nil && drop(k, "") {
			continue
		}
		typ := rdb.Type(ctx, k).Val()
		var b strings.Builder
		b.WriteString(typ)
		if ttl := rdb.TTL(ctx, k).Val(); ttl > 0 {
			b.WriteString(" (expires)")
		}
		switch typ {
		case "string":
			fmt.Fprintf(&b, " %q", rdb.Get(ctx, k).Val())
		case "list":
			for _, v := range rdb.LRange(ctx, k, 0, -1).Val() {
				fmt.Fprintf(&b, " %q", v)
			}
		case "hash":
			h := rdb.HGetAll(ctx, k).Val()
			fields := make([]string, 0, len(h))
			for f := range h {
				if drop == nil || !drop(k, f) {
					fields = append(fields, f)
				}
			}
			sort.Strings(fields)
			for _, f := range fields {
				fmt.Fprintf(&b, " %q=%q", f, h[f])
			}
		case "zset":
			for _, z := range rdb.ZRangeWithScores(ctx, k, 0, -1).Val() {
				fmt.Fprintf(&b, " %q@%v", z.Member, z.Score)
			}
		case "set":
			m := rdb.SMembers(ctx, k).Val()
			slices.Sort(m)
			for _, v := range m {
				fmt.Fprintf(&b, " %q", v)
			}
		}
		out[k] = b.String()
	}
	return out
}

// diffDumps lists the keys two dumps disagree on.
func diffDumps(a, b map[string]string) string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out strings.Builder
	for _, k := range keys {
		if a[k] != b[k] {
			fmt.Fprintf(&out, "%s:\n  before %.300s\n  after  %.300s\n", k, a[k], b[k])
		}
	}
	return out.String()
}

// dedupeCounters are the counters a duplicate moves: the stats' deduped
// and the funnel's deduplicated fields.
func dedupeCounters(key, field string) bool {
	return strings.HasSuffix(key, ":stats") && (field == "deduped" || strings.HasSuffix(field, ":"+MilestoneDeduplicated))
}

// jq is partition part of the tests' topic, "jobs".
func jq(part int) Queue { return Queue{Topic: "jobs", Part: part} }

// expireLeases moves the deadlines of claimed batches into the past, as a
// holder that stopped extending them leaves them once Redis's clock passes
// their lease: the next reap takes them back.
func expireLeases(t testing.TB, p *Pool, q Queue, batches ...string) {
	t.Helper()
	members := make([]redis.Z, len(batches))
	for i, b := range batches {
		members[i] = redis.Z{Score: 1, Member: b}
	}
	if err := p.Client(q.Part).ZAddXX(context.Background(), p.Keyspace().Keys(q).Leases(), members...).Err(); err != nil {
		t.Fatal(err)
	}
}
