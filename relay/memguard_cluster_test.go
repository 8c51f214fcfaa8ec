package relay

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// On a Redis Cluster the memory guard reads every master and follows the
// one nearest its maxmemory: a partition's writes all land on one master,
// and any of them may be the one that fills.
func TestMemGuardOnAClusterFollowsTheFullestMaster(t *testing.T) {
	c := testenv.NewRedisCluster(t, 3)
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: queue.Keyspace{Stage: "test", Partitions: 4}, Addr: c.Seeds(), Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	servers, _ := pool.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d clients for a cluster, want one", len(servers))
	}
	if _, limit, err := readMemory(ctx, servers[0]); err != nil || limit != 0 {
		t.Fatalf("no master has maxmemory: limit %d %v, want 0 (the guard is off)", limit, err)
	}
	addrs := c.Addrs()
	// Each master's maxmemory a multiple of what it uses: the second is
	// the fullest (used/limit about 1/2), the first has room (1/8), the
	// third has no limit.
	for i, mult := range map[int]uint64{0: 8, 1: 2} {
		used, _, err := readServerMemory(ctx, c.Node(addrs[i]))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Node(addrs[i]).ConfigSet(ctx, "maxmemory", itoa(used*mult)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, want, _ := readServerMemory(ctx, c.Node(addrs[1]))
	used, limit, err := readMemory(ctx, servers[0])
	if err != nil || limit != want || used == 0 {
		t.Fatalf("read %d of %d %v, want the second master's limit %d", used, limit, err, want)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
