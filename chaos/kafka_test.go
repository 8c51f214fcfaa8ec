package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/stack"
)

// The Kafka faults of issue 30, on real brokers (`make chaos KAFKA=apache`:
// three KRaft brokers, each also a controller, replication factor 3,
// min.insync.replicas 2, the gates producing with acks=all). kfake cannot
// play them: it has one shared log and no in-sync set. Each names its
// invariant in docs/chaos.md; the verdict judges the run's jobs as a
// whole (0 acknowledged jobs lost, 0 keys run twice).

// kafkaTimeout bounds a broker's start (its old session must expire
// first: 6-10 s), an election and the in-sync set filling again, on 2
// shared cores.
const kafkaTimeout = 2 * time.Minute

// nerHold is how long faultNotEnoughReplicas keeps the in-sync set below
// min.insync.replicas: a parameter of the fault.
const nerHold = 5 * time.Second

// real is the bed's real brokers, or an error naming the setting when the
// bed runs kfake.
func (b *bed) real() (*stack.ApacheKafka, error) {
	if a := b.kafka.Real(); a != nil {
		return a, nil
	}
	return nil, errors.New("this fault needs real brokers: run make chaos KAFKA=apache (SLUICE_TEST_KAFKA=apache)")
}

// partitions reads every partition of the job topic: its leader and
// in-sync set, as a running broker sees them.
func (b *bed) partitions() ([]stack.PartitionState, error) {
	a, err := b.real()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]stack.PartitionState, kafkaPartitions)
	for p := range int32(kafkaPartitions) {
		if out[p], err = a.Partition(ctx, topic, p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// waitKafka polls the job topic's partitions every 200 ms until cond
// holds for each.
func (b *bed) waitKafka(what string, cond func(p int32, st stack.PartitionState) bool) (time.Duration, error) {
	return waitEvery(kafkaTimeout, 200*time.Millisecond, what, func() bool {
		sts, err := b.partitions()
		if err != nil {
			return false
		}
		for p, st := range sts {
			if !cond(int32(p), st) {
				return false
			}
		}
		return true
	})
}

// waitAllInSync waits until every partition of the job topic has a leader
// and all three replicas in sync again, so that the next fault starts
// from a whole cluster.
func (b *bed) waitAllInSync() (time.Duration, error) {
	return b.waitKafka("every partition's three replicas back in sync", func(_ int32, st stack.PartitionState) bool {
		return st.Leader > 0 && len(st.ISR) == 3
	})
}

// startBroker starts a stopped or killed broker again and waits until
// it is registered, then until it is back in every in-sync set.
func (b *bed) startBroker(node int32) (started, inSync time.Duration, err error) {
	a, err := b.real()
	if err != nil {
		return 0, 0, err
	}
	at := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	if err := a.Start(ctx, node); err != nil {
		return time.Since(at), 0, fmt.Errorf("starting broker %d again: %w", node, err)
	}
	started = time.Since(at)
	_, err = b.waitAllInSync()
	return started, time.Since(at), err
}

// leaveRunning starts a broker a fault stopped, if it is still down (the
// fault failed half way): the next steps need the whole cluster.
func (b *bed) leaveRunning(node int32) {
	a := b.kafka.Real()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	if err := a.Start(ctx, node); err != nil && !strings.Contains(err.Error(), "is running") {
		b.t.Logf("starting broker %d again after its fault: %v", node, err)
	}
}

// ledBy lists the job topic's partitions node leads.
func ledBy(sts []stack.PartitionState, node int32) []int32 {
	var out []int32
	for p, st := range sts {
		if st.Leader == node {
			out = append(out, int32(p))
		}
	}
	return out
}

// busiestLeader is the broker that leads the most partitions of the job
// topic (the lowest node id of those that tie), and those partitions.
func busiestLeader(a *stack.ApacheKafka, sts []stack.PartitionState) (node int32, led []int32) {
	for _, n := range a.Nodes() {
		if l := ledBy(sts, n); len(l) > len(led) {
			node, led = n, l
		}
	}
	return node, led
}

// busiestBroker is what the faults on a leader start from: the real
// brokers, the job topic's partitions as metadata tells them now, and the
// broker that leads the most of them.
func (b *bed) busiestBroker() (*stack.ApacheKafka, []stack.PartitionState, int32, error) {
	a, err := b.real()
	if err != nil {
		return nil, nil, 0, err
	}
	sts, err := b.partitions()
	if err != nil {
		return nil, nil, 0, err
	}
	node, _ := busiestLeader(a, sts)
	if node == 0 {
		return nil, nil, 0, errors.New("no broker leads a partition of the job topic")
	}
	return a, sts, node, nil
}

// startAgain starts a stopped broker again (startBroker) and adds to m how
// long it took to start and to be back in every in-sync set.
func (b *bed) startAgain(node int32, m string) (string, error) {
	started, inSync, err := b.startBroker(node)
	m += fmt.Sprintf("; started again in %s, in every in-sync set %s after the start began", started.Round(100*time.Millisecond), inSync.Round(100*time.Millisecond))
	return m, err
}

func partList(ps []int32) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprintf("%s/%d", topic, p)
	}
	return strings.Join(s, ",")
}

