package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestDevServesANewQueueInTwoCommands is issue 32's target: on a running
// sluice dev (started with two topics, --topics jobs,mail), a third queue
// is served end to end with two commands and no restart: `sluice topics
// create sms`, then a POST to /v1/topics/sms/jobs; the job is relayed and
// run, and sms shows in `sluice stats` and the admin API (its relay, its
// completed job). The 404 before the create names the command.
func TestDevServesANewQueueInTwoCommands(t *testing.T) {
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	cfg.Topics = []string{"jobs", "mail"}
	cfg.CanaryInterval = 0
	d := startDev(t, &cfg)
	gate := "http://" + cfg.GateAddr
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: queue.Keyspace{Stage: "dev", Partitions: cfg.RedisPartitions}, Addr: cfg.RedisAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	completed := func(topic string) int64 {
		var n int64
		for p := range cfg.RedisPartitions {
			f, err := pool.Funnel(context.Background(), queue.Queue{Topic: topic, Part: p})
			if err != nil {
				t.Fatal(err)
			}
			n += f.Completed
		}
		return n
	}
	// --topics: both served from the start.
	for _, topic := range cfg.Topics {
		enqueueID(t, gate+"/v1/topics/"+topic+"/jobs", `{"type":"noop"}`)
		testenv.WaitFor(t, 30*time.Second, topic+"'s job to run", func() bool { return completed(topic) == 1 })
	}

	// Before: a 404 that names the command.
	resp, err := http.Post(gate+"/v1/topics/sms/jobs", "application/json", strings.NewReader(`{"type":"noop"}`))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "sluice topics create sms") {
		t.Fatalf("POST to a topic not created yet: %d %s", resp.StatusCode, body)
	}

	// Command 1.
	if out := adminCLI(t, cfg, 0, "topics", "create", "sms", "--partitions", "4"); !strings.Contains(out, "sms, sms.retry, sms.dlq") {
		t.Fatalf("topics create: %s", out)
	}
	// Command 2: the gate looks a missing topic up again at most once a
	// second, so a POST right after the create may still see the 404.
	start := time.Now()
	testenv.WaitFor(t, 10*time.Second, "the gate to take jobs of sms", func() bool {
		resp, err := http.Post(gate+"/v1/topics/sms/jobs", "application/json", strings.NewReader(`{"type":"noop"}`))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		return resp.StatusCode == http.StatusAccepted
	})
	testenv.WaitFor(t, 30*time.Second, "sms's job to be relayed and run", func() bool { return completed("sms") == 1 })
	t.Logf("created to run: %v", time.Since(start).Round(time.Millisecond))

	out := adminCLI(t, cfg, 0, "stats")
	if !strings.Contains(out, "topic sms") {
		t.Errorf("sluice stats lacks the new topic:\n%s", out)
	}
	st := adminJSON[admin.TopicState](t, cfg, "topics", "describe", "sms")
	if st.Relay == "" || !st.Listed || !st.Registered || st.Partitions != 4 || st.Queue == nil || st.Queue.Completed != 1 || len(st.Problems) != 0 {
		t.Errorf("topics describe sms: %+v", st)
	}
	l := adminJSON[admin.TopicList](t, cfg, "topics", "ls")
	var names []string
	for _, s := range l.Topics {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"jobs", "mail", "sms"}) {
		t.Errorf("topics ls: %v", names)
	}

	// A restart keeps serving it: the dev Consul starts empty, and sluice
	// dev lists again the topics its Kafka and Redis kept.
	d.stop(t)
	startDev(t, &cfg)
	enqueueID(t, "http://"+cfg.GateAddr+"/v1/topics/sms/jobs", `{"type":"noop"}`)
	testenv.WaitFor(t, 30*time.Second, "sms's job after a restart to run", func() bool { return completed("sms") == 2 })
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
