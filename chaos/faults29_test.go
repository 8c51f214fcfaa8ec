package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The faults of issue 29: what trusted systems' tests break (Jepsen's
// paused and partitioned processes, Kafka's deleted topics, a disk that
// refuses writes) and the suite had not. Each names its invariant in
// docs/chaos.md; the verdict judges the run's jobs as a whole.

// killAttempts is the max_attempts of a job whose handler kills its
// worker: it must be dead within that many runs.
const killAttempts = 3

// misconfFor is how long Redis refuses writes in faultMisconf.
const misconfFor = 10 * time.Second

// faultJobs numbers the jobs the faults post themselves, apart from the
// load's.
var faultJobs struct {
	sync.Mutex
	n int
}

func faultJob(k kind, maxAttempts int) jobSpec {
	faultJobs.Lock()
	defer faultJobs.Unlock()
	faultJobs.n++
	return jobSpec{N: 900_000_000 + faultJobs.n, Kind: k, MaxAtt: maxAttempts}
}

var (
	// faultKillJob posts a job whose handler kills the worker that runs it
	// (the ledger kills the calling incarnation with SIGKILL; the bed
	// starts it again). It must be dead within killAttempts runs, with an
	// error that says its worker died running it, and jobs go on flowing.
	faultKillJob = fault{"a job that kills its worker", func(b *bed) (string, time.Duration, error) {
		o, err := b.load.postOne(context.Background(), faultJob(kindKill, killAttempts))
		if err != nil {
			return "", 0, err
		}
		start := time.Now()
		var rec record
		var calls int
		_, err = waitUntil(killAttempts*(lease+30*time.Second), "the killing job to be dead", func() bool {
			calls = b.ledger.calls(o.ID)
			recs, rerr := records(b, []op{*o})
			if rerr != nil {
				return false
			}
			rec = recs[o.ID]
			return rec.State == "dead" || calls > killAttempts
		})
		m := fmt.Sprintf("%s: %d runs, state %q after %s, last error %q", o.ID, calls, rec.State, time.Since(start).Round(100*time.Millisecond), rec.LastError)
		switch {
		case err != nil:
			return m, 0, err
		case calls > killAttempts:
			return m, 0, fmt.Errorf("the job ran %d times, more than its max_attempts %d: the reaper does not make a job that kills its worker dead", calls, killAttempts)
		case !strings.Contains(strings.ToLower(rec.LastError), "died"):
			return m, 0, fmt.Errorf("the job is dead, but its last error %q does not say its worker died running it", rec.LastError)
		}
		b.mu.Lock()
		bg := errors.Join(b.bgErrs...)
		b.mu.Unlock()
		if bg != nil {
			return m, 0, bg
		}
		return m, 0, b.waitFlow("jobs to flow after the killing job")
	}}

	// faultMisconf makes the real Redis answer MISCONF to every write for
	// misconfFor: its RDB snapshot fails (a directory stands where the
	// dump file goes, so the rename fails) while save points are set and
	// stop-writes-on-bgsave-error is on. Then it is put back and a
	// snapshot succeeds. No job may be dead-lettered for it, and no ack or
	// key record dropped.
	faultMisconf = fault{"Redis refuses writes (MISCONF) 10s", func(b *bed) (string, time.Duration, error) {
		ctx := context.Background()
		rc := b.redis.Client()
		get := func(name string) (string, error) {
			v, err := rc.ConfigGet(ctx, name).Result()
			if err != nil {
				return "", fmt.Errorf("CONFIG GET %s: %w", name, err)
			}
			return v[name], nil
		}
		dir, err := get("dir")
		if err != nil {
			return "", 0, err
		}
		file, err := get("dbfilename")
		if err != nil {
			return "", 0, err
		}
		save, err := get("save")
		if err != nil {
			return "", 0, err
		}
		stopWrites, err := get("stop-writes-on-bgsave-error")
		if err != nil {
			return "", 0, err
		}
		dump := filepath.Join(dir, file)
		aside := dump + ".chaos"
		if _, err := os.Stat(dump); err == nil {
			if err := os.Rename(dump, aside); err != nil {
				return "", 0, err
			}
			defer os.Rename(aside, dump)
		}
		if err := os.Mkdir(dump, 0o755); err != nil {
			return "", 0, err
		}
		defer os.RemoveAll(dump)
		if err := rc.ConfigSet(ctx, "stop-writes-on-bgsave-error", "yes").Err(); err != nil {
			return "", 0, err
		}
		if err := rc.ConfigSet(ctx, "save", "3600 1").Err(); err != nil {
			return "", 0, err
		}
		restore := func() error {
			os.RemoveAll(dump)
			if err := bgsaveScheduled(ctx, rc); err != nil && !strings.Contains(err.Error(), "in progress") {
				return fmt.Errorf("BGSAVE to restore: %w", err)
			}
			_, err := waitUntil(30*time.Second, "a snapshot to succeed again", func() bool { return bgsaveStatus(b) == "ok" })
			rc.ConfigSet(ctx, "save", save)
			rc.ConfigSet(ctx, "stop-writes-on-bgsave-error", stopWrites)
			return err
		}
		if err := bgsaveScheduled(ctx, rc); err != nil {
			restore()
			return "", 0, fmt.Errorf("BGSAVE: %w", err)
		}
		if _, err := waitUntil(30*time.Second, "the snapshot to fail", func() bool { return bgsaveStatus(b) == "err" }); err != nil {
			restore()
			return "", 0, err
		}
		end := b.begin("", "Redis refused writes (MISCONF): the lease was reaped")
		probe := rc.Set(ctx, "sluice:chaos-probe", "1", time.Minute).Err()
		dead := b.relayOutcome("dead_lettered")
		time.Sleep(misconfFor) // the outage's length, a parameter of the fault
		err = restore()
		end()
		if probe == nil || !strings.Contains(probe.Error(), "MISCONF") {
			return "", 0, fmt.Errorf("Redis did not refuse a write during the fault: SET answered %v", probe)
		}
		if err != nil {
			return "", 0, err
		}
		m := fmt.Sprintf("writes refused (%s) for %s", strings.SplitN(probe.Error(), " ", 2)[0], misconfFor)
		if err := b.waitFlow("jobs to flow after Redis took writes again"); err != nil {
			return m, 0, err
		}
		if d := b.relayOutcome("dead_lettered") - dead; d > 0 {
			return m, 0, fmt.Errorf("the relays dead-lettered %d jobs while Redis refused writes", d)
		}
		return m, 0, nil
	}}

	// faultZombieRelay stops the relay that holds the lock with SIGSTOP
	// past its session's TTL, lets the other take the lock and relay,
	// then resumes it with SIGCONT: the zombie must write nothing more
	// (the fence refuses it), and it must see it lost the lock.
	//
	// While the zombie runs again the new holder is held still (SIGSTOP,
	// well within its lease, once Redis has read all it sent), so what
	// Redis takes meanwhile is the zombie's alone. Subtracting the new
	// holder's sluice_relay_jobs_total instead cannot tell: it counts a
	// batch only after Redis applied it, and a batch of a holder catching
	// up is thousands of jobs, so the difference swung by thousands either
	// way with no zombie write (it once failed the step with 621).
	faultZombieRelay = fault{"SIGSTOP the active relay past its TTL, SIGCONT (zombie)", func(b *bed) (string, time.Duration, error) {
		h := b.holder(relayLock)
		if h == nil {
			return "", 0, errors.New("no relay holds the lock")
		}
		queued := relayOutcomeOf(h, "queued")
		fenced := relayOutcomeOf(h, "fenced")
		at := time.Now()
		syscall.Kill(h.pid(), syscall.SIGSTOP)
		var next *part
		_, err := waitUntil(failoverTimeout, "another relay to take the lock", func() bool {
			next = b.holder(relayLock)
			return next != nil && next != h
		})
		took := time.Since(at)
		if err == nil {
			// It raised the fence in every partition before this.
			err = b.waitFlow("the new holder to relay")
		}
		thaw := func() {}
		if err == nil {
			thaw, err = b.holdStill(next)
		}
		var before relayWrites
		if err == nil {
			before, err = b.relayWrites()
		}
		cont := time.Now()
		syscall.Kill(h.pid(), syscall.SIGCONT)
		if err != nil {
			thaw()
			return "", took, err
		}
		// The zombie learns it lost the lock once its lease's timer fires,
		// and lets go of it once every write it had under way returned.
		// The new holder's lease (renewed every (TTL-TTL/5)/3) outlasts
		// this wait.
		down, err := waitUntil(zombieLetGo, "the zombie to see it lost the lock while the new holder is held still", func() bool {
			v, ok := h.metric("sluice_relay_lock_held")
			return ok && v == 0
		})
		after, rerr := b.relayWrites()
		thaw()
		err = errors.Join(err, rerr)
		counted, refused := relayOutcomeOf(h, "queued")-queued, relayOutcomeOf(h, "fenced")-fenced
		wrote, fencedRedis := after.accepted-before.accepted, after.fenced-before.fenced
		m := fmt.Sprintf("%s stopped %s; %s took the lock in %s; after SIGCONT the zombie let go of the lock in %s while %s was held still; meanwhile Redis took %d jobs (the zombie's) and refused %d; the zombie's own counters: queued +%d (a batch applied before the SIGSTOP counts here), fenced +%d",
			h.name, cont.Sub(at).Round(100*time.Millisecond), next.name, took.Round(100*time.Millisecond), down.Round(100*time.Millisecond), next.name, wrote, fencedRedis, counted, refused)
		if err != nil {
			return m, took, err
		}
		if wrote > 0 {
			return m, took, fmt.Errorf("the zombie relay wrote %d jobs after SIGCONT (the fence did not refuse them)", wrote)
		}
		return m, took, b.waitFlow("jobs to flow after the zombie resumed")
	}}

	// faultRecreateTopic deletes the job topic and creates it again while
	// jobs flow (the load held back for the moment of the deletion, so
	// that the log read just before is the whole old log). Jobs
	// acknowledged after the recreation must all run; those acknowledged
	// before and not yet relayed are lost with the topic, counted apart.
	faultRecreateTopic = fault{"delete the job topic, create it again", func(b *bed) (string, time.Duration, error) {
		resume := b.load.pause()
		old, err := scanLog(b.kafka.Brokers())
		if err != nil {
			resume()
			return "", 0, fmt.Errorf("reading the log before the deletion: %w", err)
		}
		del, create := kfakeTopicOps(b)
		if a := b.kafka.Real(); a != nil {
			del, create = realTopicOps(a)
		}
		if err := del(); err != nil {
			resume()
			return "", 0, fmt.Errorf("deleting %s: %w", topic, err)
		}
		at := time.Now()
		b.mu.Lock()
		b.deletedAt, b.oldLog = at, old
		b.mu.Unlock()
		end := b.begin("", "the topic was recreated: relayed from the new log")
		defer end()
		if err := create(); err != nil {
			resume()
			return "", 0, fmt.Errorf("creating %s again: %w", topic, err)
		}
		// Real brokers: the gates' topic catalogues may have read the
		// cluster while the topic was gone, and answer 404 until they
		// read it again (at most a second later when asked): the load
		// resumes once both serve it, or every valid job would look
		// refused.
		if b.kafka.IsApache() {
			if _, err := waitUntil(30*time.Second, "both gates to serve the recreated topic", func() bool {
				for _, g := range b.gates {
					if !httpOK("http://" + g.listen + "/v1/topics/" + topic) {
						return false
					}
				}
				return true
			}); err != nil {
				resume()
				return "", 0, err
			}
		}
		b.mu.Lock()
		b.servedAgainAt = time.Now()
		b.mu.Unlock()
		resume()
		ranAfter := b.ranAckedAfter(at)
		took, err := waitUntil(failoverTimeout, "jobs acknowledged after the recreation to run", ranAfter)
		return fmt.Sprintf("%d job records in the old log; the first job acknowledged after the recreation ran %s later", len(old), took.Round(100*time.Millisecond)), 0, err
	}}

	// faultCutRelayConsul cuts the lock holder off from Consul alone
	// (through its proxy): it must step down before its session could
	// have expired, and the other relay take over.
	faultCutRelayConsul = fault{"cut the active relay off from Consul", func(b *bed) (string, time.Duration, error) {
		h := b.holder(relayLock)
		if h == nil {
			return "", 0, errors.New("no relay holds the lock")
		}
		var px *testenv.Proxy
		for i, r := range b.relays {
			if r == h {
				px = b.relayConsul[i]
			}
		}
		at := time.Now()
		px.CutOff()
		down, derr := waitUntil(failoverTimeout, "the cut relay to step down", func() bool {
			v, ok := h.metric("sluice_relay_lock_held")
			return ok && v == 0
		})
		var next *part
		took, err := waitUntil(failoverTimeout, "another relay to take the lock", func() bool {
			next = b.holder(relayLock)
			return next != nil && next != h
		})
		took += down
		queued := relayOutcomeOf(h, "queued")
		if err == nil {
			err = b.waitFlow("the new holder to relay")
		}
		wrote := relayOutcomeOf(h, "queued") - queued
		px.Restore()
		m := fmt.Sprintf("%s stepped down %s after the cut", h.name, down.Round(100*time.Millisecond))
		if next != nil {
			m += fmt.Sprintf("; %s held the lock %s after the cut; the cut relay wrote %d jobs meanwhile", next.name, time.Since(at).Round(100*time.Millisecond), wrote)
		}
		if err = errors.Join(derr, err); err != nil {
			return m, took, err
		}
		if wrote > 0 {
			return m, took, fmt.Errorf("the relay cut off from Consul wrote %d jobs after another took the lock", wrote)
		}
		return m, took, b.waitFlow("jobs to flow after the relay's Consul came back")
	}}

	// faultCutWorkerRedis cuts the last worker off from Redis (through its
	// proxy) for two leases while it runs a slow job's handler: the worker
	// cannot extend its leases, so it must cancel the handler before its
	// lease ends; the jobs it held are reaped and run elsewhere.
	faultCutWorkerRedis = fault{"cut a worker off from Redis for two leases mid-job", func(b *bed) (string, time.Duration, error) {
		w := b.workers[len(b.workers)-1]
		who := w.who()
		// Slow jobs until one runs on this worker.
		deadline := time.Now().Add(failoverTimeout)
		for !b.ledger.slowBusy(who) {
			if time.Now().After(deadline) {
				return "", 0, fmt.Errorf("%s ran no slow job for %s", who, failoverTimeout)
			}
			if _, err := b.load.postOne(context.Background(), faultJob(kindSlow, 0)); err != nil {
				return "", 0, err
			}
			waitUntil(2*time.Second, "a slow job on "+who, func() bool { return b.ledger.slowBusy(who) })
		}
		seen := b.ledger.count()
		end := b.begin(w.name, "its worker was cut off from Redis: the lease was reaped")
		at := time.Now()
		b.workerRedis.CutOff()
		time.Sleep(2 * lease) // the cut's length, a parameter of the fault
		b.workerRedis.Restore()
		end()
		// The slow runs of this worker that the cut caught: each must have
		// been cancelled within a lease of the cut.
		var late []string
		cancelled := 0
		waitUntil(slowRun, "the cut worker's slow runs to end", func() bool { return !b.ledger.slowBusy(who) })
		for _, e := range b.ledger.since(seen) {
			if e.Type != "slow" || e.Who != who || e.At.After(at) {
				continue
			}
			switch {
			case e.Cancelled && e.Answered.Sub(at) <= lease:
				cancelled++
			case e.Cancelled:
				late = append(late, fmt.Sprintf("%s cancelled %s after the cut", e.JobID, e.Answered.Sub(at).Round(10*time.Millisecond)))
			default:
				late = append(late, fmt.Sprintf("%s not cancelled: it ran to a 2xx %s after the cut", e.JobID, e.Answered.Sub(at).Round(10*time.Millisecond)))
			}
		}
		m := fmt.Sprintf("%s cut off %s; %d slow handlers cancelled within a lease", w.name, 2*lease, cancelled)
		if len(late) > 0 {
			return m, 0, fmt.Errorf("a worker that cannot extend its lease must cancel its handler before the lease ends: %s", strings.Join(late, "; "))
		}
		return m, 0, b.waitFlow("jobs to flow after the worker's Redis came back")
	}}

	// faultClockSkew runs the first worker with its clock 5 minutes ahead
	// for three leases: leases are judged by Redis's clock, so it must reap
	// nothing early (the verdict finds any rerun unexplained). The flag
	// is hidden; a binary without it skips the step.
	faultClockSkew = fault{"a worker whose clock is 5 minutes ahead", func(b *bed) (string, time.Duration, error) {
		if !b.workerKnows("--clock-skew=5m") {
			b.t.Log("step skipped: this sluice worker has no --clock-skew flag")
			return "skipped: the worker has no --clock-skew flag", 0, nil
		}
		w := b.workers[0]
		w.mu.Lock()
		w.extra = []string{"--clock-skew=5m"}
		w.mu.Unlock()
		if err := w.killAndRestart(); err != nil {
			return "", 0, err
		}
		err := b.waitFlow("jobs to flow with the skewed worker")
		time.Sleep(3 * lease) // the skew's length, a parameter of the fault
		w.mu.Lock()
		w.extra = nil
		w.mu.Unlock()
		if rerr := w.killAndRestart(); err == nil {
			err = rerr
		}
		return w.name + " ran 5 minutes ahead for " + (3 * lease).String(), 0, err
	}}
)