var (
	// faultKafkaKillLeader kills the broker that leads the busiest
	// partitions (every partition is busy: jobs go to all six by id;
	// the one leading the most, found by metadata) with SIGKILL while
	// jobs flow: the controller fences it after broker.session.timeout.ms
	// and elects leaders from the in-sync followers, which hold every
	// record the gates acknowledged (acks=all). It is started again and
	// the step waits until it is back in every in-sync set. Invariant: 0
	// acknowledged jobs lost, and the gates answer nothing but 503 or 504
	// (or a connection ended) meanwhile: no 4xx for a valid job.
	faultKafkaKillLeader = fault{"kill -9 the Kafka leader of busy partitions", func(b *bed) (string, time.Duration, error) {
		a, sts, node, err := b.busiestBroker()
		if err != nil {
			return "", 0, err
		}
		led := ledBy(sts, node)
		at := time.Now()
		if err := a.Kill(node); err != nil {
			return "", 0, err
		}
		defer b.leaveRunning(node)
		elected, err := b.waitKafka("new leaders of the killed broker's partitions", func(p int32, st stack.PartitionState) bool {
			return !slices.Contains(led, p) || (st.Leader > 0 && st.Leader != node)
		})
		m := fmt.Sprintf("broker %d (leader of %s) killed; new leaders %s after the kill", node, partList(led), elected.Round(100*time.Millisecond))
		if err != nil {
			return m, 0, err
		}
		if err := b.waitFlow("jobs to flow after the election"); err != nil {
			return m, 0, err
		}
		m, err = b.startAgain(node, m)
		if err != nil {
			return m, 0, err
		}
		return m, 0, b.noClientErrors(at, time.Now())
	}}

	// faultKafkaRestart restarts the broker that leads the most
	// partitions (SIGTERM: a controlled shutdown hands its leaderships
	// over first; then started again from its data) while jobs flow.
	// Invariant: 0 acknowledged jobs lost, no 4xx meanwhile.
	faultKafkaRestart = fault{"restart a Kafka broker while jobs flow", func(b *bed) (string, time.Duration, error) {
		a, sts, node, err := b.busiestBroker()
		if err != nil {
			return "", 0, err
		}
		at := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
		err = a.Stop(ctx, node)
		cancel()
		defer b.leaveRunning(node)
		stopped := time.Since(at)
		m := fmt.Sprintf("broker %d (leader of %s) stopped in %s", node, partList(ledBy(sts, node)), stopped.Round(100*time.Millisecond))
		if err != nil {
			return m, 0, fmt.Errorf("stopping broker %d: %w", node, err)
		}
		if err := b.waitFlow("jobs to flow with the broker down"); err != nil {
			return m, 0, err
		}
		m, err = b.startAgain(node, m)
		if err != nil {
			return m, 0, err
		}
		if err := b.waitFlow("jobs to flow after the restart"); err != nil {
			return m, 0, err
		}
		return m, 0, b.noClientErrors(at, time.Now())
	}}

	// faultNotEnoughReplicas stops a follower (SIGTERM) and, once jobs
	// flow without it (every in-sync set is 2), raises the job topic's
	// min.insync.replicas from 2 to 3: every in-sync set is then below
	// it. The window opens once the leader of every partition refused
	// acks=all (a probe through the first gate per partition, ?partition=,
	// answered 503 saying so), lasts nerHold, and ends when the override
	// is deleted (2 again); then the follower is started again. Why not
	// two followers stopped with min.insync.replicas 2: each broker is
	// also a KRaft controller, so two of three stopped take the controller
	// quorum with them, and without a quorum no in-sync set can shrink
	// (the leader just waits for the missing follower). Invariant: no
	// POST sent and answered within the window is answered 2xx (Kafka
	// refuses acks=all with NOT_ENOUGH_REPLICAS), each is a 503 that says
	// why ("in-sync replicas"); 0 acknowledged jobs lost.
	faultNotEnoughReplicas = fault{"stop a Kafka follower until the in-sync set is below min.insync.replicas", func(b *bed) (string, time.Duration, error) {
		a, err := b.real()
		if err != nil {
			return "", 0, err
		}
		defer b.setMinISR("")
		sts, err := b.partitions()
		if err != nil {
			return "", 0, err
		}
		// A follower of the first partition (it leads others: they move).
		var node int32
		for _, n := range sts[0].ISR {
			if n != sts[0].Leader {
				node = n
				break
			}
		}
		if node == 0 {
			return "", 0, fmt.Errorf("%s/0 has no follower in sync: %+v", topic, sts[0])
		}
		ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
		err = a.Stop(ctx, node)
		cancel()
		defer b.leaveRunning(node)
		if err != nil {
			return "", 0, fmt.Errorf("stopping broker %d: %w", node, err)
		}
		shrunk, err := b.waitKafka("every in-sync set to lose the stopped follower", func(_ int32, st stack.PartitionState) bool {
			return st.Leader > 0 && st.Leader != node && len(st.ISR) == 2 && !slices.Contains(st.ISR, node)
		})
		m := fmt.Sprintf("broker %d stopped; out of every in-sync set after %s", node, shrunk.Round(100*time.Millisecond))
		if err == nil {
			err = b.waitFlow("jobs to flow with the follower stopped")
		}
		if err != nil {
			return m, 0, err
		}
		if err := b.setMinISR("3"); err != nil {
			return m, 0, err
		}
		refusing, err := b.everyLeaderRefuses()
		m += fmt.Sprintf("; min.insync.replicas 3: every leader refused acks=all %s after", refusing.Round(100*time.Millisecond))
		if err != nil {
			return m, 0, err
		}
		from := time.Now()
		time.Sleep(nerHold) // the window's length, a parameter of the fault
		to := time.Now()
		if err := b.setMinISR(""); err != nil {
			return m, 0, err
		}
		verr := b.checkRefusedWhileShort(from, to)
		m += "; " + b.describeAnswers(from, to)
		m, err = b.startAgain(node, m)
		if err := errors.Join(err, verr); err != nil {
			return m, 0, err
		}
		return m, 0, b.waitFlow("jobs to flow after the follower came back")
	}}
)

