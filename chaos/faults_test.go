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
	// faultRedisKill kills Redis with SIGKILL while jobs flow and starts it
	// again at once from its AOF (appendfsync everysec). What Redis
	// answered is in its AOF in the kernel, so a process crash loses
	// nothing, unless a busy disk made Redis hold AOF writes back (the bed's
	// AOF probe measures that tail); the relay, whose younger writes met a new run_id, goes on
	// from its committed offsets (--durable-after) and the replay is
	// deduplicated.
	faultRedisKill = fault{"kill -9 Redis, restart it", func(b *bed) (string, time.Duration, error) {
		rewinds := b.relayRewinds()
		b.killRedis()
		restarted := time.Now()
		up := b.restartRedis()
		err := b.waitFlow("jobs to flow after Redis was killed")
		m := fmt.Sprintf("up (AOF loaded) %s after the kill, flowing %s later; the relays went back to their committed offsets %d times; the AOF probe: %s",
			up.Sub(restarted).Round(100*time.Millisecond), time.Since(up).Round(100*time.Millisecond), max(0, b.relayRewinds()-rewinds), b.lastOutage().loss)
		return m, 0, err
	}}
	faultConsul = fault{"restart the Consul agent", func(b *bed) (string, time.Duration, error) {
		start := time.Now()
		b.consul.Restart()
		if err := b.restoreConsul(); err != nil {
			return "", 0, err
		}
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
	// faultRedisMidRecord is faultRedisMidAck that also measures how long
	// after Redis answers again the workers record the runs whose handlers
	// answered while it was down: each key's mark must say done:<id>
	// within recordGrace. A worker killed in between runs the key again.
	faultRedisMidRecord = fault{"stop Redis 2s as jobs finish, restart it, time the key records", func(b *bed) (string, time.Duration, error) {
		release := b.ledger.hold()
		// Runs of jobs with a key: a periodic job in the handler alone
		// would leave no key to time (this step once failed so).
		_, err := waitUntil(10*time.Second, "keyed runs to be held", func() bool {
			return b.ledger.busyKeyed(b.workers[0].who()) || b.ledger.busyKeyed(b.workers[1].who())
		})
		seen := b.ledger.count()
		b.stopRedis()
		down := time.Now()
		release()
		if err != nil {
			b.restartRedis()
			return "", 0, err
		}
		time.Sleep(2 * time.Second) // the outage's length, a parameter of the fault
		up := b.restartRedis()
		// The 2xx runs answered while Redis was down, and when each
		// key's mark first says done:<id>.
		var runs []execution
		for _, e := range b.ledger.since(seen) {
			// Only a job with an idempotency key has a mark to record:
			// plain jobs (most of the workload) and periodic ones have none.
			if e.OK && e.Key != "" && e.Answered.After(down) && e.Answered.Before(up) {
				runs = append(runs, e)
			}
		}
		if len(runs) == 0 {
			return "", 0, errors.New("no run was answered while Redis was down")
		}
		recorded := make([]time.Duration, len(runs))
		marks := make([]string, len(runs)) // each key's last mark read
		_, err = waitEvery(20*time.Second, 10*time.Millisecond, "the keys of the runs answered while Redis was down to be recorded", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			pipe := b.redis.Client().Pipeline()
			cmds := make([]interface{ Val() string }, len(runs))
			for i, r := range runs {
				cmds[i] = pipe.Get(ctx, b.idemKey(r.Key))
			}
			if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
				return false
			}
			now, all := time.Since(up), true
			for i, r := range runs {
				marks[i] = cmds[i].Val()
				if recorded[i] == 0 && cmds[i].Val() == "done:"+r.JobID {
					recorded[i] = now
				}
				all = all && recorded[i] > 0
			}
			return all
		})
		var late []string
		slowest := time.Duration(0)
		for i, d := range recorded {
			slowest = max(slowest, d)
			switch {
			case d == 0:
				late = append(late, fmt.Sprintf("%s (key %s, by %s) never, its mark %q", runs[i].JobID, runs[i].Key, runs[i].Who, marks[i]))
			case d > recordGrace:
				late = append(late, fmt.Sprintf("%s after %s", runs[i].JobID, d.Round(10*time.Millisecond)))
			}
		}
		m := fmt.Sprintf("%d runs answered while Redis was down; their keys recorded at most %s after Redis answered (within %s: %d)",
			len(runs), slowest.Round(10*time.Millisecond), recordGrace, len(runs)-len(late))
		if err != nil && len(late) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.Join(late[:min(5, len(late))], ", "))
		} else if len(late) > 0 {
			err = fmt.Errorf("%d keys recorded later than %s after Redis answered again (a worker killed meanwhile runs them again): %s",
				len(late), recordGrace, strings.Join(late[:min(5, len(late))], ", "))
		}
		if ferr := b.waitFlow("jobs to flow after Redis restarted"); err == nil {
			err = ferr
		}
		return m, 0, err
	}}
	faultLeaders = fault{"move every Kafka partition's leader", func(b *bed) (string, time.Duration, error) {
		if b.kafka.IsApache() {
			return skipOnApache(b, "move every Kafka partition's leader", "kill -9 the Kafka leader of busy partitions")
		}
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
		if b.kafka.IsApache() {
			return skipOnApache(b, "remove a Kafka broker", "restart a Kafka broker while jobs flow")
		}
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
		relayed := max(0, b.funnel(queue.MilestoneRelayed))
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
			before, accepted := b.funnel(queue.MilestoneRelayed), b.gateAccepted()
			if before < 0 {
				return false // Redis is down (a mixed step)
			}
			if _, err := waitUntil(10*time.Second, "the gate to take more jobs", func() bool { return b.gateAccepted() > accepted+2*batchSize }); err != nil {
				return false
			}
			stalled = b.funnel(queue.MilestoneRelayed)
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
		if err := w.killAndRestart(); err != nil {
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

// skipOnApache skips a kfake-only fault (kfake's leader "moves" point at
// another broker over one shared log) on real brokers, saying so and which
// real fault plays its part.
func skipOnApache(b *bed, what, instead string) (string, time.Duration, error) {
	b.t.Logf("step %q skipped on real brokers: it is kfake's fault injection; %q plays its part", what, instead)
	return fmt.Sprintf("skipped on real brokers (kfake only; %q plays its part)", instead), 0, nil
}

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
	relayed, completed := b.funnel(queue.MilestoneRelayed), b.funnel(queue.MilestoneCompleted)
	_, err := waitUntil(failoverTimeout, what, func() bool {
		return b.funnel(queue.MilestoneRelayed) > relayed && b.funnel(queue.MilestoneCompleted) > completed
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
		cmds = append(cmds, pipe.HGet(ctx, b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Stats(), "funnel:"+topic+":"+stageName))
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

// relayRewinds sums the relays' sluice_relay_rewinds_total: the times a
// relay went back to its committed offsets because Redis restarted under
// writes younger than --durable-after.
func (b *bed) relayRewinds() int {
	sum := 0.0
	for _, r := range b.relays {
		v, _ := r.metric("sluice_relay_rewinds_total")
		sum += v
	}
	return int(sum)
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
			case faultRelay.name, faultZombieRelay.name, faultCutRelayConsul.name:
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
