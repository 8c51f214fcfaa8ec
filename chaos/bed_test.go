package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The bed's fixed parameters. The lock TTL is Consul's minimum; lock-delay 0
// (sent as 1 ms) so that a failover after kill -9 takes TTL to 2xTTL.
const (
	stage           = "chaos"
	topic           = "chaos"
	kafkaPartitions = 6
	redisPartitions = 8
	workersPerPart  = 8
	lockTTL         = 10 * time.Second
	lockDelay       = "0"
	lease           = 3 * time.Second
	// jobTimeout is the workers' --timeout: with the lease, how long an
	// idempotency key's running mark holds (markHold).
	jobTimeout = 10 * time.Second
	markHold   = jobTimeout + lease
	// durableAfter is the relay's --durable-after: it commits a Kafka
	// offset only once Redis has kept the writes before it this long in
	// one life (its AOF is fsynced every second), and relays again from
	// the committed offsets when Redis restarted under younger writes.
	durableAfter = 3 * time.Second
	// recordGrace is how long a worker may take, of time Redis serves, to
	// record a run of an idempotency key after its handler answered: one
	// script call, or the next try once Redis answers again. A worker
	// killed later than that had the time to record the run.
	recordGrace = 500 * time.Millisecond
	// canaryInterval is the coordinators' canary interval (and grace): a
	// path alerts 3 s after its last canary.
	canaryInterval = time.Second
)

// bed is the topology: Redis, Consul and Kafka from testenv, and the sluice
// parts as child processes of the built binary.
type bed struct {
	t      *testing.T
	bin    string
	logDir string
	redis  *testenv.RedisServer
	probe  *aofProbe // measures what a SIGKILL of Redis lost
	consul *testenv.ConsulServer
	kafka  *testenv.KafkaCluster
	ledger *ledger
	layout queue.Keyspace

	gates, relays, workers, coords []*part
	load                           *loader // the run's, for the faults that post jobs of their own

	// workerRedis is the proxy between the last worker and Redis, and
	// relayConsul[i] the one between relay i and Consul: the faults that
	// cut one process off go through them.
	workerRedis *testenv.Proxy
	relayConsul []*testenv.Proxy

	mu         sync.Mutex
	nextWorker int      // the worker the next worker fault kills
	removed    []int32  // Kafka brokers removed
	outages    []outage // Redis's, in order
	// configured are the Consul values the bed set up (the periodic
	// schedule), written again after a Consul restart: the test bed's dev
	// agent comes back empty, as an operator restores a lost Consul's
	// configuration.
	configured map[string][]byte
	// events are the other things the bed did that may make a job run
	// again without a kill (explainRerun).
	events []event
	// deletedAt is when a fault deleted the job topic, and oldLog the job
	// records of the log deleted with it (read just before).
	deletedAt time.Time
	oldLog    map[string]logRecord
	// servedAgainAt is when every gate served the recreated topic again:
	// until then a gate answers 404 for it, and the coordinator skips a
	// periodic slot fired meanwhile (a 404 is a refusal for good).
	servedAgainAt time.Time
	// bgErrs are errors of restarts done in the background (a worker
	// killed by the job it ran).
	bgErrs []error
}

// event is something the bed did to some workers (who: "worker1"; ""
// for all) from..to (zero while it lasts), and how it explains a job run
// again meanwhile.
type event struct {
	who      string
	from, to time.Time
	explains string
}

// begin notes an event that starts now and returns its end.
func (b *bed) begin(who, explains string) (end func()) {
	b.mu.Lock()
	i := len(b.events)
	b.events = append(b.events, event{who: who, from: time.Now(), explains: explains})
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.events[i].to = time.Now()
		b.mu.Unlock()
	}
}

// topicGone is when the job topic was deleted and when every gate served
// it again (zeros if never deleted).
func (b *bed) topicGone() (from, to time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deletedAt, b.servedAgainAt
}

// topicDeletion is when the job topic was deleted (zero if never) and
// what its log held then.
func (b *bed) topicDeletion() (time.Time, map[string]logRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deletedAt, b.oldLog
}

// outage is a time Redis did not serve: from the signal that stopped or
// killed it until it answered PING again after its restart (its AOF
// loaded).
type outage struct {
	down, up time.Time // up is zero while it lasts
	loss     aofLoss   // answered writes the restart did not bring back
}