// everyLeaderRefuses posts a job to each partition of the job topic
// through the first gate (?partition=) until every one is answered 503
// saying the in-sync replicas are short, and returns how long that took.
// A probe taken before its leader applied the new min.insync.replicas is a
// plain job like the load's (it runs; the verdict judges the load's ops).
func (b *bed) everyLeaderRefuses() (time.Duration, error) {
	refused := map[int32]bool{}
	c := http.Client{Timeout: 10 * time.Second}
	return waitEvery(kafkaTimeout, 100*time.Millisecond, "every partition's leader to refuse acks=all", func() bool {
		for p := range int32(kafkaPartitions) {
			if refused[p] {
				continue
			}
			url := fmt.Sprintf("http://%s/v1/topics/%s/jobs?partition=%d", b.gates[0].listen, topic, p)
			resp, err := c.Post(url, "application/json", strings.NewReader(`{"type":"work","payload":{"probe":true}}`))
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			refused[p] = resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "in-sync replicas")
		}
		return len(refused) == kafkaPartitions && !slices.Contains(slices.Collect(maps.Values(refused)), false)
	})
}

// checkRefusedWhileShort checks the answers to the POSTs sent and answered
// while every in-sync set was below min.insync.replicas: none 2xx, each
// a 503 saying why, with at least a few of them (else the check proves
// nothing).
func (b *bed) checkRefusedWhileShort(from, to time.Time) error {
	rs := b.load.answeredWithin(from, to)
	var bad []string
	for _, r := range rs {
		switch {
		case r.Accepted > 0 || (r.Status >= 200 && r.Status < 300):
			bad = append(bad, fmt.Sprintf("%d of %d jobs answered 2xx (status %d) at %s", r.Accepted, r.Jobs, r.Status, r.Answered.Format("15:04:05.000")))
		case r.Status != http.StatusServiceUnavailable:
			bad = append(bad, fmt.Sprintf("answered %d, not 503: %s", r.Status, r.Msg))
		case !strings.Contains(r.Msg, "in-sync replicas"):
			bad = append(bad, "a 503 that does not say the in-sync replicas are short: "+r.Msg)
		}
	}
	if len(rs) < 5 {
		bad = append(bad, fmt.Sprintf("only %d POSTs were sent and answered in the %s the in-sync sets were short: nothing to judge", len(rs), to.Sub(from).Round(100*time.Millisecond)))
	}
	if len(bad) > 0 {
		return fmt.Errorf("below min.insync.replicas, %d of %d answers were wrong: %s", len(bad), len(rs), strings.Join(bad[:min(5, len(bad))], "; "))
	}
	return nil
}

