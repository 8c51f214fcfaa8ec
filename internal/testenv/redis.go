package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/stack"
)

// RedisOption configures Redis and StartRedis.
type RedisOption func(*redisOpts)

type redisOpts struct {
	aof       bool
	maxMemory string
}

// WithAOF turns on the append only file (appendfsync everysec), so data
// survives Stop, Kill and Restart. Without it a restarted server is empty.
func WithAOF() RedisOption { return func(o *redisOpts) { o.aof = true } }

// WithMaxMemory sets maxmemory, such as "64mb"; the policy is noeviction.
func WithMaxMemory(limit string) RedisOption { return func(o *redisOpts) { o.maxMemory = limit } }

// redisBackend is what runs the server: a child process or a container.
type redisBackend interface {
	addr() string
	dir() string
	stop(context.Context) error
	kill() error
	restart(context.Context) error
	close(context.Context) error
}

// RedisServer is a Redis server for tests.
type RedisServer struct {
	f      failer
	be     redisBackend
	client *redis.Client

	closeOnce sync.Once
	closeErr  error
}

// Redis starts a Redis server on a free port for the test, with its data in a
// fresh directory. t.Cleanup stops it, closes its Client and removes the
// directory. A missing redis-server binary fails the test.
func Redis(t testing.TB, opts ...RedisOption) *RedisServer {
	t.Helper()
	s, err := startRedis(t, opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("testenv: closing redis: %v", err)
		}
	})
	return s
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
	m, err := mode()
	if err != nil {
		return nil, err
	}
	ctx, cancel := startCtx()
	defer cancel()
	var be redisBackend
	if m == modeDocker {
		be, err = startRedisDocker(ctx, o)
	} else {
		be, err = startRedisProcess(ctx, o)
	}
	if err != nil {
		return nil, err
	}
	s := &RedisServer{f: failer{tb}, be: be}
	s.client = redis.NewClient(&redis.Options{
		Addr: be.addr(),
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
	return s, nil
}

type redisProcess struct {
	r       *stack.Redis
	tempDir string
}

func startRedisProcess(ctx context.Context, o redisOpts) (*redisProcess, error) {
	dir, err := os.MkdirTemp("", "sluice-testenv-redis-")
	if err != nil {
		return nil, err
	}
	var r *stack.Redis
	err = withFreePort(func(port int) error {
		r, err = stack.StartRedis(ctx, stack.RedisConfig{
			Addr:      net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Dir:       dir,
			AOF:       o.aof,
			MaxMemory: o.maxMemory,
		})
		return err
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &redisProcess{r: r, tempDir: dir}, nil
}

func (p *redisProcess) addr() string                      { return p.r.Addr() }
func (p *redisProcess) dir() string                       { return p.tempDir }
func (p *redisProcess) stop(ctx context.Context) error    { return p.r.Stop(ctx) }
func (p *redisProcess) kill() error                       { return p.r.Kill() }
func (p *redisProcess) restart(ctx context.Context) error { return p.r.Restart(ctx) }
func (p *redisProcess) close(ctx context.Context) error {
	return errors.Join(p.r.Stop(ctx), removeDir(p.tempDir))
}

// Addr returns the server's "host:port" address.
func (s *RedisServer) Addr() string { return s.be.addr() }

// Dir returns the server's data directory, or "" in docker mode.
func (s *RedisServer) Dir() string { return s.be.dir() }

// Client returns a client for the server, closed by Close. It reconnects by
// itself after Stop, Kill and Restart.
func (s *RedisServer) Client() *redis.Client { return s.client }

// Stop shuts the server down gracefully (SIGTERM) and waits for it.
func (s *RedisServer) Stop() {
	ctx, cancel := stopCtx()
	defer cancel()
	if err := s.be.stop(ctx); err != nil {
		s.f.fatalf("testenv: stopping redis: %v", err)
	}
}

// Kill kills the server (SIGKILL), as a crash would, and waits for it.
func (s *RedisServer) Kill() {
	if err := s.be.kill(); err != nil {
		s.f.fatalf("testenv: killing redis: %v", err)
	}
}

// Restart stops the server if it runs and starts it again on the same
// address with the same data directory, waiting until it answers PING.
func (s *RedisServer) Restart() {
	ctx, cancel := startCtx()
	defer cancel()
	if err := s.be.restart(ctx); err != nil {
		s.f.fatalf("testenv: restarting redis: %v", err)
	}
}

// Close closes the client, stops the server and removes its files. Redis
// calls it in t.Cleanup; it is safe to call more than once.
func (s *RedisServer) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := stopCtx()
		defer cancel()
		cerr := s.client.Close()
		if errors.Is(cerr, redis.ErrClosed) {
			cerr = nil
		}
		if err := s.be.close(ctx); err != nil {
			s.closeErr = errors.Join(cerr, fmt.Errorf("redis at %s: %w", s.be.addr(), err))
		} else {
			s.closeErr = cerr
		}
	})
	return s.closeErr
}
