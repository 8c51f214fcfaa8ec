package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pool holds the Redis clients of a layout's partitions: one per distinct
// address, so partitions on the same Redis share connections and pipelines;
// on a Redis Cluster (PoolConfig.Cluster) one cluster client serves them all.
type Pool struct {
	cfg         PoolConfig // as given, for Fresh
	keyspace    Keyspace
	idDedupeTTL time.Duration
	batchPrefix string
	batchSeq    atomic.Uint64
	candidates  candidateCache // Claim's, per partition
	byPart      []redis.UniversalClient
	distinct    []redis.UniversalClient
	addrs       []string             // of distinct
	cluster     *redis.ClusterClient // when PoolConfig.Cluster: distinct's only client
}

// PoolConfig configures NewPool.
type PoolConfig struct {
	Keyspace Keyspace
	// Addr is the Redis of every partition not in PartitionAddrs; with
	// Cluster, a comma-separated list of cluster nodes to discover the
	// cluster from. Required.
	Addr string
	// PartitionAddrs moves partitions to Redis servers of their own
	// (physical partitioning); see ParsePartitionAddrs. Default: none.
	// Not with Cluster: the cluster's slots place the partitions.
	PartitionAddrs map[int]string
	// Connect is how the clients log in (ACL user, password), whether they
	// use TLS, and Sentinel (connect.go). Default: plain TCP, no login.
	Connect Connect
	// Cluster makes Addr a Redis Cluster's seed nodes: one cluster client
	// serves every partition, each partition's keys in the slot of its
	// hash tag (see cluster.go). Default false: Addr is one Redis server.
	Cluster bool
	// Options, if set, adjusts each client's options (timeouts, pool
	// size); on a cluster, each node's client's. Default: go-redis's.
	Options func(*redis.Options)
	// IDDedupeTTL is how long a client-chosen job id is remembered, so
	// that the client's resends of it are dropped. Default: 24h.
	IDDedupeTTL time.Duration
	// Owner names who claims through this pool (a worker: host/pid) in
	// the names of the batches it claims, so that a lookup of a running
	// job says who holds it (FindJob). Characters other than letters,
	// digits and . _ - / : become '_'; at most 64 are kept. Default "":
	// batches named by a random prefix alone.
	Owner string
	// Now is the clock a batch's name records its claim time by (a
	// lookup's "since"). Default time.Now.
	Now func() time.Time
}

// NewPool creates the clients; it does not connect yet.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if err := cfg.Keyspace.Validate(); err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		return nil, errors.New("queue: no Redis address")
	}
	p := &Pool{cfg: cfg, keyspace: cfg.Keyspace, byPart: make([]redis.UniversalClient, cfg.Keyspace.Partitions), idDedupeTTL: cfg.IDDedupeTTL}
	if p.idDedupeTTL <= 0 {
		p.idDedupeTTL = 24 * time.Hour
	}
	var seed [6]byte
	_, _ = rand.Read(seed[:])
	p.batchPrefix = hex.EncodeToString(seed[:]) + "-"
	if o := ownerName(cfg.Owner); o != "" {
		p.batchPrefix = o + ownerSep + p.batchPrefix
	}
	tc, sentinelPassword, err := cfg.Connect.settings()
	if err != nil {
		return nil, err
	}
	if cfg.Cluster {
		if len(cfg.PartitionAddrs) > 0 {
			return nil, errors.New("queue: PartitionAddrs (--redis-partition-addrs) with Cluster (--redis-cluster): the cluster's slots place the partitions; drop one of them")
		}
		if cfg.Connect.Sentinel() {
			return nil, errors.New("queue: Sentinel (--redis-sentinel-addrs) with Cluster (--redis-cluster): a cluster fails over by itself; drop one of them")
		}
		c := newClusterClient(cfg, tc)
		p.cluster = c
		p.distinct, p.addrs = []redis.UniversalClient{c}, []string{"cluster " + cfg.Addr}
		for part := range p.byPart {
			p.byPart[part] = c
		}
		return p, nil
	}
	clients := map[string]redis.UniversalClient{}
	for part := range p.byPart {
		server := cfg.server(part)
		c, ok := clients[server]
		if !ok {
			c = cfg.newClient(server, tc, sentinelPassword)
			clients[server] = c
			p.distinct = append(p.distinct, c)
			p.addrs = append(p.addrs, cfg.serverLabel(server))
		}
		p.byPart[part] = c
	}
	return p, nil
}

