package queue

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// StageRedis is where a stage's Redis partitions live: the stage whose keys
// they hold, how many there are, and the Redis server of each. Every part
// that reads or writes the partitions embeds one in its Config, and the
// commands that only read them (sluice stats, sluice canary) use one too,
// so --stage, --redis-addr, --redis-partitions and --redis-partition-addrs
// are defined once (RegisterFlags) and mean the same everywhere.
type StageRedis struct {
	// Stage names the stage's keys: Redis keys under
	// sluice:{<stage>:<topic>:p<N>}: and sluice:{<stage>:p<N>}:, Consul
	// keys under sluice/<stage>/. Default "dev".
	Stage string
	// RedisAddr is the Redis server (host:port) of every partition not in
	// PartitionAddrs; with RedisCluster, a comma-separated list of cluster
	// nodes to discover the cluster from. Default "127.0.0.1:6379".
	RedisAddr string
	// Partitions is how many Redis partitions the layout has (the queue
	// pool size N: a group's partition is fnv1a32(group) % N); every part
	// of a stage must agree. Default 8.
	Partitions int
	// PartitionAddrs puts partitions on Redis servers of their own:
	// partition -> host:port, "0=host:port,3=host:port" as a flag. Default:
	// none.
	PartitionAddrs map[int]string
	// RedisUser is the Redis ACL user every connection logs in as.
	// Default "": the default user (with RedisPassword alone, AUTH
	// <password>).
	RedisUser string
	// RedisPassword is RedisUser's password: --redis-password, or better
	// --redis-password-file, re-read on every new connection so a rotated
	// file needs no restart. Default: none.
	RedisPassword cli.Secret
	// RedisTLS dials Redis, and the Sentinels, over TLS: --redis-tls,
	// --redis-tls-ca-file, --redis-tls-cert-file, --redis-tls-key-file,
	// --redis-tls-server-name. Default: plain TCP. No flag sets
	// RedisTLS.InsecureSkipVerify (tests only).
	RedisTLS tlsfiles.Client
	// SentinelAddrs are Sentinels (host:port) to find each partition's
	// master by, following it across failovers. With them RedisAddr is not
	// used: the partitions not in PartitionAddrs are on SentinelMaster,
	// and PartitionAddrs' values are master names. Default: none (no
	// Sentinel).
	SentinelAddrs []string
	// SentinelMaster is the name the Sentinels monitor the master by
	// ("sentinel monitor <name> ..."); required with SentinelAddrs.
	// Default "".
	SentinelMaster string
	// SentinelUser is the ACL user to log in to the Sentinels as.
	// Default "": none.
	SentinelUser string
	// SentinelPassword logs in to the Sentinels (read when a part starts).
	// Default: none.
	SentinelPassword cli.Secret
	// RedisCluster says RedisAddr names nodes of a Redis Cluster: one
	// cluster client serves every partition, each in the slot of its hash
	// tag (docs/secure/redis-cluster.md). Not with PartitionAddrs or
	// SentinelAddrs; RedisUser, RedisPassword and RedisTLS apply to every
	// node. Default false: RedisAddr is one Redis server.
	RedisCluster bool
}

// DefaultStageRedis is the location of the dev stage's partitions: 8 of
// them on 127.0.0.1:6379.
func DefaultStageRedis() StageRedis {
	return StageRedis{Stage: "dev", RedisAddr: "127.0.0.1:6379", Partitions: 8}
}

