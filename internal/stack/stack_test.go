package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"golang.org/x/sys/unix"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func TestCheckAddrFree(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)

	err = CheckAddrFree(addr, "redis", "--redis-addr")
	want := "port " + port + " (redis) is already in use: stop the other process or pass --redis-addr"
	if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("CheckAddrFree on a taken port = %v, want %q wrapping ErrAddrInUse", err, want)
	}
	ln.Close()
	if err := CheckAddrFree(addr, "redis", "--redis-addr"); err != nil {
		t.Fatalf("CheckAddrFree on a free port: %v", err)
	}
}

func TestRedisMissingBinary(t *testing.T) {
	_, err := StartRedis(testCtx(t), RedisConfig{Bin: "/nonexistent/redis-server", Addr: freeAddr(t), Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "apt-get install redis-server") {
		t.Fatalf("err = %v, want the how-to-install message", err)
	}
}

func TestFindConsulMissing(t *testing.T) {
	t.Setenv("SLUICE_CONSUL_BIN", "/nonexistent/consul")
	_, err := FindConsul()
	if err == nil || !strings.Contains(err.Error(), "make consul") {
		t.Fatalf("err = %v, want the how-to-build message", err)
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root + "/internal/stack"); err != nil {
		t.Fatalf("ModuleRoot = %s, which has no internal/stack: %v", root, err)
	}
}

// A taken port makes redis exit at once; the error must say why and be
// recognizable so callers choosing ports can retry.
func TestRedisAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = StartRedis(testCtx(t), RedisConfig{Addr: ln.Addr().String(), Dir: t.TempDir()})
	if !errors.Is(err, ErrAddrInUse) || !strings.Contains(err.Error(), "last output") {
		t.Fatalf("err = %v, want ErrAddrInUse with the log tail", err)
	}
}

