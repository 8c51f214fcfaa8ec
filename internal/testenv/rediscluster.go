package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/stack"
)

// RedisCluster is a Redis Cluster of masters only (no replicas) for tests:
// redis-server child processes with --cluster-enabled yes on free loopback
// ports, each with its data and nodes.conf in a temporary directory, the
// 16384 slots split evenly between them. DEBUG is enabled for loopback
// clients (DEBUG SLEEP stalls a master). It runs as processes whatever
// SLUICE_TESTENV says.
type RedisCluster struct {
	t     testing.TB
	nodes []*clusterNode
}

type clusterNode struct {
	addr   string
	bus    int    // the cluster bus port
	id     string // the cluster's node id
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
	client *redis.Client // this node alone, for CLUSTER and MIGRATE
}

// NewRedisCluster starts a cluster of masters (at least 1) for the test and
// waits until every node says cluster_state:ok and knows every node and
// slot. t.Cleanup stops the servers and removes their directories. A
// missing redis-server fails the test with how to install it.
func NewRedisCluster(t testing.TB, masters int) *RedisCluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("testenv: NewRedisCluster: %d masters, want at least 1", masters)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server not found: install it with `apt-get install redis-server` (make deps does this): %v", err)
	}
	c := &RedisCluster{t: t}
	t.Cleanup(c.close)
	for i := range masters {
		n, err := startClusterNode(bin, i)
		if err != nil {
			t.Fatalf("testenv: starting cluster node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, n)
	}
	ctx, cancel := startCtx()
	defer cancel()
	if err := c.create(ctx); err != nil {
		t.Fatalf("testenv: creating the Redis Cluster: %v", err)
	}
	return c
}

// startClusterNode starts one cluster-enabled redis-server on free ports
// (its cluster bus on a second one: port+10000 may be out of range).
func startClusterNode(bin string, i int) (*clusterNode, error) {
	dir, err := os.MkdirTemp("", "sluice-testenv-rediscluster-"+strconv.Itoa(i)+"-")
	if err != nil {
		return nil, err
	}
	var n *clusterNode
	err = withFreePort(func(port int) error {
		bus, err := stack.FreePort()
		if err != nil {
			return err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		log, err := os.Create(filepath.Join(dir, "redis.log"))
		if err != nil {
			return err
		}
		defer log.Close()
		cmd := exec.Command(bin,
			"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--cluster-port", strconv.Itoa(bus),
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000", "--dir", dir, "--daemonize", "no", "--logfile", "",
			"--protected-mode", "no", "--enable-debug-command", "local", "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction")
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
		// The servers die with the test binary, even when it is killed.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return err
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		client := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, DialTimeout: time.Second, MaxRetries: -1})
		ctx, cancel := startCtx()
		defer cancel()
		for {
			if err := client.Ping(ctx).Err(); err == nil {
				break
			}
			select {
			case <-exited:
				client.Close()
				out, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
				if strings.Contains(string(out), "Address already in use") {
					return fmt.Errorf("%s: %w", addr, stack.ErrAddrInUse)
				}
				return fmt.Errorf("redis-server on %s exited: %s", addr, tail(out))
			case <-ctx.Done():
				cmd.Process.Kill()
				client.Close()
				return fmt.Errorf("redis-server on %s: no PONG: %w", addr, ctx.Err())
			case <-time.After(20 * time.Millisecond): // the child binds its port
			}
		}
		id, err := client.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			cmd.Process.Kill()
			client.Close()
			return fmt.Errorf("CLUSTER MYID on %s: %w", addr, err)
		}
		n = &clusterNode{addr: addr, bus: bus, id: id, dir: dir, cmd: cmd, exited: exited, client: client}
		return nil
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return n, nil
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// create gives each node its share of the slots and a config epoch of its
// own (as redis-cli --cluster create does), introduces them to the first,
// and waits until every node sees a whole, healthy cluster.
func (c *RedisCluster) create(ctx context.Context) error {
	per := 16384 / len(c.nodes)
	for i, n := range c.nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.nodes)-1 {
			hi = 16383
		}
		if err := n.client.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", n.addr, err)
		}
		if err := n.client.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", n.addr, err)
		}
	}
	for _, n := range c.nodes[1:] {
		host, port, _ := net.SplitHostPort(n.addr)
		if err := c.nodes[0].client.Do(ctx, "CLUSTER", "MEET", host, port, n.bus).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", n.addr, err)
		}
	}
	return c.waitConsistent(ctx)
}

// waitConsistent waits until every node says cluster_state:ok, knows
// every node and sees each slot where every other node sees it.
func (c *RedisCluster) waitConsistent(ctx context.Context) error {
	for {
		err := c.consistent(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster did not settle: %v", err)
		case <-time.After(50 * time.Millisecond): // gossip has no event to wait on
		}
	}
}

func (c *RedisCluster) consistent(ctx context.Context) error {
	var first string
	for _, n := range c.nodes {
		info, err := n.client.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		want := []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:" + strconv.Itoa(len(c.nodes))}
		for _, w := range want {
			if !strings.Contains(info, w+"\r\n") {
				return fmt.Errorf("%s: no %s", n.addr, w)
			}
		}
		slots, err := n.client.ClusterSlots(ctx).Result()
		if err != nil {
			return err
		}
		view := slotView(slots)
		if first == "" {
			first = view
		} else if view != first {
			return fmt.Errorf("%s sees the slots as %s, %s as %s", n.addr, view, c.nodes[0].addr, first)
		}
	}
	return nil
}