// part is one sluice process: its command line is rebuilt per incarnation
// (a worker's handlers name their incarnation, so the ledger knows who ran
// what).
type part struct {
	b      *bed
	name   string
	listen string
	args   func(inc int) []string

	// life serialises a kill and the restart after it, which the ledger
	// (a job that kills its worker) and the faults both do.
	life sync.Mutex

	mu     sync.Mutex
	inc    int
	extra  []string // flags added to the next incarnations (clock skew)
	cmd    *exec.Cmd
	done   chan struct{}
	killed map[int]time.Time // incarnation -> when it was killed with SIGKILL
}

func newBed(t *testing.T) *bed { t.Helper(); return newBedWith(t) }

// newBedWith is newBed with more options for its Kafka cluster (real
// brokers, their server properties).
func newBedWith(t *testing.T, kafkaOpts ...testenv.KafkaOption) *bed {
	t.Helper()
	b := &bed{t: t, logDir: t.TempDir(), layout: queue.Keyspace{Stage: stage, Partitions: redisPartitions}}
	bin := make(chan string, 1)
	go func() { bin <- testenv.BuildSluice(t) }()
	b.redis = testenv.Redis(t, testenv.WithAOF(), testenv.WithMaxMemory("512mb"))
	b.probe = startAOFProbe(t, b.redis.Addr())
	b.consul = testenv.Consul(t)
	b.kafka = testenv.Kafka(t, append([]testenv.KafkaOption{testenv.Brokers(3),
		testenv.Topic(topic, kafkaPartitions), testenv.Topic(topic+".dlq", kafkaPartitions), testenv.Topic(topic+".retry", kafkaPartitions)},
		kafkaOpts...)...)
	b.ledger = newLedger(t)
	b.ledger.kill = b.killWorker
	b.workerRedis = testenv.NewProxy(t, b.redis.Addr())
	b.bin = <-bin
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() {
		if t.Failed() {
			b.dumpLogs()
		} else if d := os.Getenv("SLUICE_CHAOS_LOGS"); d != "" {
			os.CopyFS(d, os.DirFS(b.logDir)) // kept for reading when asked, failed or not
		}
	})

	brokers := strings.Join(b.kafka.Brokers(), ",")
	common := []string{"--stage", stage, "--log-format", "text", "--log-level", "warn"}
	redisFlags := []string{"--redis-addr", b.redis.Addr(), "--redis-partitions", strconv.Itoa(redisPartitions)}
	for range 2 {
		b.relayConsul = append(b.relayConsul, testenv.NewProxy(t, b.consul.Addr()))
	}
	for i := range 2 {
		b.gates = append(b.gates, b.newPart(fmt.Sprintf("gate%d", i), func(int) []string {
			return append(slicesConcat(common, redisFlags), "--kafka-brokers", brokers, "--allow-no-auth", "--topics", topic,
				"--produce-timeout", "3s", "--metadata-refresh", "2s", "--retry-after", "1s")
		}, "gate"))
		b.relays = append(b.relays, b.newPart(fmt.Sprintf("relay%d", i), func(int) []string {
			return append(slicesConcat(common, redisFlags), "--kafka-brokers", brokers, "--topics", topic,
				"--consul-addr", b.relayConsul[i].Addr(), "--lock-ttl", lockTTL.String(), "--lock-delay", lockDelay,
				"--commit-every", "200ms", "--lag-every", "500ms", "--durable-after", durableAfter.String())
		}, "relay"))
		b.workers = append(b.workers, b.newPart(fmt.Sprintf("worker%d", i), func(inc int) []string {
			who := fmt.Sprintf("worker%d.%d", i, inc) // as part.who
			redisAddr := b.redis.Addr()
			if i == 1 {
				redisAddr = b.workerRedis.Addr()
			}
			u := b.ledger.url
			return append(slicesConcat(common, []string{"--redis-addr", redisAddr, "--redis-partitions", strconv.Itoa(redisPartitions)}),
				"--http", "work="+u+"/ok/"+who+",fail="+u+"/fail/"+who+",kill="+u+"/kill/"+who+",slow="+u+"/slow/"+who,
				"--consul-addr", b.consul.Addr(), "--workers", strconv.Itoa(workersPerPart),
				"--lease", lease.String(), "--maintain-every", "200ms", "--backoff", "100ms", "--max-backoff", "400ms",
				"--timeout", jobTimeout.String(), "--drain-timeout", "2s", "--topics", topic)
		}, "worker"))
		b.coords = append(b.coords, b.newPart(fmt.Sprintf("coordinator%d", i), func(int) []string {
			return append(slicesConcat(common, redisFlags), "--consul-addr", b.consul.Addr(),
				"--lock-ttl", lockTTL.String(), "--lock-delay", lockDelay,
				"--scale-base", strconv.Itoa(workersPerPart), "--scale-every", "1s", "--stats-every", "1s",
				// Canaries through every path while the faults strike: the
				// alerts go to the ledger, and the last funnel check wants
				// every path fresh again.
				"--canary-topics", topic, "--canary-gate", "http://"+b.gates[0].listen,
				"--canary-interval", canaryInterval.String(), "--canary-grace", canaryInterval.String(),
				"--canary-webhook", b.ledger.url+"/canary",
				// The periodic schedule (periodic_test.go) posts through the
				// first gate too.
				"--periodic-gate", "http://"+b.gates[0].listen)
		}, "coordinator"))
	}
	return b
}

