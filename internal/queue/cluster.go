package queue

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// On a Redis Cluster (PoolConfig.Cluster) one go-redis ClusterClient serves
// every partition. Each queue partition's keys share the hash tag
// {<stage>:<topic>:p<N>} and each partition's shared keys {<stage>:p<N>}
// (layout.go), so every key one script names is in one slot, and a cluster
// pipeline, which go-redis splits by node, never needs two partitions in one
// command. docs/secure/redis-cluster.md tells operators what that promises.

// clusterMaxRedirects is how many MOVED/ASK redirections one command may
// follow: a resharding moves a slot once, a failover promotes once; a few
// more for both at once.
const clusterMaxRedirects = 8

// newClusterClient is the pool's cluster client for PoolConfig.Cluster: each
// node is dialled and logged in to as PoolConfig.Connect says (TLS, the
// ACL user and password), as one server would be.
func newClusterClient(cfg PoolConfig, tc *tls.Config) *redis.ClusterClient {
	var seeds []string
	for _, a := range strings.Split(cfg.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			seeds = append(seeds, a)
		}
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        seeds,
		MaxRedirects: clusterMaxRedirects,
		MaxRetries:   -1,
		TLSConfig:    tc,

		CredentialsProviderContext: cfg.Connect.credentials(),
		// Each node's client keeps the standalone pool's policy (no
		// retries of its own) and takes the caller's adjustments.
		NewClient: func(o *redis.Options) *redis.Client {
			o.MaxRetries = -1
			if cfg.Options != nil {
				cfg.Options(o)
			}
			return redis.NewClient(o)
		},
	})
	c.AddHook(noRetryHook{})
	return c
}

// noRetryHook keeps the standalone pool's retry policy on a cluster: the
// caller retries, never the client behind its back. go-redis's cluster
// client resends a command whose connection failed after it was written
// (it may have run: a script would run twice), and resends a whole
// pipeline to a node when its first reply was TRYAGAIN or its connection
// broke midway, answered commands included. Marked NoRetry, a command is
// still sent on after MOVED and ASK (Redis refused it without running it:
// the slot is elsewhere) but a TRYAGAIN, CLUSTERDOWN or a broken connection
// comes back to the caller, which treats it as Transient. MULTI/EXEC
// transactions are left alone: go-redis re-sends one only when EXEC did not
// run it, and ours (FinishCompleted) are idempotent anyway.
type noRetryHook struct{}

func (noRetryHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (noRetryHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return next(ctx, noRetryCmd{cmd})
	}
}

func (noRetryHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			return next(ctx, cmds)
		}
		wrapped := make([]redis.Cmder, len(cmds))
		for i, c := range cmds {
			wrapped[i] = noRetryCmd{c}
		}
		return next(ctx, wrapped)
	}
}

// noRetryCmd is a command go-redis must not resend by itself; the result
// lands in the command it wraps.
type noRetryCmd struct{ redis.Cmder }

func (noRetryCmd) NoRetry() bool { return true }

// ForEachMaster calls fn with each master behind c: c itself for one Redis
// server, every master of the cluster (concurrently) for a cluster client.
// What one server answers for itself (INFO, PING, SCAN) must be asked of
// each master on a cluster.
func ForEachMaster(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := c.(type) {
	case *redis.Client:
		return fn(ctx, c)
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	}
	return fmt.Errorf("queue: unsupported Redis client %T", c)
}

// MasterOf is the Redis server that holds key of partition part now: its
// client for one server, the master serving key's slot on a cluster. For
// what only one server can answer (SCAN for a partition's keys): while a
// resharding moves the partition's slot, some of its keys are already on
// the new master and a SCAN of the old one misses them.
func (p *Pool) MasterOf(ctx context.Context, part int, key string) (redis.UniversalClient, error) {
	if p.cluster == nil {
		return p.byPart[part], nil
	}
	m, err := p.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("Redis Cluster: the master of %s: %w", key, err)
	}
	return m, nil
}