// bgsaveStatus is Redis's rdb_last_bgsave_status once no snapshot is in
// progress ("" while one is, or when Redis does not answer).
func bgsaveStatus(b *bed) string {
	info, err := b.redis.Client().Info(context.Background(), "persistence").Result()
	if err != nil || strings.Contains(info, "rdb_bgsave_in_progress:1") {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_last_bgsave_status:"); ok {
			return v
		}
	}
	return ""
}

// zombieLetGo is how long faultZombieRelay holds the new holder still
// for the zombie to let go of the lock: with the time Redis takes to read
// what the holder sent, less than the holder's lease window less a renew
// interval.
const zombieLetGo = 3 * time.Second

// relayWrites is what the relays' writes have left in Redis's counters,
// summed over the partitions: accepted, the jobs of the topic's stages
// only a relay counts (relayed, deduplicated, dropped, dead-lettered,
// requeued; user jobs and canaries), and fenced, the jobs the enqueue
// script refused for an old lock token.
type relayWrites struct{ accepted, fenced int }

func (b *bed) relayWrites() (relayWrites, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pipe := b.redis.Client().Pipeline()
	var cmds []*redis.MapStringStringCmd
	for p := range redisPartitions {
		cmds = append(cmds, pipe.HGetAll(ctx, b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Stats()))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return relayWrites{}, fmt.Errorf("reading the partitions' stats: %w", err)
	}
	var w relayWrites
	for _, c := range cmds {
		for field, v := range c.Val() {
			n, _ := strconv.Atoi(v)
			if field == "fenced" {
				w.fenced += n
				continue
			}
			for _, stage := range []string{queue.MilestoneRelayed, queue.MilestoneDeduplicated, queue.MilestoneDropped, queue.MilestoneDeadLettered, queue.MilestoneRequeued} {
				if field == queue.FunnelField(topic, stage, false) || field == queue.FunnelField(topic, stage, true) {
					w.accepted += n
				}
			}
		}
	}
	return w, nil
}

