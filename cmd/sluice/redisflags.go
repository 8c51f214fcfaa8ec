package main

import (
	"flag"
	"fmt"

	"github.com/sluicehq/sluice/internal/queue"
)

// redisFlags are the flags of commands that only read or write the Redis
// partitions (sluice canary, sluice stats): the stage and where each
// partition lives, as the relay's and the workers' own flags say.
type redisFlags struct {
	stage          string
	addr           string
	partitions     int
	partitionAddrs string
}

func (f *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.stage, "stage", "dev", "stage name: Redis keys under sluice:{<stage>:<topic>:p<N>}: and sluice:{<stage>:p<N>}:")
	fs.StringVar(&f.addr, "redis-addr", "127.0.0.1:6379", "Redis address of every partition not in --redis-partition-addrs")
	fs.StringVar(&f.partitionAddrs, "redis-partition-addrs", "", "partitions on Redis servers of their own: \"0=host:port,3=host:port\"")
	fs.IntVar(&f.partitions, "redis-partitions", 8, "Redis partitions in the layout (as the relay's and the workers')")
}

// pool builds the partitions' client pool; it connects to nothing yet.
func (f *redisFlags) pool() (*queue.Pool, error) {
	addrs, err := queue.ParsePartitionAddrs(f.partitionAddrs, f.partitions)
	if err != nil {
		return nil, fmt.Errorf("--redis-partition-addrs: %w", err)
	}
	return queue.NewPool(queue.PoolConfig{Layout: queue.Layout{Stage: f.stage, Partitions: f.partitions}, Addr: f.addr, PartitionAddrs: addrs})
}