// describeAnswers counts the answers of the POSTs sent and answered in
// [from, to], by status.
func (b *bed) describeAnswers(from, to time.Time) string {
	by := map[int]int{}
	for _, r := range b.load.answeredWithin(from, to) {
		by[r.Status]++
	}
	var s []string
	for st, n := range by {
		s = append(s, fmt.Sprintf("%d: %d", st, n))
	}
	sort.Strings(s)
	return fmt.Sprintf("answers in the %s window by status {%s}", to.Sub(from).Round(100*time.Millisecond), strings.Join(s, ", "))
}

// noClientErrors fails when a POST sent in [from, to] was answered with a
// 4xx (but 408 and 429): the workload sends only valid jobs, so a broker
// failure must never look like the client's fault.
func (b *bed) noClientErrors(from, to time.Time) error {
	for _, r := range b.load.answeredWithin(from, to) {
		if r.Status >= 400 && r.Status < 500 && r.Status != http.StatusRequestTimeout && r.Status != http.StatusTooManyRequests {
			return fmt.Errorf("a POST during the broker fault was answered %d: %s", r.Status, r.Msg)
		}
	}
	return nil
}

// setMinISR sets the job topic's min.insync.replicas, or with "" deletes
// the override (the brokers' 2 again). Each try uses a new admin client:
// one made before a broker stopped may still send to it.
func (b *bed) setMinISR(v string) error {
	e := sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v}
	if v == "" {
		e = sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationDelete}
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Metadata.AllowAutoTopicCreation = false
	var last error
	if _, err := waitEvery(30*time.Second, 500*time.Millisecond, "the topic config change", func() bool {
		admin, err := sarama.NewClusterAdmin(b.kafka.Brokers(), cfg)
		if err != nil {
			last = err
			return false
		}
		defer admin.Close()
		last = admin.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{"min.insync.replicas": e}, false)
		return last == nil
	}); err != nil {
		return fmt.Errorf("setting %s's min.insync.replicas to %q: %w (last: %v)", topic, v, err, last)
	}
	return nil
}

// uncleanElections counts, in every broker's log, the leaders the active
// controller elected uncleanly (from outside the in-sync set) and the
// unclean elections it triggered for offline partitions.
func uncleanElections(b *bed) (elected, triggered int) {
	a := b.kafka.Real()
	if a == nil {
		return 0, 0
	}
	for _, n := range a.Nodes() {
		data, _ := os.ReadFile(a.LogFile(n))
		elected += strings.Count(string(data), "using an unclean election")
		triggered += strings.Count(string(data), "Triggering unclean leader election")
	}
	return elected, triggered
}

// topicConfig reads one config of the job topic as the brokers apply it
// (a server property is the topic's default).
func topicConfig(b *bed, name string) (string, error) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Metadata.AllowAutoTopicCreation = false
	admin, err := sarama.NewClusterAdmin(b.kafka.Brokers(), cfg)
	if err != nil {
		return "", err
	}
	defer admin.Close()
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{name}})
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Name == name {
			return e.Value, nil
		}
	}
	return "", fmt.Errorf("no config %s for topic %s", name, topic)
}