// slotView is CLUSTER SLOTS in a comparable form.
func slotView(slots []redis.ClusterSlot) string {
	var s []string
	for _, sl := range slots {
		s = append(s, fmt.Sprintf("%d-%d@%s", sl.Start, sl.End, sl.Nodes[0].Addr))
	}
	slices.Sort(s) // CLUSTER SLOTS's order is by node, not by slot
	return strings.Join(s, ",")
}

// Addrs are the nodes' addresses.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr
	}
	return out
}

// Seeds is the nodes' addresses as --redis-addr takes them with
// --redis-cluster: "host:port,host:port,...".
func (c *RedisCluster) Seeds() string { return strings.Join(c.Addrs(), ",") }

// Node is a client of the node at addr alone (no redirections), closed
// with the cluster.
func (c *RedisCluster) Node(addr string) *redis.Client {
	c.t.Helper()
	return c.nodeAt(addr).client
}

// Slot is key's hash slot (CLUSTER KEYSLOT: its hash tag's, if it has one).
func (c *RedisCluster) Slot(key string) int {
	c.t.Helper()
	s, err := c.nodes[0].client.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		c.t.Fatalf("testenv: CLUSTER KEYSLOT %s: %v", key, err)
	}
	return int(s)
}

// Owner is the address of the master serving slot, as the first node
// sees it.
func (c *RedisCluster) Owner(slot int) string {
	c.t.Helper()
	slots, err := c.nodes[0].client.ClusterSlots(context.Background()).Result()
	if err != nil {
		c.t.Fatalf("testenv: CLUSTER SLOTS: %v", err)
	}
	for _, s := range slots {
		if slot >= int(s.Start) && slot <= int(s.End) {
			return s.Nodes[0].Addr
		}
	}
	c.t.Fatalf("testenv: slot %d is served by no node", slot)
	return ""
}

// Migration is a control moving one slot between masters, the way
// redis-cli --cluster reshard does, one step at a time so a test can let
// traffic run between the steps.
type Migration struct {
	c        *RedisCluster
	slot     int
	from, to *clusterNode
	Moved    int // keys moved so far
}

// StartMigration marks slot as migrating from its owner to the master at
// to (CLUSTER SETSLOT IMPORTING on to, MIGRATING on the owner). From then
// on the owner answers ASK for the slot's keys it no longer has, and
// TRYAGAIN to a command whose keys are split between the two.
func (c *RedisCluster) StartMigration(slot int, to string) *Migration {
	c.t.Helper()
	ctx := context.Background()
	m := &Migration{c: c, slot: slot, from: c.nodeAt(c.Owner(slot)), to: c.nodeAt(to)}
	if m.from == m.to {
		c.t.Fatalf("testenv: slot %d is on %s already", slot, to)
	}
	if err := m.to.client.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.from.id).Err(); err != nil {
		c.t.Fatalf("testenv: CLUSTER SETSLOT %d IMPORTING on %s: %v", slot, to, err)
	}
	if err := m.from.client.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.to.id).Err(); err != nil {
		c.t.Fatalf("testenv: CLUSTER SETSLOT %d MIGRATING on %s: %v", slot, m.from.addr, err)
	}
	return m
}

func (c *RedisCluster) nodeAt(addr string) *clusterNode {
	for _, n := range c.nodes {
		if n.addr == addr {
			return n
		}
	}
	c.t.Fatalf("testenv: no cluster node %s", addr)
	return nil
}

// Step moves up to batch of the slot's keys still on the old owner (one
// CLUSTER GETKEYSINSLOT and one MIGRATE), and reports how many remain
// there. Keys written to the old owner meanwhile are moved by later steps.
func (m *Migration) Step(batch int) (left int) {
	m.c.t.Helper()
	ctx := context.Background()
	keys, err := m.from.client.ClusterGetKeysInSlot(ctx, m.slot, batch).Result()
	if err != nil {
		m.c.t.Fatalf("testenv: CLUSTER GETKEYSINSLOT %d on %s: %v", m.slot, m.from.addr, err)
	}
	if len(keys) > 0 {
		host, port, _ := net.SplitHostPort(m.to.addr)
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := m.from.client.Do(ctx, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
			m.c.t.Fatalf("testenv: MIGRATE %d keys of slot %d to %s: %v", len(keys), m.slot, m.to.addr, err)
		}
		m.Moved += len(keys)
	}
	n, err := m.from.client.ClusterCountKeysInSlot(ctx, m.slot).Result()
	if err != nil {
		m.c.t.Fatalf("testenv: CLUSTER COUNTKEYSINSLOT %d on %s: %v", m.slot, m.from.addr, err)
	}
	return int(n)
}

// Finish moves the keys left and gives the slot to the new owner: CLUSTER
// SETSLOT NODE on the new owner, the old one, then every other master (the
// order redis-cli uses), and waits until every node sees it so.
func (m *Migration) Finish(batch int) {
	m.c.t.Helper()
	for m.Step(batch) > 0 {
	}
	ctx := context.Background()
	order := []*clusterNode{m.to, m.from}
	for _, n := range m.c.nodes {
		if n != m.to && n != m.from {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := n.client.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.to.id).Err(); err != nil {
			m.c.t.Fatalf("testenv: CLUSTER SETSLOT %d NODE on %s: %v", m.slot, n.addr, err)
		}
	}
	sctx, cancel := startCtx()
	defer cancel()
	if err := m.c.waitConsistent(sctx); err != nil {
		m.c.t.Fatalf("testenv: after moving slot %d: %v", m.slot, err)
	}
}

// close stops every node and removes its directory.
func (c *RedisCluster) close() {
	for _, n := range c.nodes {
		n.client.Close()
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(stopTimeout):
			n.cmd.Process.Kill()
			<-n.exited
		}
		os.RemoveAll(n.dir)
	}
}