func TestRedisStopKillRestart(t *testing.T) {
	ctx := testCtx(t)
	log := new(syncBuffer)
	r, err := StartRedis(ctx, RedisConfig{Addr: freeAddr(t), Dir: t.TempDir(), AOF: true, Stdout: log})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Kill()
	if !r.Running() {
		t.Fatal("not running after start")
	}
	// The line may still be in the pipe when PING already answers.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(log.String(), "Ready to accept connections"); {
		if time.Now().After(deadline) {
			t.Fatalf("the log given as Stdout has no ready line:\n%s", log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if r.Running() {
		t.Fatal("running after Kill")
	}
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if r.Running() {
		t.Fatal("running after Stop")
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := CheckAddrFree(r.Addr(), "redis", ""); err != nil {
		t.Fatalf("port still taken after Stop: %v", err)
	}
}

// syncBuffer is written by the child's output copier and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Children die with us even when we are killed with SIGKILL: the helper
// process below starts redis and waits to be killed.
func TestChildDiesWithParent(t *testing.T) {
	if os.Getenv("STACK_ORPHAN_HELPER") == "1" {
		r, err := StartRedis(context.Background(), RedisConfig{Addr: os.Getenv("STACK_ADDR"), Dir: os.Getenv("STACK_DIR")})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("pid", r.cur().cmd.Process.Pid)
		select {}
	}
	// Orphans go to the nearest subreaper. Be it, so that we can reap the
	// killed redis instead of leaving a zombie where init does not reap
	// (as in some containers).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithParent$")
	cmd.Env = append(os.Environ(), "STACK_ORPHAN_HELPER=1", "STACK_ADDR="+freeAddr(t), "STACK_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "pid ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q, %v", line, err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	cmd.Process.Kill() // SIGKILL: no deferred cleanup runs in the helper
	cmd.Wait()

	// Pdeathsig kills redis as its parent dies; it is then our orphan to
	// reap. A redis that survived would be running, not exited.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.ECHILD) {
			// Not our child: it was reaped before it could become our
			// orphan (CI saw this once). What the test is about still
			// holds if no such process is left.
			if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				return
			}
			got = 0
		} else if err != nil {
			t.Fatalf("waiting for redis %d: %v", pid, err)
		}
		if got == pid {
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("redis exited with %v, want killed by SIGKILL", ws)
			}
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("redis %d still alive after its parent was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConsulStopRestart(t *testing.T) {
	bin, err := FindConsul()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	c, err := StartConsul(ctx, ConsulConfig{Bin: bin, HTTPAddr: freeAddr(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if c.Running() {
		t.Fatal("running after Stop")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ready(ctx); err != nil {
		t.Fatalf("not ready after Restart: %v", err)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := CheckAddrFree(c.HTTPAddr(), "consul", ""); err != nil {
		t.Fatalf("port still taken after Kill: %v", err)
	}
}

// kfake only seeds topics when DataDir holds no state, so topics added to the
// config between runs must still be created, and existing ones kept.
func TestKafkaTopicsAcrossReload(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	k, err := StartKafka(ctx, KafkaConfig{DataDir: dir, Topics: map[string]int32{"a": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.CreateTopic(ctx, "a", 2); !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("creating an existing topic: %v", err)
	}
	k.Close()
	k.Close() // idempotent
	if err := k.CreateTopic(ctx, "c", 1); err == nil {
		t.Fatal("CreateTopic on a closed cluster succeeded")
	}

	k, err = StartKafka(ctx, KafkaConfig{DataDir: dir, Topics: map[string]int32{"a": 5, "b": 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if n := len(k.Cluster().PartitionInfos("a")); n != 2 {
		t.Errorf("topic a has %d partitions after reload, want the persisted 2", n)
	}
	if n := len(k.Cluster().PartitionInfos("b")); n != 3 {
		t.Errorf("topic b has %d partitions, want 3", n)
	}

	before := k.Brokers()
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := k.Brokers(); !slices.Equal(got, before) {
		t.Errorf("brokers %v after Restart, want the same %v", got, before)
	}
	if n := len(k.Cluster().PartitionInfos("b")); n != 3 {
		t.Errorf("topic b has %d partitions after Restart, want 3", n)
	}

	noDir, err := StartKafka(ctx, KafkaConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer noDir.Close()
	if err := noDir.Restart(ctx); err == nil {
		t.Error("Restart without DataDir succeeded")
	}
}

// FreePort stays out of the kernel's ephemeral range, where outgoing
// connections take their local ports and could take the one it picked.
func TestFreePortAvoidsTheEphemeralRange(t *testing.T) {
	lo, ok := ephemeralLow()
	if !ok {
		t.Fatal("cannot read /proc/sys/net/ipv4/ip_local_port_range on this Linux machine")
	}
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if lo > freeLow+1000 && (port < freeLow || port >= lo) {
			t.Fatalf("port %d, want it in [%d, %d): below the ephemeral range", port, freeLow, lo)
		}
	}
}

// A port FreePort returned is not returned again for a while, to this
// process or another, though nothing listens on it yet.
func TestFreePortDoesNotHandOutAPortTwice(t *testing.T) {
	if lo, ok := ephemeralLow(); !ok || lo <= freeLow+1000 {
		t.Skip("no room below the ephemeral range: FreePort falls back to :0")
	}
	seen := map[int]bool{}
	for range 200 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}

// A SASL setting kfake cannot serve is refused with the field at fault,
// instead of a cluster nobody can log in to.
func TestKafkaSASLSettingsChecked(t *testing.T) {
	for _, sasl := range []KafkaSASL{{Mechanism: "GSSAPI", User: "u", Password: "p"}, {Mechanism: "PLAIN", User: "u"}} {
		k, err := StartKafka(context.Background(), KafkaConfig{SASL: sasl})
		if err == nil {
			k.Close()
			t.Errorf("StartKafka with SASL %+v: no error", sasl)
		} else if !strings.Contains(err.Error(), "KafkaConfig.SASL") {
			t.Errorf("StartKafka with SASL %+v: %v, want it to name KafkaConfig.SASL", sasl, err)
		}
	}
}
