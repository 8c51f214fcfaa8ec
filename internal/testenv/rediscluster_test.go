package testenv

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A 3-master cluster serves every slot, and a slot moved while a client
// writes to it keeps every key, then is served by its new owner.
func TestRedisClusterMovesASlotUnderWrites(t *testing.T) {
	c := NewRedisCluster(t, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer rdb.Close()
	const tag = "{moving}"
	slot := c.Slot("x" + tag)
	from := c.Owner(slot)
	to := c.Addrs()[0]
	if to == from {
		to = c.Addrs()[1]
	}
	for i := range 200 {
		if err := rdb.Set(ctx, tag+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m := c.StartMigration(slot, to)
	n := 200
	for m.Step(20) > 0 {
		// Writes go on between the steps: new keys are created on the
		// new owner (ASK), old ones updated where they are.
		if err := rdb.Set(ctx, tag+strconv.Itoa(n), n, 0).Err(); err != nil {
			t.Fatalf("write during the migration: %v", err)
		}
		n++
	}
	m.Finish(20)
	if got := c.Owner(slot); got != to {
		t.Fatalf("slot %d on %s after the move, want %s", slot, got, to)
	}
	if m.Moved < 200 {
		t.Fatalf("moved %d keys, want at least 200", m.Moved)
	}
	for i := range n {
		v, err := rdb.Get(ctx, tag+strconv.Itoa(i)).Int()
		if err != nil || v != i {
			t.Fatalf("key %d after the move: %d %v", i, v, err)
		}
	}
	if k, _ := c.Node(from).DBSize(ctx).Result(); k != 0 {
		t.Fatalf("the old owner still holds %d keys", k)
	}
}
