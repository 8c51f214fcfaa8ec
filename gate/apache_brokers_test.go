package gate_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestApacheKafkaThreeBrokers runs the gate against three real brokers
// (replication factor 3, min.insync.replicas 2), started once for its
// subtests.
func TestApacheKafkaThreeBrokers(t *testing.T) {
	start := time.Now()
	k := newKafka(t, testenv.ApacheKafka(), testenv.Brokers(3))
	t.Logf("three brokers started in %s", time.Since(start).Round(time.Millisecond))
	g := startGate(t, k, nil)

	// The leader of a busy partition killed with SIGKILL while acks=all
	// jobs are posted: some requests fail (503, 504) during the election,
	// but every job answered 2xx is in Kafka at the partition and offset
	// the answer gave.
	t.Run("leader killed under load", func(t *testing.T) {
		leader := k.Partition("jobs", 0).Leader
		var (
			mu      sync.Mutex
			acked   []accepted
			refused = map[int]int{}
		)
		stop := postUntilStopped(g, 4, "w", func(a answer, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if a.status == http.StatusAccepted {
				var acc accepted
				if err := json.Unmarshal(a.body, &acc); err == nil {
					acked = append(acked, acc)
				}
			} else {
				refused[a.status]++
			}
		})
		count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
		testenv.WaitFor(t, 10*time.Second, "jobs flowing", func() bool { return count() >= 200 })
		k.KillBroker(leader)
		killed := time.Now()
		testenv.WaitFor(t, 30*time.Second, "a new leader of jobs/0", func() bool {
			l := k.Partition("jobs", 0).Leader
			return l > 0 && l != leader
		})
		before := count()
		testenv.WaitFor(t, 30*time.Second, "jobs flowing again after the failover", func() bool { return count() >= before+200 })
		stop()
		t.Logf("%d jobs acknowledged, refused %v; failover %s after the kill", len(acked), refused, time.Since(killed).Round(100*time.Millisecond))
		for status := range refused {
			if status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout {
				t.Errorf("%d answers %d during the failover; want only 503 or 504", refused[status], status)
			}
		}
		checkAllStored(t, k, acked)
		k.StartBroker(leader)
		testenv.WaitFor(t, 60*time.Second, "the restarted broker back in jobs/0's in-sync set", func() bool {
			return len(k.Partition("jobs", 0).ISR) == 3
		})
	})

	// When a partition's in-sync set falls below min.insync.replicas,
	// Kafka refuses acks=all writes (NOT_ENOUGH_REPLICAS) and the gate
	// must answer 503 saying so, never 2xx; acks=leader writes still go
	// in; once the follower is back in sync, acks=all is accepted again.
	//
	// The topic has min.insync.replicas 3, not 2: each broker is also a
	// KRaft controller, and with two of three stopped the quorum is gone
	// and no in-sync set can shrink (the leader just waits, and the gate
	// answers 504). One killed follower is enough at 3.
	t.Run("not enough replicas", func(t *testing.T) {
		k.CreateTopicWith("strict", 1, map[string]string{"min.insync.replicas": "3"})
		k.CreateTopicWith("short", shortPartitions, map[string]string{"min.insync.replicas": "3"})
		url := g.url + "/v1/topics/strict/jobs?acks="
		// The gate reads a topic it does not know again at most once a
		// second.
		testenv.WaitFor(t, 10*time.Second, "acks=all accepted with every replica in sync", func() bool {
			return post(t, url+"all", `{"type":"t"}`).status == http.StatusAccepted
		})
		st := k.Partition("strict", 0)
		i := slices.IndexFunc(st.ISR, func(n int32) bool { return n != st.Leader })
		if len(st.ISR) != 3 || i < 0 {
			t.Fatalf("strict/0: leader %d, in-sync %v; want three in sync", st.Leader, st.ISR)
		}
		follower := st.ISR[i]
		k.KillBroker(follower)
		killed := time.Now()
		testenv.WaitFor(t, 60*time.Second, "the killed follower to leave strict/0's in-sync set", func() bool {
			return !slices.Contains(k.Partition("strict", 0).ISR, follower)
		})
		t.Logf("the in-sync set shrank %s after the kill (broker.session.timeout.ms 6 s)", time.Since(killed).Round(100*time.Millisecond))
		// The metadata read above may come from a broker that learned of
		// the shrink before the leader did; a record the leader appended
		// meanwhile waits in its purgatory for the dead follower (a 504:
		// true, it may or may not be stored). From the leader's first
		// refusal on, every acks=all POST must be a prompt 503.
		testenv.WaitFor(t, 60*time.Second, "strict/0's leader to refuse acks=all", func() bool {
			return post(t, url+"all", `{"type":"t"}`).status == http.StatusServiceUnavailable
		})
		for range 2 {
			a := post(t, url+"all", `{"type":"t"}`)
			if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || !strings.Contains(string(a.body), "in-sync replicas") {
				t.Fatalf("acks=all below min.insync.replicas: %d %s (Retry-After %q); want 503 naming the in-sync replicas", a.status, a.body, a.header.Get("Retry-After"))
			}
		}
		// Under load as well: a short partition's acks=all jobs are each
		// answered 503 at once, none 504 after the produce timeout.
		testenv.WaitFor(t, 60*time.Second, "the killed follower to leave every in-sync set of short", func() bool {
			for p := range int32(shortPartitions) {
				if slices.Contains(k.Partition("short", p).ISR, follower) {
					return false
				}
			}
			return true
		})
		stormShortPartitions(t, k, "short", shortPartitions, shortISRHold)

		// The refusal is the short partition's alone, at once: the leader
		// may take acks=leader writes, and a topic whose in-sync sets
		// still meet its min.insync.replicas (jobs: 2 of 3, min 2) takes
		// acks=all. The gate once took NOT_ENOUGH_REPLICAS for all of
		// Kafka being unavailable and answered every request 503 until
		// its next metadata refresh (up to a second, and twice in a
		// second is enough to see it: the refresh a 503 asks for runs at
		// most once a second).
		if a := post(t, url+"leader", `{"type":"t"}`); a.status != http.StatusAccepted {
			t.Errorf("acks=leader below min.insync.replicas: %d %s; want 202 (the leader alone may take it)", a.status, a.body)
		}
		if a := post(t, g.url+"/v1/topics/jobs/jobs?acks=all", `{"type":"t"}`); a.status != http.StatusAccepted {
			t.Errorf("acks=all to another topic, in sync enough, while strict is short: %d %s; want 202 (one partition short of replicas must not turn the whole gate away)", a.status, a.body)
		}

		k.StartBroker(follower)
		testenv.WaitFor(t, 60*time.Second, "the follower back in strict/0's in-sync set", func() bool {
			return len(k.Partition("strict", 0).ISR) == 3
		})
		testenv.WaitFor(t, 30*time.Second, "acks=all accepted again", func() bool {
			return post(t, url+"all", `{"type":"t"}`).status == http.StatusAccepted
		})
	})

	// A follower stopped (SIGTERM) while acks=all jobs flow: the in-sync
	// sets shrink at once and stay at min.insync.replicas (2 of 3), so
	// every job must be taken, none answered 503 or 504. Under the chaos
	// suite's load a produce request the leader took while the follower was
	// still in sync waited there for it until the request's own timeout
	// (sarama's 10 s), holding every record for that broker behind it (the
	// idempotent producer has one request in flight per broker): 504s for
	// 10 s. The gate now asks the leader to answer within half its produce
	// timeout, and sarama retries. At this test's load the wait did not
	// happen with sarama's 10 s either (slowest answer 216 ms): this checks
	// the guarantee, not that fix.
	t.Run("follower stopped under load", func(t *testing.T) {
		g := startGate(t, k, func(c *gate.Config) { c.ProduceTimeout = 3 * time.Second })
		st := k.Partition("jobs", 0)
		i := slices.IndexFunc(st.ISR, func(n int32) bool { return n != st.Leader })
		if len(st.ISR) != 3 || i < 0 {
			t.Fatalf("jobs/0: leader %d, in-sync %v; want three in sync", st.Leader, st.ISR)
		}
		follower := st.ISR[i]
		var (
			mu      sync.Mutex
			answers = map[int]int{}
			slowest time.Duration
		)
		stop := postUntilStopped(g, 8, "f", func(a answer, took time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			answers[a.status]++
			slowest = max(slowest, took)
		})
		count := func() int { mu.Lock(); defer mu.Unlock(); return answers[http.StatusAccepted] }
		testenv.WaitFor(t, 10*time.Second, "jobs flowing", func() bool { return count() >= 200 })
		k.StopBroker(follower)
		stopped := time.Now()
		before := count()
		testenv.WaitFor(t, 30*time.Second, "jobs flowing with the follower stopped", func() bool { return count() >= before+500 })
		for time.Since(stopped) < 12*time.Second { // past sarama's default 10 s
			time.Sleep(100 * time.Millisecond)
		}
		stop()
		t.Logf("follower %d stopped under load: answers by status %v, the slowest %s", follower, answers, slowest.Round(time.Millisecond))
		if n := sum(answers) - answers[http.StatusAccepted]; n > 0 {
			t.Errorf("%d of %d answers were not 202 with a follower stopped and the in-sync sets still at min.insync.replicas: %v", n, sum(answers), answers)
		}
		k.StartBroker(follower)
		testenv.WaitFor(t, 60*time.Second, "the follower back in jobs/0's in-sync set", func() bool {
			return len(k.Partition("jobs", 0).ISR) == 3
		})
	})
}

