package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/stack"
)

// SentinelMaster is the master name a SentinelGroup's Sentinels monitor.
const SentinelMaster = "sluice"

// SentinelGroup is replicated Redis under Sentinel on loopback: a master,
// one replica of it, and three Sentinels (quorum 2) that promote the
// replica when the master stops answering for a second. Process mode only.
type SentinelGroup struct {
	// Servers are the two Redis servers: at start Servers[0] is the
	// master and Servers[1] its replica; Master says which is master now.
	Servers [2]*RedisServer
	// Sentinels are the Sentinels' addresses (host:port).
	Sentinels []string

	t        testing.TB
	sentinel *redis.SentinelClient
}

// Sentinel starts a SentinelGroup for the test; opts apply to both Redis
// servers (WithAOF, WithUser; not WithTLS). t.Cleanup stops every process
// and removes their files.
func Sentinel(t testing.TB, opts ...RedisOption) *SentinelGroup {
	t.Helper()
	if m, err := mode(); err != nil || m != modeProcess {
		t.Fatalf("testenv: Sentinel runs in process mode only: unset %s", EnvMode)
	}
	g := &SentinelGroup{t: t}
	g.Servers[0] = Redis(t, opts...)
	_, port, _ := net.SplitHostPort(g.Servers[0].Addr())
	g.Servers[1] = Redis(t, append(opts, func(o *redisOpts) { o.args = append(o.args, "--replicaof", "127.0.0.1", port) })...)
	for range 3 {
		s, err := startSentinel(t, port)
		forTest(t, "sentinel", s, err)
		g.Sentinels = append(g.Sentinels, s.Addr())
	}
	g.sentinel = redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[0], DisableIdentity: true, DialTimeout: time.Second})
	t.Cleanup(func() { g.sentinel.Close() })
	// Ready once the replica is in sync and every Sentinel knows the
	// others and the replica: a failover needs all of that.
	WaitFor(t, 30*time.Second, "the replica in sync and the Sentinels acquainted", func() bool {
		info, err := g.Servers[1].Client().Info(context.Background(), "replication").Result()
		if err != nil || !containsLine(info, "master_link_status:up") {
			return false
		}
		for _, addr := range g.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: addr, DisableIdentity: true})
			m, err := sc.Master(context.Background(), SentinelMaster).Result()
			sc.Close()
			if err != nil || m["num-other-sentinels"] != "2" || m["num-slaves"] != "1" {
				return false
			}
		}
		return true
	})
	return g
}

// Master is the server the Sentinels name master now.
func (g *SentinelGroup) Master() *RedisServer {
	g.t.Helper()
	addr, err := g.sentinel.GetMasterAddrByName(context.Background(), SentinelMaster).Result()
	if err != nil {
		g.t.Fatalf("testenv: asking the Sentinels for the master: %v", err)
	}
	for _, s := range g.Servers {
		if s.Addr() == net.JoinHostPort(addr[0], addr[1]) {
			return s
		}
	}
	g.t.Fatalf("testenv: the Sentinels name %v master, none of %s, %s", addr, g.Servers[0].Addr(), g.Servers[1].Addr())
	return nil
}

// KillMaster kills the current master with SIGKILL and returns it. The
// Sentinels promote the replica about a second and a half later
// (down-after-milliseconds 1000, then a vote); WaitFailover waits for it.
func (g *SentinelGroup) KillMaster() *RedisServer {
	g.t.Helper()
	m := g.Master()
	m.Kill()
	return m
}

// WaitFailover waits until the Sentinels name a master other than old.
func (g *SentinelGroup) WaitFailover(old *RedisServer, timeout time.Duration) *RedisServer {
	g.t.Helper()
	WaitFor(g.t, timeout, "the Sentinels to promote the replica", func() bool {
		addr, err := g.sentinel.GetMasterAddrByName(context.Background(), SentinelMaster).Result()
		return err == nil && net.JoinHostPort(addr[0], addr[1]) != old.Addr()
	})
	return g.Master()
}

// startSentinel runs redis-server --sentinel on a free port, monitoring the
// master on 127.0.0.1:masterPort, with its config file (which Sentinel
// rewrites) in its own directory.
func startSentinel(tb testing.TB, masterPort string) (*RedisServer, error) {
	ctx, cancel := startCtx()
	defer cancel()
	be, err := startProcess("sentinel", func(addr, dir string) (process, error) {
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]s 2\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 3000\n"+
			"sentinel parallel-syncs %[1]s 1\n", SentinelMaster, masterPort)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		return stack.StartRedis(ctx, stack.RedisConfig{Addr: addr, Dir: dir, ConfigFile: conf, Args: []string{"--sentinel"}})
	})
	if err != nil {
		return nil, err
	}
	return &RedisServer{server: server{name: "sentinel", f: failer{tb}, be: be}}, nil
}

func containsLine(info, line string) bool {
	for _, l := range strings.Split(info, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}
