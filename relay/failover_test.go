package relay_test

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestKillNineTheHolderMidStream runs two relay processes on one topic,
// kills the holder with SIGKILL while jobs flow, and checks that the other
// takes over within TTL (up to 2x: Consul's session timer) plus lock-delay,
// and that every job ends up in Redis exactly once.
func TestKillNineTheHolderMidStream(t *testing.T) {
	b := newBed(t)
	bin := testenv.BuildSluice(t)
	const ttl, lockDelay = 10 * time.Second, time.Second
	procs := map[int]*exec.Cmd{}
	for i := range 2 {
		cmd := exec.Command(bin, "relay",
			"--listen", "127.0.0.1:0", "--stage", b.layout.Stage, "--topics", topic,
			"--redis-partitions", strconv.Itoa(b.layout.Partitions),
			"--kafka-brokers", strings.Join(b.kafka.Brokers(), ","),
			"--consul-addr", b.consul.Addr(), "--redis-addr", b.redis.Addr(),
			"--lock-ttl", ttl.String(), "--lock-delay", lockDelay.String(),
			"--commit-every", "200ms", "--batch-size", "50", "--log-format", "text")
		cmd.Stdout, cmd.Stderr = testWriter{t, "relay" + strconv.Itoa(i)}, testWriter{t, "relay" + strconv.Itoa(i)}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[cmd.Process.Pid] = cmd
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	kv := b.consul.Client().KV()
	lockKey := "sluice/" + b.layout.Stage + "/relay/" + topic + "/lock"
	// holder is the pid written into the lock key by the process holding it.
	holder := func() int {
		pair, _, err := kv.Get(lockKey, nil)
		if err != nil || pair == nil || pair.Session == "" {
			return 0
		}
		_, pid, _ := strings.Cut(string(pair.Value), "/")
		n, _ := strconv.Atoi(pid)
		return n
	}
	testenv.WaitFor(t, 20*time.Second, "a relay to hold the lock", func() bool { return holder() != 0 })
	first := holder()
	if procs[first] == nil {
		t.Fatalf("the lock holder %d is not one of the relays", first)
	}

	// Jobs flow while the holder dies.
	b.produce(t, 0, 2000)
	testenv.WaitFor(t, 20*time.Second, "relaying to start", func() bool { jobs, _, _ := b.counts(t); return jobs > 0 })
	killed := time.Now()
	if err := procs[first].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	procs[first].Wait()
	b.produce(t, 2000, 2000)

	testenv.WaitFor(t, 2*ttl+lockDelay+10*time.Second, "the standby to take over", func() bool {
		h := holder()
		return h != 0 && h != first
	})
	took := time.Since(killed)
	t.Logf("failover after kill -9 took %s (TTL %s, lock-delay %s)", took.Round(100*time.Millisecond), ttl, lockDelay)
	// Consul's session timer fires at up to 2xTTL after the last renew;
	// allow the standby's retry wait and a loaded machine on top.
	if took > 2*ttl+lockDelay+5*time.Second {
		t.Fatalf("failover took %s, more than 2xTTL + lock-delay (+5s slack)", took)
	}
	b.waitRelayed(t, 4000, 60*time.Second)
}