// shortPartitions is how many partitions the stormed topic has.
const shortPartitions = 6

// shortISRHold is the gate's --short-isr-hold in stormShortPartitions: 0
// shows the failure it prevents.
var shortISRHold = gate.DefaultConfig().ShortISRHold

// stormShortPartitions posts batches of 20 acks=all jobs, spread over the
// topic's partitions, from 32 clients for 3 s, through a gate of its own
// (produce timeout 2 s), while every partition's in-sync set is below its
// min.insync.replicas: every answer must be a 503 naming the in-sync
// replicas, and they must come at once: at least 1,000 answers, a mean
// under 96 ms. Without the gate's short-ISR breaker (hold 0) records queue
// behind sarama's retries of the refused ones: the same storm got 259
// answers, 163 of them 504 with a 400 ms timeout, against 12,950 and one
// 504 (a probe) with the breaker (docs/chaos.md; the chaos suite's failure
// of 2026-11-27).
func stormShortPartitions(t *testing.T, k *testenv.KafkaCluster, topic string, partitions int, hold time.Duration) {
	t.Helper()
	const timeout = 2 * time.Second
	g := startGate(t, k, func(c *gate.Config) { c.ProduceTimeout, c.ShortISRHold = timeout, hold })
	url := g.url + "/v1/topics/" + topic + "/jobs:batch?acks=all"
	one := func(p int) answer {
		return postNoFail(fmt.Sprintf("%s/v1/topics/%s/jobs?acks=all&partition=%d", g.url, topic, p), `{"type":"t"}`)
	}
	testenv.WaitFor(t, 60*time.Second, "every leader of "+topic+" to refuse acks=all", func() bool {
		for p := range partitions {
			if one(p).status != http.StatusServiceUnavailable {
				return false
			}
		}
		return true
	})
	var (
		mu      sync.Mutex
		answers = map[int]int{}
		slowest time.Duration
		wrong   []string
		wg      sync.WaitGroup
	)
	deadline := time.Now().Add(3 * time.Second)
	for c := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				var batch strings.Builder
				batch.WriteString("[")
				for j := range 20 {
					if j > 0 {
						batch.WriteString(",")
					}
					fmt.Fprintf(&batch, `{"type":"t","payload":{"storm":"%d-%d-%d"}}`, c, i, j)
				}
				batch.WriteString("]")
				start := time.Now()
				a := postNoFail(url, batch.String())
				took := time.Since(start)
				mu.Lock()
				answers[a.status]++
				slowest = max(slowest, took)
				if a.status != http.StatusServiceUnavailable || !strings.Contains(string(a.body), "in-sync replicas") {
					wrong = append(wrong, fmt.Sprintf("%d after %s: %.300s", a.status, took.Round(time.Millisecond), a.body))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("short partitions under load (--short-isr-hold %s): answers by status %v; the slowest took %s", hold, answers, slowest.Round(time.Millisecond))
	if len(wrong) > 0 {
		t.Errorf("below min.insync.replicas every acks=all POST must be a 503 naming the in-sync replicas, at once; %d were not, e.g. %s", len(wrong), strings.Join(wrong[:min(len(wrong), 3)], "; "))
	}
	if n := sum(answers); n < 1000 {
		t.Errorf("%d answers from 32 clients in 3 s (a mean of %s); want 1,000 or more: a short partition's jobs must be refused at once, not after the client's retries of the jobs ahead of them", n, (32 * 3 * time.Second / time.Duration(max(n, 1))).Round(time.Millisecond))
	}
}

func sum(m map[int]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// postNoFail is post for a goroutine that is not the test's: a transport
// error is status 0.
// postUntilStopped posts acks=all jobs to g from n goroutines, ids
// prefix<goroutine>-<i>, until the stop it returns is called (stop waits
// for them); record takes every answer and how long it took, from any of
// the goroutines.
func postUntilStopped(g *testGate, n int, prefix string, record func(a answer, took time.Duration)) (stop func()) {
	var (
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				a := postNoFail(g.url+"/v1/topics/jobs/jobs?acks=all", fmt.Sprintf(`{"type":"t","id":"%s%d-%d"}`, prefix, w, i))
				record(a, time.Since(start))
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

func postNoFail(url, body string) answer {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return answer{}
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: []byte(b.String())}
}

// checkAllStored reads every partition of jobs to its end and checks that
// each acknowledged job is the record at the partition and offset its
// answer gave.
func checkAllStored(t *testing.T, k *testenv.KafkaCluster, acked []accepted) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Metadata.AllowAutoTopicCreation = false
	client, err := sarama.NewClient(k.Brokers(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	type pos struct {
		p int32
		o int64
	}
	want := map[pos]string{}
	for _, a := range acked {
		want[pos{a.Partition, a.Offset}] = a.ID
	}
	lost := 0
	for p := range int32(partitions) {
		end, err := client.GetOffset("jobs", p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64]string{}
		if end > 0 {
			for _, m := range testenv.ReadRecords(t, k.Brokers(), "jobs", p, sarama.OffsetOldest, int(end)) {
				var j struct {
					ID string `json:"id"`
				}
				if err := json.Unmarshal(m.Value, &j); err != nil {
					t.Fatalf("record jobs/%d/%d: %v", p, m.Offset, err)
				}
				got[m.Offset] = j.ID
			}
		}
		for at, id := range want {
			if at.p == p && got[at.o] != id {
				lost++
				if lost <= 5 {
					t.Errorf("job %s acknowledged at jobs/%d/%d is not there (found %q)", id, p, at.o, got[at.o])
				}
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged jobs lost", lost, len(acked))
	}
}