// OpenAs is NewPool held as R, a part's own interface listing the Redis
// operations it uses (its redis.go, enforced by internal/arch): a nil R on
// an error, never a nil *Pool inside a non-nil interface.
func OpenAs[R any](cfg PoolConfig) (R, error) {
	var none R
	p, err := NewPool(cfg)
	if err != nil {
		return none, err
	}
	r, ok := any(p).(R)
	if !ok {
		p.Close()
		return none, fmt.Errorf("queue.OpenAs: *Pool does not implement %T", &none)
	}
	return r, nil
}

// Keyspace is the pool's layout.
func (p *Pool) Keyspace() Keyspace { return p.keyspace }

// Client is the client of partition part: a *redis.Client, or on a
// cluster the pool's one *redis.ClusterClient.
func (p *Pool) Client(part int) redis.UniversalClient { return p.byPart[part] }

// Servers are the distinct clients and their addresses. On a cluster it
// is the one cluster client, named "cluster <seeds>"; ForEachMaster
// reaches each of its masters.
func (p *Pool) Servers() ([]redis.UniversalClient, []string) { return p.distinct, p.addrs }

// Cluster reports whether the pool serves a Redis Cluster.
func (p *Pool) Cluster() bool { return p.cluster != nil }

// Close closes every client.
func (p *Pool) Close() error {
	var errs []error
	for _, c := range p.distinct {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Ping checks that every Redis server of the pool answers, for /readyz;
// on a cluster, every master.
func (p *Pool) Ping(ctx context.Context) error {
	return p.eachServer(ctx, func(ctx context.Context, m *redis.Client, name string) error {
		return explain(name, m.Ping(ctx).Err())
	})
}

// eachServer calls fn with each Redis server of the pool and the name its
// errors should give: each distinct client, and each master of a cluster.
func (p *Pool) eachServer(ctx context.Context, fn func(ctx context.Context, m *redis.Client, name string) error) error {
	if p.cluster != nil {
		var failed atomic.Bool // fn runs on each master at once
		err := p.cluster.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			err := fn(ctx, m, "cluster master "+m.Options().Addr)
			if err != nil {
				failed.Store(true)
			}
			return err
		})
		if err != nil && !failed.Load() { // the cluster's slots could not be read
			return explain(p.addrs[0], err)
		}
		return err
	}
	for i, c := range p.distinct {
		if err := fn(ctx, c.(*redis.Client), p.addrs[i]); err != nil {
			return err
		}
	}
	return nil
}

// LoadScripts loads the scripts (script.go) into every Redis, so pipelines can use
// EVALSHA (inside a pipeline go-redis cannot fall back to EVAL by itself).
// On a cluster go-redis's SCRIPT LOAD goes to every master and replica.
// Callers also reload on NOSCRIPT: a restarted Redis has an empty cache,
// and so has a master a resharding moved a partition to.
func (p *Pool) LoadScripts(ctx context.Context) error {
	for i, c := range p.distinct {
		for _, s := range scripts {
			if err := s.rs.Load(ctx, c).Err(); err != nil {
				return fmt.Errorf("loading scripts: %w", explain(p.addrs[i], err))
			}
		}
	}
	return nil
}

// Transient reports whether err says Redis cannot serve, or cannot write,
// now (down, loading, out of memory, read-only replica, unable to persist:
// see unavailableCodes) rather than that a particular command was wrong:
// the whole batch should be retried later, never failed or dropped.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // not a Redis reply: the connection failed
	}
	return unavailableReply(rerr.Error())
}

// unavailableCodes are the error codes (a reply's first word) by which
// Redis 7 says it cannot serve or cannot write now, whatever the command:
//
//	MISCONF     it cannot persist: an RDB save failed with
//	            stop-writes-on-bgsave-error, or writing the AOF failed
//	            ("MISCONF Errors writing to the AOF file: No space left
//	            on device"); writes (and PING) are refused until a save
//	            or an AOF write works again
//	READONLY    a replica (a failover in progress, a stale Sentinel view)
//	LOADING     loading its dataset at start
//	OOM         at maxmemory (the relay's memory guard should prevent it)
//	MASTERDOWN  a replica cut off from its master
//	NOREPLICAS  fewer replicas than min-replicas-to-write
//	BUSY        a script or function runs past busy-reply-threshold
//	TRYAGAIN, CLUSTERDOWN  a cluster resharding or without quorum
//	NOSCRIPT    an empty script cache (a restart); callers reload
//
// Matched as the whole first word: BUSYKEY and BUSYGROUP are not BUSY.
var unavailableCodes = []string{"MISCONF", "READONLY", "LOADING", "OOM", "MASTERDOWN", "NOREPLICAS", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "NOSCRIPT"}

