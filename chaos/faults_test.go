package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/queue"
)

// fault is one way of breaking the bed. run breaks it and waits until it
// works again (or fails), and says what it measured.
type fault struct {
	name string
	run  func(b *bed) (measured string, failover time.Duration, err error)
}

// outcome is what a step (one fault, or several at once) did.
type outcome struct {
	Step             string
	Start, End       time.Time
	Measured         []string
	RelayFailover    time.Duration
	CoordFailover    time.Duration
	Requests, Failed int
	Err              error
}

// failoverTimeout bounds a lock takeover after kill -9: Consul invalidates
// the session up to 2xTTL after the last renew, and the standby's retry
// wait and a loaded machine come on top.
const failoverTimeout = 2*lockTTL + 20*time.Second

// killLockHolder kills the holder of a Consul lock with SIGKILL, measures
// until another process holds it, then starts the killed one again (it
// stands by).
func killLockHolder(b *bed, key, what string) (string, time.Duration, error) {
	h := b.holder(key)
	if h == nil {
		if _, err := waitUntil(failoverTimeout, "a "+what+" to hold the lock", func() bool { return b.holder(key) != nil }); err != nil {
			return "", 0, err
		}
		h = b.holder(key)
	}
	at := h.kill9()
	var next *part
	_, err := waitUntil(failoverTimeout, "another "+what+" to take the lock", func() bool {
		next = b.holder(key)
		return next != nil && next != h
	})
	took := time.Since(at)
	if err != nil {
		return "", took, err
	}
	if err := h.restart(); err != nil {
		return "", took, err
	}
	return fmt.Sprintf("%s lock: %s -> %s in %s", what, h.name, next.name, took.Round(100*time.Millisecond)), took, nil
}

var (
	faultRelay = fault{"kill -9 the active relay", func(b *bed) (string, time.Duration, error) {
		m, took, err := killLockHolder(b, relayLock, "relay")
		if err == nil {
			err = b.waitFlow("relaying after the failover")
		}
		return m, took, err
	}}
	faultCoordinator = fault{"kill -9 the leader coordinator", func(b *bed) (string, time.Duration, error) {
		return killLockHolder(b, coordLock, "coordinator")
	}}
	faultRedis = fault{"stop Redis 2s, restart it", func(b *bed) (string, time.Duration, error) {
		b.stopRedis()
		time.Sleep(2 * time.Second) // the outage's length, a parameter of the fault
		start := b.restartRedis()
		err := b.waitFlow("jobs to flow after Redis restarted")
		return fmt.Sprintf("flowing %s after restart", time.Since(start).Round(100*time.Millisecond)), 0, err
	}}
	faultConsul = fault{"restart the Consul agent", func(b *bed) (string, time.Duration, error) {
		start := time.Now()
		b.consul.Restart()
		var ms []string
		for _, l := range []struct{ key, what string }{{relayLock, "relay"}, {coordLock, "coordinator"}} {
			if _, err := waitUntil(failoverTimeout, "a "+l.what+" to hold the lock again", func() bool { return b.holder(l.key) != nil }); err != nil {
				return "", 0, err
			}
			ms = append(ms, fmt.Sprintf("%s locked again %s after the restart began", l.what, time.Since(start).Round(100*time.Millisecond)))
		}
		err := b.waitFlow("jobs to flow after the Consul restart")
		return strings.Join(ms, "; "), 0, err
	}}
	// faultRedisMidAck stops Redis while handlers have run and their
	// answers are on the way, so the workers' acks meet a Redis that is down.
	faultRedisMidAck = fault{"stop Redis 2s as jobs finish, restart it", func(b *bed) (string, time.Duration, error) {
		release := b.ledger.hold()
		_, err := waitUntil(10*time.Second, "runs to be held", func() bool { return b.ledger.busy(b.workers[0].who()) || b.ledger.busy(b.workers[1].who()) })
		b.stopRedis()
		release()
		if err != nil {
			b.restartRedis()
			return "", 0, err
		}
		time.Sleep(2 * time.Second) // the outage's length, a parameter of the fault
		b.restartRedis()
		return "", 0, b.waitFlow("jobs to flow after Redis restarted")
	}}
	faultLeaders = fault{"move every Kafka partition's leader", func(b *bed) (string, time.Duration, error) {
		c := b.kafka.Cluster()
		for _, t := range []string{topic, topic + ".dlq"} {
			for p := int32(0); p < kafkaPartitions; p++ {
				l := c.LeaderFor(t, p)
				if err := c.MoveTopicPartition(t, p, liveNode(b, l+1)); err != nil {
					return "", 0, err
				}
			}
		}
		c.RehashCoordinators()
		err := b.waitFlow("jobs to flow after the leader moves")
		return "", 0, err
	}}
	faultBroker = fault{"remove a Kafka broker", func(b *bed) (string, time.Duration, error) {
		node := b.kafka.Cluster().LeaderFor(topic, 0)
		if err := b.kafka.Cluster().RemoveNode(node); err != nil {
			return "", 0, err
		}
		b.removed = append(b.removed, node)
		err := b.waitFlow("jobs to flow after the broker left")
		return fmt.Sprintf("removed node %d", node), 0, err
	}}
	faultPause = fault{"pause the relay's rate, resume", func(b *bed) (string, time.Duration, error) {
		kv := b.consul.Client().KV()
		key := "sluice/" + stage + "/relay/" + topic + "/rate"
		if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: []byte(`{"paused": true}`)}, nil); err != nil {
			return "", 0, err
		}
		relayed := max(0, b.funnel(queue.StageRelayed))
		took, err := waitUntil(20*time.Second, "the relay to pause", func() bool {
			h := b.holder(relayLock)
			if h == nil {
				return false
			}
			v, ok := h.metric("sluice_relay_rate_paused", `topic="`+topic+`"`)
			return ok && v == 1
		})
		if err != nil {
			return "", 0, err
		}
		// While paused, jobs pile up in Kafka and nothing is relayed once
		// the batch in hand is written: the relayed counter stands still
		// while the gate takes 2 more batches.
		var stalled int
		_, err = waitUntil(15*time.Second, "the relayed counter to stand still while paused", func() bool {
			before, accepted := b.funnel(queue.StageRelayed), b.gateAccepted()
			if before < 0 {
				return false // Redis is down (a mixed step)
			}
			if _, err := waitUntil(10*time.Second, "the gate to take more jobs", func() bool { return b.gateAccepted() > accepted+2*batchSize }); err != nil {
				return false
			}
			stalled = b.funnel(queue.StageRelayed)
			return stalled == before
		})
		if err != nil {
			return "", 0, err
		}
		if _, err := kv.Delete(key, nil); err != nil {
			return "", 0, err
		}
		err = b.waitFlow("relaying to resume")
		return fmt.Sprintf("paused %s after the KV write (then finished its batch in hand: %d jobs); relayed 0 while paused", took.Round(100*time.Millisecond), stalled-relayed), 0, err
	}}
	faultWorker = fault{"kill -9 a worker mid-job", func(b *bed) (string, time.Duration, error) {
		b.mu.Lock()
		w := b.workers[b.nextWorker%len(b.workers)]
		b.nextWorker++
		b.mu.Unlock()
		// Kill it while the ledger holds one of its calls: mid-job.
		who := w.who()
		deadline := time.Now().Add(failoverTimeout)
		for !b.ledger.busy(who) {
			if time.Now().After(deadline) {
				return "", 0, fmt.Errorf("%s ran no job for %s", who, failoverTimeout)
			}
			time.Sleep(time.Millisecond)
		}
		w.kill9()
		if err := w.restart(); err != nil {
			return "", 0, err
		}
		return w.name + " killed and restarted", 0, b.waitFlow("jobs to flow after the worker restart")
	}}
	// faultGate kills the second gate (the canaries go through the first)
	// with SIGKILL while batches flow, so some die mid-request: the load
	// resends them to the other gate with the same ids, the relay dedupes
	// them, and the killed gate's counters start again at 0 (sluice stats
	// says so instead of flagging).
	faultGate = fault{"kill -9 a gate", func(b *bed) (string, time.Duration, error) {
		g := b.gates[1]
		at := g.kill9()
		if err := g.restart(); err != nil {
			return "", 0, err
		}
		down := time.Since(at)
		return fmt.Sprintf("%s killed, ready again after %s", g.name, down.Round(100*time.Millisecond)), 0, b.waitFlow("jobs to flow after the gate restart")
	}}
)