func slicesConcat(a, b []string) []string { return append(append([]string(nil), a...), b...) }

// newPart makes a part on a free port; start it with start.
func (b *bed) newPart(name string, args func(int) []string, command string) *part {
	port, err := stack.FreePort()
	if err != nil {
		b.t.Fatal(err)
	}
	p := &part{b: b, name: name, listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), killed: map[int]time.Time{}}
	p.args = func(inc int) []string {
		return append(append([]string{command, "--listen", p.listen}, args(inc)...), p.extra...)
	}
	b.t.Cleanup(p.stop)
	return p
}

// startAll starts every part and waits until each is ready, a relay holds
// the lock and a coordinator leads.
func (b *bed) startAll() {
	b.t.Helper()
	for _, ps := range [][]*part{b.gates, b.relays, b.workers, b.coords} {
		for _, p := range ps {
			if err := p.start(); err != nil {
				b.t.Fatal(err)
			}
		}
	}
	for _, ps := range [][]*part{b.gates, b.relays, b.workers, b.coords} {
		for _, p := range ps {
			if err := p.waitReady(); err != nil {
				b.t.Fatal(err)
			}
		}
	}
	testenv.WaitFor(b.t, 3*lockTTL, "a relay to hold the lock", func() bool { return b.holder(relayLock) != nil })
	testenv.WaitFor(b.t, 3*lockTTL, "a coordinator to lead", func() bool { return b.holder(coordLock) != nil })
}

// start runs the next incarnation of the part.
func (p *part) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inc++
	f, err := os.OpenFile(filepath.Join(p.b.logDir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== %s incarnation %d at %s\n", p.name, p.inc, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.b.bin, p.args(p.inc)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// pid is the running incarnation's process id.
func (p *part) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// kill9 kills the running incarnation with SIGKILL and waits for it.
func (p *part) kill9() time.Time {
	p.mu.Lock()
	cmd, done, inc := p.cmd, p.done, p.inc
	p.mu.Unlock()
	at := time.Now()
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
	p.mu.Lock()
	p.killed[inc] = at
	p.mu.Unlock()
	return at
}

// killAndRestart kills the running incarnation with SIGKILL and starts
// the next one.
func (p *part) killAndRestart() error {
	p.life.Lock()
	defer p.life.Unlock()
	p.kill9()
	return p.restart()
}

// killWorker is the ledger's kill: it kills the worker incarnation who
// (which called it) with SIGKILL, unless that one is gone already, and
// starts the worker again in the background.
func (b *bed) killWorker(who string) {
	name, _, _ := strings.Cut(who, ".")
	for _, w := range b.workers {
		if w.name != name {
			continue
		}
		w.life.Lock()
		if w.who() != who {
			w.life.Unlock()
			return
		}
		w.kill9()
		go func() {
			defer w.life.Unlock()
			if err := w.restart(); err != nil {
				b.mu.Lock()
				b.bgErrs = append(b.bgErrs, err)
				b.mu.Unlock()
			}
		}()
		return
	}
}

// who names the running incarnation, as a worker's handler URLs do.
func (p *part) who() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name + "." + strconv.Itoa(p.inc)
}

// killedAt says when the incarnation was killed with SIGKILL, if it was.
func (p *part) killedAt(inc int) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.killed[inc]
	return at, ok
}