// RegisterFlags adds --stage, --redis-addr, --redis-partitions,
// --redis-partition-addrs, --redis-cluster, the login (--redis-user,
// --redis-password[-file]), TLS (--redis-tls*) and Sentinel
// (--redis-sentinel-*) flags to fs, bound to l's fields, with l's values as
// their defaults.
func (l *StageRedis) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&l.Stage, "stage", l.Stage, "stage name: Redis keys under sluice:{<stage>:<topic>:p<N>}: and sluice:{<stage>:p<N>}:, Consul keys under sluice/<stage>/")
	fs.StringVar(&l.RedisAddr, "redis-addr", l.RedisAddr, "Redis address of every partition not in --redis-partition-addrs")
	fs.IntVar(&l.Partitions, "redis-partitions", l.Partitions, "Redis partitions in the layout (queue pool size N: partition = fnv1a32(group) % N); every part of a stage must agree")
	fs.Var(partitionAddrsValue{&l.PartitionAddrs}, "redis-partition-addrs", "partitions on Redis servers of their own: \"0=host:port,3=host:port\" (with Sentinel: \"0=master-name,...\")")
	fs.BoolVar(&l.RedisCluster, "redis-cluster", l.RedisCluster, "--redis-addr names nodes of a Redis Cluster (\"host:port,host:port\", any of them): every partition in the slot of its hash tag; not with --redis-partition-addrs or Sentinel")
	fs.StringVar(&l.RedisUser, "redis-user", l.RedisUser, "Redis ACL user to log in as (default: the default user)")
	cli.SecretVar(fs, &l.RedisPassword, "redis-password", "the Redis user's password")
	l.RedisTLS.Register(fs, "redis", "Redis")
	cli.StringsVar(fs, &l.SentinelAddrs, "redis-sentinel-addrs", l.SentinelAddrs, "Sentinels (host:port, comma-separated) to find each partition's master by, following failovers; --redis-addr is then not used")
	fs.StringVar(&l.SentinelMaster, "redis-sentinel-master", l.SentinelMaster, "master name the Sentinels monitor (required with --redis-sentinel-addrs)")
	fs.StringVar(&l.SentinelUser, "redis-sentinel-user", l.SentinelUser, "ACL user to log in to the Sentinels as")
	cli.SecretVar(fs, &l.SentinelPassword, "redis-sentinel-password", "the Sentinels' password")
}

// Keyspace is the key layout of the location's partitions.
func (l StageRedis) Keyspace() Keyspace { return Keyspace{Stage: l.Stage, Partitions: l.Partitions} }

// PoolConfig is the configuration of a pool of the location's partitions.
func (l StageRedis) PoolConfig() PoolConfig {
	return PoolConfig{Keyspace: l.Keyspace(), Addr: l.RedisAddr, PartitionAddrs: l.PartitionAddrs, Cluster: l.RedisCluster, Connect: Connect{
		User: l.RedisUser, Password: l.RedisPassword, TLS: l.RedisTLS,
		SentinelAddrs: l.SentinelAddrs, SentinelMaster: l.SentinelMaster, SentinelUser: l.SentinelUser, SentinelPassword: l.SentinelPassword,
	}}
}

// Validate checks the location. Its errors start with the field's name
// ("Partitions: ..."), for the part that embeds it to prefix with its
// Config's ("relay: Config.Partitions: ...").
func (l StageRedis) Validate() error {
	switch {
	case l.Stage == "" || strings.ContainsAny(l.Stage, "{}: \t\n"):
		return fmt.Errorf("Stage: %q: want a non-empty name without braces, colons or spaces", l.Stage)
	case l.Partitions < 1 || l.Partitions > maxPartitions:
		return fmt.Errorf("Partitions: %d: want 1..%d", l.Partitions, maxPartitions)
	case l.RedisAddr == "":
		return errors.New("RedisAddr: empty: want host:port")
	case len(l.SentinelAddrs) > 0 && l.SentinelMaster == "":
		return errors.New("SentinelMaster: empty: name the master the Sentinels monitor (their \"sentinel monitor <name> ...\")")
	case l.RedisCluster && len(l.PartitionAddrs) > 0:
		return errors.New("PartitionAddrs: set with RedisCluster: the cluster's slots place the partitions; drop one of them")
	case l.RedisCluster && len(l.SentinelAddrs) > 0:
		return errors.New("SentinelAddrs: set with RedisCluster: a cluster fails over by itself, without Sentinel; drop one of them")
	case l.SentinelMaster != "" && len(l.SentinelAddrs) == 0:
		return fmt.Errorf("SentinelAddrs: empty, but SentinelMaster is %q: list the Sentinels", l.SentinelMaster)
	}
	if _, err := l.RedisTLS.Config(); err != nil {
		return fmt.Errorf("RedisTLS: %w", err)
	}
	if _, err := l.RedisPassword.Read(); err != nil {
		return fmt.Errorf("RedisPassword: %w", err)
	}
	if _, err := l.SentinelPassword.Read(); err != nil {
		return fmt.Errorf("SentinelPassword: %w", err)
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