// liveNode is the first broker at or after n (mod 3) that was not removed.
func liveNode(b *bed, n int32) int32 {
	for i := range int32(3) {
		c := (n + i) % 3
		removed := false
		for _, r := range b.removed {
			removed = removed || r == c
		}
		if !removed {
			return c
		}
	}
	return n % 3
}

// waitFlow waits until jobs move through the whole pipeline: the funnel's
// relayed and completed counters both grow.
func (b *bed) waitFlow(what string) error {
	relayed, completed := b.funnel(queue.StageRelayed), b.funnel(queue.StageCompleted)
	_, err := waitUntil(failoverTimeout, what, func() bool {
		return b.funnel(queue.StageRelayed) > relayed && b.funnel(queue.StageCompleted) > completed
	})
	return err
}

// funnel sums a stage's counter over the partitions (-1 while Redis is
// unreachable).
func (b *bed) funnel(stageName string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := b.redis.Client().Pipeline()
	var cmds []interface{ Val() string }
	for p := range redisPartitions {
		cmds = append(cmds, pipe.HGet(ctx, b.layout.Keys(p).Stats(), "funnel:"+topic+":"+stageName))
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return -1
	}
	sum := 0
	for _, c := range cmds {
		n, _ := strconv.Atoi(c.Val())
		sum += n
	}
	return sum
}

func isNil(err error) bool { return err != nil && err.Error() == "redis: nil" }

// gateAccepted sums the gates' accepted jobs.
func (b *bed) gateAccepted() int {
	sum := 0.0
	for _, g := range b.gates {
		v, _ := g.metric("sluice_gate_jobs_total", `topic="`+topic+`"`, `outcome="accepted"`)
		sum += v
	}
	return int(sum)
}

// runStep runs faults at once, and measures the gate's errors meanwhile.
func runStep(b *bed, l *loader, faults ...fault) outcome {
	o := outcome{Start: time.Now()}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for i, f := range faults {
		if i > 0 {
			o.Step += " + "
		}
		o.Step += f.name
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, took, err := f.run(b)
			mu.Lock()
			defer mu.Unlock()
			if m != "" {
				o.Measured = append(o.Measured, m)
			}
			switch f.name {
			case faultRelay.name:
				o.RelayFailover = took
			case faultCoordinator.name:
				o.CoordFailover = took
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
			}
		}()
	}
	wg.Wait()
	// The gate's error rate covers the fault and what follows it: the
	// window ends after 10 more requests (while the load runs).
	faultsDone := time.Now()
	waitUntil(30*time.Second, "more requests after the fault", func() bool {
		n, _ := l.window(faultsDone, time.Now())
		return n >= 10 || l.finished()
	})
	o.End = time.Now()
	o.Err = errors.Join(errs...)
	o.Requests, o.Failed = l.window(o.Start, o.End)
	return o
}