// stop ends the running incarnation (t.Cleanup).
func (p *part) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// waitReady waits for the part's /readyz to answer 200 (the gate's needs
// Kafka, the others' Redis and Kafka or Consul).
func (p *part) waitReady() error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	_, err := waitUntil(30*time.Second, p.name+" to be ready", func() bool {
		select {
		case <-done:
			return true
		default:
		}
		return httpOK("http://" + p.listen + "/readyz")
	})
	select {
	case <-done:
		return fmt.Errorf("%s exited while starting; its log:\n%s", p.name, p.b.tail(p.name, 4000))
	default:
	}
	return err
}

// restart starts the part's next incarnation and waits until it is ready.
func (p *part) restart() error {
	if err := p.start(); err != nil {
		return err
	}
	return p.waitReady()
}

// waitUntil polls cond every 50 ms until it holds and returns how long that
// took, or an error after timeout. Unlike testenv.WaitFor it does not fail
// the test, so faults can run it in goroutines, and it polls at a steady
// pace, for measuring.
func waitUntil(timeout time.Duration, what string, cond func() bool) (time.Duration, error) {
	return waitEvery(timeout, 50*time.Millisecond, what, cond)
}

// waitEvery is waitUntil polling every interval.
func waitEvery(timeout, interval time.Duration, what string, cond func() bool) (time.Duration, error) {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}