// holdStill stops p with SIGSTOP and waits until Redis has read all p
// sent it: until thaw (SIGCONT), p changes nothing in Redis. A command
// p had only partly sent stays unread until then. On an error p runs
// again, and thaw does nothing.
func (b *bed) holdStill(p *part) (thaw func(), err error) {
	pid := p.pid()
	_, port, err := net.SplitHostPort(b.redis.Addr())
	if err != nil {
		return func() {}, err
	}
	syscall.Kill(pid, syscall.SIGSTOP)
	thaw = func() { syscall.Kill(pid, syscall.SIGCONT) }
	unread, rerr := -1, error(nil)
	_, err = waitUntil(time.Second, "Redis to read all "+p.name+" sent before its SIGSTOP", func() bool {
		if !processStopped(pid) {
			return false
		}
		var conns int
		unread, conns, rerr = unreadByRedis(pid, port)
		if rerr == nil && conns == 0 {
			rerr = errors.New("no connection to Redis found in /proc/net/tcp")
		}
		return rerr == nil && unread == 0
	})
	if err != nil {
		thaw()
		return func() {}, fmt.Errorf("%w (bytes unread: %d; %v)", err, unread, rerr)
	}
	return thaw, nil
}

// processStopped says whether the process is stopped by a signal: state T
// in /proc/<pid>/stat, after the command's name in parentheses.
func processStopped(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(string(stat), ')')
	return err == nil && i >= 0 && i+2 < len(stat) && stat[i+2] == 'T'
}

