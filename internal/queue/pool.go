package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pool holds the Redis clients of a layout's partitions: one per distinct
// address, so partitions on the same Redis share connections and pipelines.
type Pool struct {
	cfg         PoolConfig // as given, for Fresh
	layout      Layout
	idDedupeTTL time.Duration
	batchPrefix string
	batchSeq    atomic.Uint64
	candidates  candidateCache // Claim's, per partition
	byPart      []*redis.Client
	distinct    []*redis.Client
	addrs       []string // of distinct
}

// PoolConfig configures NewPool.
type PoolConfig struct {
	Layout Layout
	// Addr is the Redis of every partition not in PartitionAddrs.
	Addr string
	// PartitionAddrs moves partitions to Redis servers of their own
	// (physical partitioning); see ParsePartitionAddrs.
	PartitionAddrs map[int]string
	// Connect is how the clients log in (ACL user, password), whether they
	// use TLS, and Sentinel (connect.go). Default: plain TCP, no login.
	Connect Connect
	// Options, if set, adjusts each client's options (timeouts, pool size).
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
	if err := cfg.Layout.Validate(); err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		return nil, errors.New("queue: no Redis address")
	}
	p := &Pool{cfg: cfg, layout: cfg.Layout, byPart: make([]*redis.Client, cfg.Layout.Partitions), idDedupeTTL: cfg.IDDedupeTTL}
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
	clients := map[string]*redis.Client{}
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

// Layout is the pool's layout.
func (p *Pool) Layout() Layout { return p.layout }

// Client is the client of partition part.
func (p *Pool) Client(part int) *redis.Client { return p.byPart[part] }

// Servers are the distinct clients and their addresses.
func (p *Pool) Servers() ([]*redis.Client, []string) { return p.distinct, p.addrs }

// Close closes every client.
func (p *Pool) Close() error {
	var errs []error
	for _, c := range p.distinct {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Ping checks that every Redis server of the pool answers, for /readyz.
func (p *Pool) Ping(ctx context.Context) error {
	for i, c := range p.distinct {
		if err := c.Ping(ctx).Err(); err != nil {
			return explain(p.addrs[i], err)
		}
	}
	return nil
}

// LoadScripts loads the scripts into every Redis, so pipelines can use
// EVALSHA (inside a pipeline go-redis cannot fall back to EVAL by itself).
// Callers also reload on NOSCRIPT: a restarted Redis has an empty cache.
func (p *Pool) LoadScripts(ctx context.Context) error {
	for i, c := range p.distinct {
		for _, s := range scripts {
			if err := s.Load(ctx, c).Err(); err != nil {
				return fmt.Errorf("loading scripts: %w", explain(p.addrs[i], err))
			}
		}
	}
	return nil
}

// scripts are every script the pool runs, for LoadScripts.
var scripts []*redis.Script

func newScript(src string) *redis.Script {
	s := redis.NewScript(src)
	scripts = append(scripts, s)
	return s
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// Transient reports whether err says Redis cannot serve now (down,
// loading, out of memory, read-only replica, ...) rather than that a
// particular command was wrong: the whole batch should be retried later.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // not a Redis reply: the connection failed
	}
	msg := rerr.Error()
	for _, prefix := range []string{"OOM", "LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOSCRIPT"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// Epoch names the current lives of the pool's Redis servers: their run_ids,
// which change with every restart. A write Redis answered, still under the
// same epoch a while later, was not lost to a crash in between; under
// another epoch it may have been (AOF with appendfsync everysec loses up to
// a second or two when the host fails). The relay commits Kafka offsets by
// it (relay/durable.go).
func (p *Pool) Epoch(ctx context.Context) (string, error) {
	ids := make([]string, len(p.distinct))
	for i, c := range p.distinct {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return "", fmt.Errorf("Redis %s: %w", p.addrs[i], err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
				ids[i] = v
			}
		}
		if ids[i] == "" {
			return "", fmt.Errorf("Redis %s: INFO server has no run_id", p.addrs[i])
		}
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
