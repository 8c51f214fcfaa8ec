package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// RedisOption configures Redis and StartRedis.
type RedisOption func(*redisOpts)

type redisOpts struct {
	aof       bool
	maxMemory string
	tls       *Certs
	args      []string // more redis-server arguments (WithUser, replicas)
}

// WithTLS serves TLS alone on the server's port, with certs' server
// certificate (for 127.0.0.1, ::1 and localhost, signed by certs.CAFile);
// clients need not present one. The server's Client trusts certs.CAFile.
// Process mode only.
func WithTLS(certs *Certs) RedisOption { return func(o *redisOpts) { o.tls = certs } }

// WithUser adds an ACL user: name, with password pass and the ACL rule
// rule (such as "~sluice:* &* +@all"). The default user stays as it is
// (no password), for the server's Client. Process mode only.
func WithUser(name, pass, rule string) RedisOption {
	return func(o *redisOpts) {
		o.args = append(o.args, "--user", name, "on", ">"+pass)
		o.args = append(o.args, strings.Fields(rule)...)
	}
}

// WithAOF turns on the append only file (appendfsync everysec), so data
// survives Stop, Kill and Restart. Without it a restarted server is empty.
func WithAOF() RedisOption { return func(o *redisOpts) { o.aof = true } }

// WithMaxMemory sets maxmemory, such as "64mb"; the policy is noeviction.
func WithMaxMemory(limit string) RedisOption { return func(o *redisOpts) { o.maxMemory = limit } }

// RedisServer is a Redis server for tests.
type RedisServer struct {
	server
	client *redis.Client
}

// Redis starts a Redis server on a free port for the test, with its data in a
// fresh directory. t.Cleanup stops it, closes its Client and removes the
// directory. A missing redis-server binary fails the test.
func Redis(t testing.TB, opts ...RedisOption) *RedisServer {
	t.Helper()
	s, err := startRedis(t, opts)
	return forTest(t, "redis", s, err)
}

// StartRedis is Redis for TestMain: the caller must call Close.
func StartRedis(opts ...RedisOption) (*RedisServer, error) {
	return startRedis(nil, opts)
}

func startRedis(tb testing.TB, opts []RedisOption) (*RedisServer, error) {
	var o redisOpts
	for _, opt := range opts {
		opt(&o)
	}
	be, err := startBackend(
		func(ctx context.Context) (backend, error) { return startRedisProcess(ctx, o) },
		func(ctx context.Context) (backend, error) {
			if o.tls != nil || len(o.args) > 0 {
				return nil, errors.New("testenv: Redis with TLS, ACL users or replication runs in process mode only: unset " + EnvMode)
			}
			return startRedisDocker(ctx, o)
		},
	)
	if err != nil {
		return nil, err
	}
	var tc *tls.Config
	if o.tls != nil {
		if tc, err = (tlsfiles.Client{CAFile: o.tls.CAFile}).Config(); err != nil {
			be.close(context.Background())
			return nil, err
		}
	}
	client := redis.NewClient(&redis.Options{
		Addr:      be.addr(),
		TLSConfig: tc,
		// redis 7.0 has no CLIENT SETINFO; skip it rather than
		// sending a command that fails on every connect.
		DisableIdentity: true,
		DialTimeout:     time.Second,
		// Tests stop servers on purpose; fail fast against a stopped
		// one rather than retrying dials for seconds.
		MaxRetryBackoff:    100 * time.Millisecond,
		DialerRetries:      1,
		DialerRetryTimeout: 10 * time.Millisecond,
	})
	closeClient := func() error {
		if err := client.Close(); !errors.Is(err, redis.ErrClosed) {
			return err
		}
		return nil
	}
	return &RedisServer{
		server: server{name: "redis", f: failer{tb}, be: be, closeClient: closeClient},
		client: client,
	}, nil
}

func startRedisProcess(ctx context.Context, o redisOpts) (backend, error) {
	return startProcess("redis", func(addr, dir string) (process, error) {
		cfg := stack.RedisConfig{Addr: addr, Dir: dir, AOF: o.aof, MaxMemory: o.maxMemory, Args: o.args}
		if o.tls != nil {
			cfg.TLS = &stack.RedisTLS{CertFile: o.tls.ServerCertFile, KeyFile: o.tls.ServerKey, CAFile: o.tls.CAFile}
		}
		return stack.StartRedis(ctx, cfg)
	})
}

// Client returns a client for the server, closed by Close. It reconnects by
// itself after Stop, Kill and Restart.
func (s *RedisServer) Client() *redis.Client { return s.client }