// unreadByRedis is how many bytes the process has sent to the Redis
// listening on port (decimal) that Redis has not read yet:
// the send queues of its connections to that port and the receive queues
// of their other ends, from /proc/net/tcp{,6}; and how many such
// connections it has.
func unreadByRedis(pid int, port string) (unread, conns int, err error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil {
			if inode, ok := strings.CutPrefix(l, "socket:["); ok {
				inodes[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0, 0, err
	}
	redisPort := fmt.Sprintf("%04X", p)
	type conn struct{ local, remote, queues, inode string }
	var table []conn
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		// sl local_address rem_address st tx_queue:rx_queue ... inode
		for _, line := range strings.Split(string(data), "\n")[1:] {
			if f := strings.Fields(line); len(f) >= 10 {
				table = append(table, conn{f[1][strings.LastIndexByte(f[1], ':')+1:], f[2][strings.LastIndexByte(f[2], ':')+1:], f[4], f[9]})
			}
		}
	}
	qlen := func(c conn, i int) int {
		n, _ := strconv.ParseInt(strings.Split(c.queues, ":")[i], 16, 64)
		return int(n)
	}
	ports := map[string]bool{} // the process's ends of its connections to Redis
	for _, c := range table {
		if inodes[c.inode] && c.remote == redisPort {
			ports[c.local] = true
			unread += qlen(c, 0) // tx_queue
		}
	}
	for _, c := range table {
		if c.local == redisPort && ports[c.remote] {
			unread += qlen(c, 1) // rx_queue
		}
	}
	return unread, len(ports), nil
}

// relayOutcome sums the relays' sluice_relay_jobs_total of an outcome.
func (b *bed) relayOutcome(outcome string) int {
	sum := 0
	for _, r := range b.relays {
		sum += relayOutcomeOf(r, outcome)
	}
	return sum
}

func relayOutcomeOf(r *part, outcome string) int {
	v, _ := r.metric("sluice_relay_jobs_total", `topic="`+topic+`"`, `outcome="`+outcome+`"`)
	return int(v)
}

// ranAckedAfter is a condition: a job of the load acknowledged after t
// ran (the ledger read from now on, as it grows).
func (b *bed) ranAckedAfter(t time.Time) func() bool {
	read := b.ledger.count()
	return func() bool {
		news := b.ledger.since(read)
		read += len(news)
		_, acked, _ := b.load.snapshot()
		for _, e := range news {
			if o, ok := acked[e.JobID]; ok && e.OK && o.AckedAt.After(t) {
				return true
			}
		}
		return false
	}
}

// workerKnows says whether `sluice worker` takes a flag.
func (b *bed) workerKnows(flag string) bool {
	out, _ := exec.Command(b.bin, "worker", flag, "--help").CombinedOutput()
	return !strings.Contains(string(out), "flag provided but not defined")
}

// bgsaveScheduled starts a BGSAVE, or schedules it for when the child
// that runs now (an AOF rewrite) ends: a plain BGSAVE is refused then
// ("Another child process is active"), which once failed the MISCONF step.
func bgsaveScheduled(ctx context.Context, rc *redis.Client) error {
	return rc.Do(ctx, "BGSAVE", "SCHEDULE").Err()
}

// kfakeTopicOps deletes and creates the job topic on kfake.
func kfakeTopicOps(b *bed) (del, create func() error) {
	c := b.kafka.Cluster()
	if c == nil {
		return func() error { return errors.New("no kfake cluster") }, nil
	}
	return func() error { return c.DeleteTopic(topic) },
		func() error { return c.CreateTopic(topic, kafkaPartitions, nil) }
}

// realTopicOps deletes the job topic on real brokers (waiting until none
// lists it) and creates it again (replication factor 3, waiting until
// every partition has a leader).
func realTopicOps(a *stack.ApacheKafka) (del, create func() error) {
	return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
			defer cancel()
			return a.DeleteTopic(ctx, topic)
		}, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
			defer cancel()
			return a.CreateTopic(ctx, topic, kafkaPartitions)
		}
}
