package queue

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Location is where a stage's Redis partitions live: the stage whose keys
// they hold, how many there are, and the Redis server of each. Every part
// that reads or writes the partitions embeds one in its Config, and the
// commands that only read them (sluice stats, sluice canary) use one too,
// so --stage, --redis-addr, --redis-partitions and --redis-partition-addrs
// are defined once (RegisterFlags) and mean the same everywhere.
type Location struct {
	// Stage names the stage's keys: Redis keys under
	// sluice:{<stage>:<topic>:p<N>}: and sluice:{<stage>:p<N>}:, Consul
	// keys under sluice/<stage>/. Default "dev".
	Stage string
	// RedisAddr is the Redis server (host:port) of every partition not in
	// PartitionAddrs. Default "127.0.0.1:6379".
	RedisAddr string
	// Partitions is how many Redis partitions the layout has (the queue
	// pool size N: a group's partition is fnv1a32(group) % N); every part
	// of a stage must agree. Default 8.
	Partitions int
	// PartitionAddrs puts partitions on Redis servers of their own:
	// partition -> host:port, "0=host:port,3=host:port" as a flag. Default:
	// none.
	PartitionAddrs map[int]string
}

// DefaultLocation is the location of the dev stage's partitions: 8 of
// them on 127.0.0.1:6379.
func DefaultLocation() Location {
	return Location{Stage: "dev", RedisAddr: "127.0.0.1:6379", Partitions: 8}
}

// RegisterFlags adds --stage, --redis-addr, --redis-partitions and
// --redis-partition-addrs to fs, bound to l's fields, with l's values as
// their defaults.
func (l *Location) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&l.Stage, "stage", l.Stage, "stage name: Redis keys under sluice:{<stage>:<topic>:p<N>}: and sluice:{<stage>:p<N>}:, Consul keys under sluice/<stage>/")
	fs.StringVar(&l.RedisAddr, "redis-addr", l.RedisAddr, "Redis address of every partition not in --redis-partition-addrs")
	fs.IntVar(&l.Partitions, "redis-partitions", l.Partitions, "Redis partitions in the layout (queue pool size N: partition = fnv1a32(group) % N); every part of a stage must agree")
	fs.Var(partitionAddrsValue{&l.PartitionAddrs}, "redis-partition-addrs", "partitions on Redis servers of their own: \"0=host:port,3=host:port\"")
}

// Layout is the key layout of the location's partitions.
func (l Location) Layout() Layout { return Layout{Stage: l.Stage, Partitions: l.Partitions} }

// PoolConfig is the configuration of a pool of the location's partitions.
func (l Location) PoolConfig() PoolConfig {
	return PoolConfig{Layout: l.Layout(), Addr: l.RedisAddr, PartitionAddrs: l.PartitionAddrs}
}

// Validate checks the location. Its errors start with the field's name
// ("Partitions: ..."), for the part that embeds it to prefix with its
// Config's ("relay: Config.Partitions: ...").
func (l Location) Validate() error {
	switch {
	case l.Stage == "" || strings.ContainsAny(l.Stage, "{}: \t\n"):
		return fmt.Errorf("Stage: %q: want a non-empty name without braces, colons or spaces", l.Stage)
	case l.Partitions < 1 || l.Partitions > maxPartitions:
		return fmt.Errorf("Partitions: %d: want 1..%d", l.Partitions, maxPartitions)
	case l.RedisAddr == "":
		return errors.New("RedisAddr: empty: want host:port")
	}
	for p, addr := range l.PartitionAddrs {
		if p < 0 || p >= l.Partitions {
			return fmt.Errorf("PartitionAddrs: partition %d out of range 0..%d", p, l.Partitions-1)
		}
		if addr == "" {
			return fmt.Errorf("PartitionAddrs: partition %d: empty address", p)
		}
	}
	return nil
}

// maxPartitions is Layout.Validate's bound.
const maxPartitions = 4096

// partitionAddrsValue is --redis-partition-addrs. The partitions are
// checked against the count by Validate: --redis-partitions may come
// later on the command line.
type partitionAddrsValue struct{ p *map[int]string }

func (v partitionAddrsValue) String() string {
	if v.p == nil || len(*v.p) == 0 {
		return ""
	}
	parts := make([]int, 0, len(*v.p))
	for p := range *v.p {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = strconv.Itoa(p) + "=" + (*v.p)[p]
	}
	return strings.Join(s, ",")
}

func (v partitionAddrsValue) Set(s string) error {
	m, err := ParsePartitionAddrs(s, maxPartitions)
	if err != nil {
		return err
	}
	if len(m) == 0 {
		m = nil
	}
	*v.p = m
	return nil
}
