package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/retry"
)

// EvictingError says that a Redis of the pool evicts keys at maxmemory
// (its maxmemory-policy is not noeviction): a part that writes to it must
// not start. Misconfigured reports it.
type EvictingError struct {
	Server string // as the pool names it
	Policy string // its maxmemory-policy
}

func (e *EvictingError) Error() string {
	return fmt.Sprintf("redis %s: maxmemory-policy is %s: Sluice keeps jobs, idempotency marks and leases in Redis and an evicting policy would silently drop them; set maxmemory-policy noeviction (redis.conf, or CONFIG SET maxmemory-policy noeviction)", e.Server, e.Policy)
}

// CheckEviction checks that no Redis of the pool (on a cluster, no
// master) evicts keys: its maxmemory-policy must be noeviction. Every
// volatile-* policy is refused too: records, idempotency marks and group
// results carry TTLs, and evicting one early reruns a job or loses a
// result; at maxmemory a noeviction Redis answers OOM, which every part
// waits out (Transient) while the relay's memory guard keeps it from
// getting there. The policy is read with CONFIG GET, or from INFO memory
// where CONFIG is renamed or not granted; where neither answers it warns
// on log and lets the part start. It returns an *EvictingError, or the
// error of a Redis that does not answer (the caller may wait for it).
func (p *Pool) CheckEviction(ctx context.Context, log *slog.Logger) error {
	return p.eachServer(ctx, func(ctx context.Context, m *redis.Client, name string) error {
		policy, err := evictionPolicy(ctx, m)
		switch {
		case err != nil:
			return explain(name, err)
		case policy == "":
			log.Warn("could not read Redis's maxmemory-policy (CONFIG GET and INFO memory are refused); starting anyway: make sure it is noeviction, or jobs and idempotency marks may be evicted",
				"redis", name)
			return nil
		case policy != "noeviction":
			return &EvictingError{Server: name, Policy: policy}
		}
		return nil
	})
}

// evictionPolicy is m's maxmemory-policy: from CONFIG GET, else from INFO
// memory; "" when Redis refuses both (a renamed command, an ACL without
// it). A failed connection is an error.
func evictionPolicy(ctx context.Context, m *redis.Client) (string, error) {
	var rerr redis.Error
	cfg, err := m.ConfigGet(ctx, "maxmemory-policy").Result()
	if err == nil {
		if v := cfg["maxmemory-policy"]; v != "" {
			return v, nil
		}
	} else if !errors.As(err, &rerr) || unavailableReply(err.Error()) {
		return "", err
	}
	info, err := m.Info(ctx, "memory").Result()
	if err != nil {
		if !errors.As(err, &rerr) || unavailableReply(err.Error()) {
			return "", err
		}
		return "", nil
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// AwaitSafe waits until every Redis of the pool answers and none evicts
// keys (CheckEviction), for a part that writes to Redis to call before it
// starts: it returns nil then, ctx's error if ctx ends first, and at once
// an error that waiting cannot mend (Misconfigured: a login, an ACL, a TLS
// trust, an evicting maxmemory-policy), which names the setting to fix.
// The first wait is logged, once.
func (p *Pool) AwaitSafe(ctx context.Context, log *slog.Logger) error {
	for attempt := 1; ; attempt++ {
		err := p.CheckEviction(ctx, log)
		if err == nil {
			if attempt > 1 {
				log.Info("Redis answers: starting")
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if Misconfigured(err) {
			return err
		}
		if attempt == 1 {
			log.Warn("Redis does not answer yet; waiting for it before starting", "err", err)
		}
		if err := retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, 2*time.Second, attempt)); err != nil {
			return err
		}
	}
}