// unavailableReply reports whether a Redis error reply says Redis cannot
// serve now. A write refused inside a script keeps its code in Redis 7
// ("MISCONF ... script: <sha>, on @user_script:1."); Redis 6 wraps it
// ("ERR Error running script (call to f_<sha>): @user_script:1: -MISCONF
// ..."), so a script error is searched for "-<code> " too.
func unavailableReply(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	for _, c := range unavailableCodes {
		if code == c {
			return true
		}
	}
	if strings.HasPrefix(msg, "ERR max number of clients reached") {
		return true // maxclients: others hold the connections for now
	}
	if strings.HasPrefix(msg, "ERR Error running script") {
		for _, c := range unavailableCodes {
			if strings.Contains(msg, "-"+c+" ") {
				return true
			}
		}
	}
	return false
}

// Epoch names the current lives of the pool's Redis servers: their run_ids,
// which change with every restart. A write Redis answered, still under the
// same epoch a while later, was not lost to a crash in between; under
// another epoch it may have been (AOF with appendfsync everysec loses up to
// a second or two when the host fails). The relay commits Kafka offsets by
// it (relay/durable.go). On a cluster it names every master's life: a
// failover or a restart of any of them changes it (a master added or
// removed does too), a resharding alone does not.
func (p *Pool) Epoch(ctx context.Context) (string, error) {
	var (
		mu  sync.Mutex
		ids []string
	)
	err := p.eachServer(ctx, func(ctx context.Context, m *redis.Client, name string) error {
		info, err := m.Info(ctx, "server").Result()
		if err != nil {
			return fmt.Errorf("Redis %s: %w", name, err)
		}
		id := ""
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
				id = v
			}
		}
		if id == "" {
			return fmt.Errorf("Redis %s: INFO server has no run_id", name)
		}
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return "", err
	}
	if p.cluster != nil {
		sort.Strings(ids) // the order ForEachMaster calls in is not fixed
	}
	return strings.Join(ids, ","), nil
}

// nextBatch names a new claimed batch: its owner (PoolConfig.Owner), unique
// across processes (a random prefix per pool) and within one (a counter),
// and when it was claimed (PoolConfig.Now), for a lookup to show.
func (p *Pool) nextBatch() string {
	now := time.Now
	if p.cfg.Now != nil {
		now = p.cfg.Now
	}
	return p.batchPrefix + strconv.FormatUint(p.batchSeq.Add(1), 36) + claimedSep + strconv.FormatInt(now().UnixMilli(), 36)
}

// Fresh returns a pool of new clients to the same servers, for a retry
// that must go through as soon as Redis answers again: after as many failed
// dials as its pool size, a go-redis client answers every dial with the
// last error until a probe of its own, once a second, succeeds; a new
// client has no such memory. Each of its dials is tried once. The caller
// closes it, and should use it only while the pool's own clients fail.
func (p *Pool) Fresh() (*Pool, error) {
	cfg := p.cfg
	adjust := cfg.Options
	cfg.Options = func(o *redis.Options) {
		if adjust != nil {
			adjust(o)
		}
		o.DialerRetries = 1
		o.PoolSize = 2
	}
	return NewPool(cfg)
}

// ownerSep ends a batch name's owner (PoolConfig.Owner), which ownerName
// keeps free of it.
const ownerSep = "~"

// ownerName is owner as a batch name holds it.
func ownerName(owner string) string {
	b := []byte(owner)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-/:", c) >= 0
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}

// claimedSep starts a batch name's claim time (Unix ms, base 36).
const claimedSep = "."

// batchClaimed is when a batch was claimed, as its name says; zero for a
// name without it.
func batchClaimed(batch string) time.Time {
	i := strings.LastIndex(batch, claimedSep)
	if i < 0 {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(batch[i+1:], 36, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// batchOwner is the owner a batch's name carries, "" for none.
func batchOwner(batch string) string {
	owner, _, ok := strings.Cut(batch, ownerSep)
	if !ok {
		return ""
	}
	return owner
}
