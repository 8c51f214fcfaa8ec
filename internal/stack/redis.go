package stack

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

const redisMissing = "redis-server not found: install it with `apt-get install redis-server` (make deps does this)"

// RedisConfig configures a redis-server child process.
type RedisConfig struct {
	// Bin is the redis-server binary, overriding "redis-server" from PATH.
	Bin string
	// Addr is the "127.0.0.1:PORT" address to listen on. Required.
	Addr string
	// Dir is the working directory, holding the AOF files and, unless
	// Stdout is set, redis.log. Required; created if missing.
	Dir string
	// AOF enables the append only file with appendfsync everysec. Without
	// it nothing is persisted: RDB snapshots are always off, so a restart
	// without AOF starts empty.
	AOF bool
	// MaxMemory is a maxmemory value such as "256mb"; empty means no
	// limit. The policy is always noeviction: sluice's data must not
	// vanish silently, writes fail instead.
	MaxMemory string
	// Stdout receives the server's log, overriding Dir/redis.log.
	Stdout io.Writer
	// TLS, if set, serves TLS alone, on Addr's port (--port 0
	// --tls-port), with its files; clients may but need not present a
	// certificate (--tls-auth-clients optional). Default: plain TCP.
	TLS *RedisTLS
	// ConfigFile, if set, is read first (redis-server <file> ...), as a
	// Sentinel needs: it rewrites the file with what it learns.
	ConfigFile string
	// Args are more redis-server arguments, after the ones above: a later
	// one wins ("--replicaof", "--user", "--sentinel"). Default: none.
	Args []string
}

// RedisTLS are the PEM files a TLS redis-server serves with.
type RedisTLS struct {
	CertFile, KeyFile, CAFile string
}

// Redis is a running (or stopped) redis-server child process.
type Redis struct {
	cfg RedisConfig
	bin string

	mu sync.Mutex
	p  *proc // the current run; nil before the first start
}

// StartRedis starts redis-server and waits until it answers PING. If the
// child exits before that, the error has its exit status and the tail of its
// log, and wraps ErrAddrInUse if the port was taken.
func StartRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	if cfg.Addr == "" {
		return nil, errors.New("stack: RedisConfig.Addr is required")
	}
	if cfg.Dir == "" {
		return nil, errors.New("stack: RedisConfig.Dir is required")
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("stack: bad redis address %q: %w", cfg.Addr, err)
	}
	bin, err := lookBin(cfg.Bin, "redis-server", redisMissing)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating redis dir: %w", err)
	}
	r := &Redis{cfg: cfg, bin: bin}
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Redis) args() []string {
	host, port, _ := net.SplitHostPort(r.cfg.Addr)
	var args []string
	if r.cfg.ConfigFile != "" {
		args = append(args, r.cfg.ConfigFile)
	}
	args = append(args,
		"--bind", host,
		"--port", port,
		"--dir", r.cfg.Dir,
		"--daemonize", "no",
		"--logfile", "", // stdout, which we capture
		"--protected-mode", "no",
		"--save", "", // no RDB snapshots: persistence is AOF or nothing
		"--maxmemory-policy", "noeviction",
	)
	if t := r.cfg.TLS; t != nil {
		args = append(args, "--port", "0", "--tls-port", port, "--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile,
			"--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", "optional")
	}
	if r.cfg.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if r.cfg.MaxMemory != "" {
		args = append(args, "--maxmemory", r.cfg.MaxMemory)
	}
	return append(args, r.cfg.Args...)
}

// start runs the child and waits for PING; r.mu must not be held by others
// concurrently changing r.p.
func (r *Redis) start(ctx context.Context) error {
	p, err := startProc("redis-server", r.bin, r.args(), r.cfg.Dir, "redis.log", r.cfg.Stdout)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.p = p
	r.mu.Unlock()
	if err := p.waitReady(ctx, r.ping); err != nil {
		p.kill()
		return err
	}
	return nil
}

// ping sends an inline PING and expects +PONG; while redis loads its AOF it
// answers -LOADING, which counts as not ready.
func (r *Redis) ping(ctx context.Context) error {
	d := net.Dialer{Timeout: 200 * time.Millisecond}
	var (
		conn net.Conn
		err  error
	)
	if t := r.cfg.TLS; t != nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if pem, rerr := os.ReadFile(t.CAFile); rerr == nil {
			tc.RootCAs = x509.NewCertPool()
			tc.RootCAs.AppendCertsFromPEM(pem)
		}
		conn, err = (&tls.Dialer{NetDialer: &d, Config: tc}).DialContext(ctx, "tcp", r.cfg.Addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", r.cfg.Addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Addr returns the address redis listens on.
func (r *Redis) Addr() string { return r.cfg.Addr }

// Dir returns the working directory.
func (r *Redis) Dir() string { return r.cfg.Dir }

// Running reports whether the child process is alive.
func (r *Redis) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p != nil && !r.p.exited()
}

// Exited is closed when the current run of the child exits, for whatever
// reason: a caller that expects it to run can watch it instead of polling.
// After Restart, call it again for the new run.
func (r *Redis) Exited() <-chan struct{} { return exitedChan(r.cur()) }

func (r *Redis) cur() *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p
}

// Stop sends SIGTERM, which makes redis flush its AOF and exit, and waits for
// the exit. If ctx ends first the process is killed with SIGKILL. Stopping a
// stopped server is a no-op.
func (r *Redis) Stop(ctx context.Context) error {
	if p := r.cur(); p != nil {
		return p.stop(ctx)
	}
	return nil
}

// Kill kills the process with SIGKILL, as a crash would, and waits for it.
// With AOF on, writes acknowledged before the kill survive a Restart:
// redis writes the AOF before replying, and the kernel keeps the page cache.
func (r *Redis) Kill() error {
	if p := r.cur(); p != nil {
		p.kill()
	}
	return nil
}

// Restart stops the server if it is running and starts it again with the same
// address, directory and config. The data survives if AOF is on.
func (r *Redis) Restart(ctx context.Context) error {
	if err := r.Stop(ctx); err != nil {
		return err
	}
	return r.start(ctx)
}