func httpOK(url string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// metric reads a part's /metrics and sums the samples of name whose label
// text contains every one of labels (`topic="chaos"`).
func (p *part) metric(name string, labels ...string) (float64, bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.listen + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	sum, found := 0.0, false
lines:
	for _, line := range strings.Split(buf.String(), "\n") {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue lines
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

const (
	relayLock = "sluice/" + stage + "/relay/" + topic + "/lock"
	coordLock = "sluice/" + stage + "/coordinator/lock"
)

// holder is the part whose process holds the Consul lock key, or nil.
func (b *bed) holder(key string) *part {
	pair, _, err := b.consul.Client().KV().Get(key, nil)
	if err != nil || pair == nil || pair.Session == "" {
		return nil
	}
	i := strings.LastIndexByte(string(pair.Value), '/')
	pid, _ := strconv.Atoi(string(pair.Value[i+1:]))
	for _, p := range append(append([]*part(nil), b.relays...), b.coords...) {
		if p.pid() == pid {
			return p
		}
	}
	return nil
}

// tail is the end of a part's log.
func (b *bed) tail(name string, n int) string {
	data, _ := os.ReadFile(filepath.Join(b.logDir, name+".log"))
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

func (b *bed) dumpLogs() {
	if d := os.Getenv("SLUICE_CHAOS_LOGS"); d != "" {
		os.CopyFS(d, os.DirFS(b.logDir))
	}
	for _, ps := range [][]*part{b.gates, b.relays, b.workers, b.coords} {
		for _, p := range ps {
			b.t.Logf("--- %s log (tail)\n%s", p.name, b.tail(p.name, 3000))
		}
	}
}

// cutShortLine is what a worker logs when a keyed run ended (failed, or
// cut short) after its lease was lost or given up: it left the key's
// running mark to expire (worker/consume.go).
const cutShortLine = `msg="a run cut short after its lease was lost leaves its idempotency key's running mark to expire"`

var (
	incarnationRe = regexp.MustCompile(`^=== (\S+) incarnation (\d+) at `)
	cutShortRe    = regexp.MustCompile(` job=(\S+) attempt=(\d+) `)
)

// cutShortRuns reads the workers' logs for the keyed runs each incarnation
// cut short after its lease was lost or given up, as "worker1.2/<id>/<attempt>".
func (b *bed) cutShortRuns() map[string]bool {
	out := map[string]bool{}
	for _, w := range b.workers {
		data, _ := os.ReadFile(filepath.Join(b.logDir, w.name+".log"))
		who := ""
		for _, line := range strings.Split(string(data), "\n") {
			if m := incarnationRe.FindStringSubmatch(line); m != nil {
				who = m[1] + "." + m[2]
				continue
			}
			if !strings.Contains(line, cutShortLine) {
				continue
			}
			if m := cutShortRe.FindStringSubmatch(line); m != nil {
				out[who+"/"+m[1]+"/"+m[2]] = true
			}
		}
	}
	return out
}

// killedAt says when a worker incarnation ("worker1.2", as the ledger
// names it) was killed with SIGKILL, if it was.
func (b *bed) killedAt(who string) (time.Time, bool) {
	name, incs, _ := strings.Cut(who, ".")
	inc, err := strconv.Atoi(incs)
	if err != nil {
		return time.Time{}, false
	}
	for _, w := range b.workers {
		if w.name == name {
			return w.killedAt(inc)
		}
	}
	return time.Time{}, false
}

// stopRedis stops Redis with SIGTERM (it flushes its AOF), killRedis with
// SIGKILL; restartRedis starts it again and returns once it answers PING.
// The bed keeps their times: the verdict asks when Redis served.
func (b *bed) stopRedis() { b.redisDown(b.redis.Stop) }
func (b *bed) killRedis() { b.redisDown(b.redis.Kill) }

func (b *bed) redisDown(how func()) {
	b.probe.hold()
	b.mu.Lock()
	b.outages = append(b.outages, outage{down: time.Now()})
	b.mu.Unlock()
	how()
}

// lastOutage is Redis's latest outage.
func (b *bed) lastOutage() outage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.outages[len(b.outages)-1]
}

// restartRedis also measures what the outage lost of the writes Redis
// had answered (aofProbe): nothing after a SIGTERM, which flushes the
// AOF, nor after a SIGKILL while the disk kept up.
func (b *bed) restartRedis() time.Time {
	b.redis.Restart()
	up := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	loss, err := b.probe.measure(ctx)
	cancel()
	b.probe.resume()
	if err != nil {
		b.t.Logf("the AOF probe after Redis's restart: %v (no loss excused)", err)
	}
	b.mu.Lock()
	b.outages[len(b.outages)-1].up = up
	b.outages[len(b.outages)-1].loss = loss
	b.mu.Unlock()
	return up
}

// recordDeadline is when a worker must have recorded a run whose handler
// answered at t: t plus recordGrace of time Redis served, so an outage
// in between moves it on by the outage's length.
func (b *bed) recordDeadline(t time.Time) time.Time {
	b.mu.Lock()
	outs := append([]outage(nil), b.outages...)
	b.mu.Unlock()
	left := recordGrace
	for _, o := range outs {
		if o.up.IsZero() {
			o.up = time.Now() // not over: Redis has not served since
		}
		if !o.up.After(t) {
			continue // over before t
		}
		if o.down.After(t) {
			if !t.Add(left).After(o.down) {
				break // recorded (or due) before this one began
			}
			left -= o.down.Sub(t)
		}
		t = o.up
	}
	return t.Add(left)
}

// queueOf is a job's queue partition: its group's when it has one, else
// its id's (a job without a group joins its partition's shared lane).
// Every key of a job the suite reads goes through here.
func (b *bed) queueOf(id, group string) queue.Queue {
	return b.layout.QueueOf(topic, group, id)
}

// recordKey is a job's record, job:<id>: kept for a failed attempt and a
// dead job (state, last_error, attempts), not for a plain job that
// succeeded.
func (b *bed) recordKey(id, group string) string { return b.layout.Keys(b.queueOf(id, group)).Job(id) }

// idemKey is an idempotency key's mark, in the partition of the key.
func (b *bed) idemKey(key string) string {
	return b.layout.PartKeys(b.layout.PartitionOf(key)).Idempotency(key)
}

// stats runs `sluice stats -o json` against the bed and returns its output.
func (b *bed) stats(ctx context.Context) ([]byte, error) {
	var gm []string
	for _, g := range b.gates {
		gm = append(gm, "http://"+g.listen+"/metrics")
	}
	cmd := exec.CommandContext(ctx, b.bin, "stats", "-o", "json", "--stage", stage,
		"--redis-addr", b.redis.Addr(), "--redis-partitions", strconv.Itoa(redisPartitions),
		"--kafka-brokers", strings.Join(b.kafka.Brokers(), ","), "--gate-metrics", strings.Join(gm, ","))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && len(out) == 0 {
		return nil, fmt.Errorf("sluice stats: %v: %s", err, stderr.String())
	}
	return out, nil
}
