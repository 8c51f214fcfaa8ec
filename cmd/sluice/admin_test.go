package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
)

// cliRun runs `sluice args...` in process: exit code, stdout, stderr.
func cliRun(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// adminCLI runs an admin command against the dev coordinator, with the
// token file sluice dev wrote; it fails the test unless the exit code is
// want.
func adminCLI(t *testing.T, cfg devConfig, want int, args ...string) string {
	t.Helper()
	args = append(args, "--admin-url", "http://"+cfg.CoordinatorAddr, "--admin-token-file", filepath.Join(cfg.Dir, "admin-token"))
	code, out, errOut := cliRun(args...)
	if code != want {
		t.Fatalf("sluice %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

func adminJSON[T any](t *testing.T, cfg devConfig, args ...string) T {
	t.Helper()
	out := adminCLI(t, cfg, 0, append(args, "-o", "json")...)
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("sluice %s -o json: %v in %s", strings.Join(args, " "), err, out)
	}
	return v
}

// metricValue reads one series of a /metrics page ("" when absent).
func metricValue(t *testing.T, url, series string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestCLIAdminCommandsAgainstDev drives every admin command against a
// running sluice dev, in table and JSON output: rates (a paused relay
// stops, resume restores the rate and the job waiting runs), limits, a
// dead job replayed runs again, a poison message replayed from the Kafka
// DLQ reaches its topic (and the relay dead-letters it again), groups,
// scale pins obeyed by the dev worker, canaries, stats over the API.
func TestCLIAdminCommandsAgainstDev(t *testing.T) {
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	cfg.CanaryInterval = time.Second
	d := startDev(t, &cfg)
	banner := d.out.String()
	tok, err := os.ReadFile(filepath.Join(cfg.Dir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/#token=" + strings.TrimSpace(string(tok)), "SLUICE_ADMIN_TOKEN_FILE=" + filepath.Join(cfg.Dir, "admin-token"), "sluice dlq ls"} {
		if !strings.Contains(banner, want) {
			t.Errorf("the banner lacks %q:\n%s", want, banner)
		}
	}
	gate := "http://" + cfg.GateAddr
	relayMetrics := "http://" + cfg.RelayAddr + "/metrics"

	// Rates: set, pause (the relay stops), resume (restored, it goes on).
	if out := adminCLI(t, cfg, 0, "rate", "set", cfg.Topic, "500", "--burst", "50"); !strings.Contains(out, "limited") || !strings.Contains(out, "500") {
		t.Errorf("rate set: %s", out)
	}
	paused := adminJSON[admin.RateState](t, cfg, "rate", "pause", cfg.Topic)
	if !paused.Paused || paused.Rate != 500 || paused.Burst != 50 {
		t.Errorf("rate pause: %+v", paused)
	}
	pausedSeries := `sluice_relay_rate_paused{topic="` + cfg.Topic + `"}`
	testenv.WaitFor(t, 10*time.Second, "the relay to pause", func() bool { return metricValue(t, relayMetrics, pausedSeries) == "1" })
	body := postJSON(t, gate+"/v1/topics/"+cfg.Topic+"/jobs", `{"id":"while-paused","group":"while-paused","type":"hello","payload":{}}`)
	if out := adminCLI(t, cfg, 0, "rate", "get"); !strings.Contains(out, "paused") {
		t.Errorf("rate get while paused: %s", out)
	}
	// The gate took it, and it waits in Kafka: the paused relay leaves it.
	testenv.WaitFor(t, 20*time.Second, "the job counted as waiting in Kafka", func() bool {
		code, out, _ := cliRun("stats", "-o", "json", "--admin-url", "http://"+cfg.CoordinatorAddr, "--admin-token-file", filepath.Join(cfg.Dir, "admin-token"))
		var r funnel.Report
		if code > 1 || json.Unmarshal([]byte(out), &r) != nil {
			return false
		}
		tp := topicOf(r, cfg.Topic)
		return tp.InKafka != nil && *tp.InKafka == 1
	})
	if code, _, errOut := cliRun("groups", "show", "while-paused", "--admin-url", "http://"+cfg.CoordinatorAddr, "--admin-token-file", filepath.Join(cfg.Dir, "admin-token")); code != 1 || !strings.Contains(errOut, "HTTP 404") {
		t.Errorf("the job reached Redis while the relay was paused: exit %d %s", code, errOut)
	}
	resumed := adminJSON[admin.RateState](t, cfg, "rate", "resume", cfg.Topic)
	if resumed.Paused || resumed.Rate != 500 || resumed.Burst != 50 {
		t.Errorf("rate resume: %+v", resumed)
	}
	testenv.WaitFor(t, 10*time.Second, "the relay to resume", func() bool { return metricValue(t, relayMetrics, pausedSeries) == "0" })
	testenv.WaitFor(t, 20*time.Second, "the job posted while paused to run", func() bool {
		code, out, _ := cliRun("groups", "show", "while-paused", "-o", "json", "--admin-url", "http://"+cfg.CoordinatorAddr, "--admin-token-file", filepath.Join(cfg.Dir, "admin-token"))
		var g admin.GroupInfo
		return code == 0 && json.Unmarshal([]byte(out), &g) == nil && g.Done == 1
	})
	_ = body
	adminCLI(t, cfg, 0, "rate", "set", cfg.Topic, "unlimited")

	// Limits.
	adminCLI(t, cfg, 0, "limits", "set", "smtp", "10", "--burst", "2")
	if l := adminJSON[admin.LimitState](t, cfg, "limits", "get", "smtp"); l.Rate != 10 || l.Burst != 2 {
		t.Errorf("limits get: %+v", l)
	}
	if out := adminCLI(t, cfg, 0, "limits", "get"); !strings.Contains(out, "smtp") || !strings.Contains(out, "RESOURCE") {
		t.Errorf("limits get (table): %s", out)
	}
	adminCLI(t, cfg, 0, "limits", "unset", "smtp")
	adminCLI(t, cfg, 1, "limits", "get", "smtp")

	// A dead job (the sleep handler refuses its payload for good) is
	// replayed and runs again: dead again, with one attempt, counted.
	postJSON(t, gate+"/v1/topics/"+cfg.Topic+"/jobs", `{"id":"doomed","type":"sleep","payload":{"duration":"forever"}}`)
	var dead admin.DLQList
	testenv.WaitFor(t, 20*time.Second, "the job to die", func() bool {
		dead = adminJSON[admin.DLQList](t, cfg, "dlq", "ls", "--topic", cfg.Topic)
		return len(dead.Entries) == 1
	})
	if e := dead.Entries[0]; e.ID != "doomed" || e.Attempts != 1 || !strings.Contains(e.LastError, "sleep: duration") {
		t.Errorf("dead entry: %+v", e)
	}
	if out := adminCLI(t, cfg, 0, "dlq", "ls"); !strings.Contains(out, "doomed") || !strings.Contains(out, "LAST ERROR") {
		t.Errorf("dlq ls (table): %s", out)
	}
	if out := adminCLI(t, cfg, 0, "dlq", "show", "doomed"); !strings.Contains(out, `"duration":"forever"`) {
		t.Errorf("dlq show: %s", out)
	}
	firstDeath := *dead.Entries[0].DeadAt
	if out := adminCLI(t, cfg, 0, "dlq", "replay", "doomed"); !strings.Contains(out, "replayed 1") {
		t.Errorf("dlq replay: %s", out)
	}
	testenv.WaitFor(t, 20*time.Second, "the replayed job to run and die again", func() bool {
		l := adminJSON[admin.DLQList](t, cfg, "dlq", "ls")
		return len(l.Entries) == 1 && l.Entries[0].DeadAt.After(firstDeath) && l.Entries[0].Attempts == 1
	})
	stats := adminJSON[funnel.Report](t, cfg, "stats")
	if st := topicOf(stats, cfg.Topic).Milestones; st["replayed"] != 1 || st["dead"] != 2 {
		t.Errorf("the funnel after the replay: %v", st)
	}
	adminCLI(t, cfg, 0, "dlq", "purge", "--all")
	if l := adminJSON[admin.DLQList](t, cfg, "dlq", "ls"); len(l.Entries) != 0 {
		t.Errorf("after purge --all: %+v", l.Entries)
	}

	// A poison message: the relay dead-letters it to jobs.dlq; replayed,
	// it reaches the topic again, and the relay dead-letters it again.
	sc := sarama.NewConfig()
	sc.Producer.Return.Successes = true
	prod, err := sarama.NewSyncProducer([]string{cfg.KafkaAddr}, sc)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: cfg.Topic, Key: sarama.StringEncoder("poison-group"), Value: sarama.StringEncoder(`{"not json`)}); err != nil {
		t.Fatal(err)
	}
	prod.Close()
	var kl admin.DLQList
	testenv.WaitFor(t, 20*time.Second, "the poison message in the DLQ", func() bool {
		kl = adminJSON[admin.DLQList](t, cfg, "dlq", "ls", "--source", "kafka", "--topic", cfg.Topic)
		return len(kl.Entries) == 1
	})
	if e := kl.Entries[0]; e.ID != "0:0" || e.Key != "poison-group" || e.Reason == "" || e.Value != `{"not json` {
		t.Errorf("Kafka DLQ entry: %+v", e)
	}
	if out := adminCLI(t, cfg, 0, "dlq", "ls", "--source", "kafka", "--topic", cfg.Topic); !strings.Contains(out, "poison-group") || !strings.Contains(out, "REASON") {
		t.Errorf("dlq ls --source kafka (table): %s", out)
	}
	if out := adminCLI(t, cfg, 0, "dlq", "replay", "--source", "kafka", "--topic", cfg.Topic, "0:0"); !strings.Contains(out, "replayed 1") {
		t.Errorf("Kafka replay: %s", out)
	}
	testenv.WaitFor(t, 20*time.Second, "the replayed poison back in the DLQ", func() bool {
		kl = adminJSON[admin.DLQList](t, cfg, "dlq", "ls", "--source", "kafka", "--topic", cfg.Topic)
		return len(kl.Entries) == 1 && kl.Entries[0].ID == "0:1"
	})

	// Groups and scale: partition 0 pinned to 3 workers, which the dev
	// worker runs; auto hands it back.
	if out := adminCLI(t, cfg, 0, "groups", "ls"); !strings.Contains(out, "BULK GROUPS") {
		t.Errorf("groups ls: %s", out)
	}
	// Where a job is: one never sent is not found, and with a Kafka
	// position above anything relayed, still in Kafka.
	if out := adminCLI(t, cfg, 0, "jobs", "show", cfg.Topic, "no-such-job"); !strings.Contains(out, "not-found") || !strings.Contains(out, "partition and offset") {
		t.Errorf("jobs show: %s", out)
	}
	if v := adminJSON[queue.JobView](t, cfg, "jobs", "show", "--partition", "0", "--offset", "999999999", cfg.Topic, "later"); v.State != queue.WhereInKafka || v.ID != "later" {
		t.Errorf("jobs show with a position: %+v", v)
	}
	if out := adminCLI(t, cfg, 0, "jobs", "ls", "--topic", cfg.Topic, "--partition", "0"); !strings.Contains(out, "STATE") || !strings.Contains(out, "ATTEMPTS") {
		t.Errorf("jobs ls: %s", out)
	}
	// Across partitions and states, every page (the dead set was purged
	// above: the listing may be empty, and says so).
	if out := adminCLI(t, cfg, 0, "jobs", "ls", "--topic", cfg.Topic, "--state", "dead", "--all"); !strings.Contains(out, "STATE") {
		t.Errorf("jobs ls --state dead --all: %s", out)
	}
	if code, _, errOut := cliRun("jobs", "cancel", cfg.Topic, "no-such-job", "--admin-url", "http://"+cfg.CoordinatorAddr, "--admin-token-file", filepath.Join(cfg.Dir, "admin-token")); code != 1 || !strings.Contains(errOut, "does not hold it") {
		t.Errorf("jobs cancel of an unknown job: exit %d: %s", code, errOut)
	}
	if out := adminCLI(t, cfg, 0, "scale", "set", "0", "3"); !strings.Contains(out, "pinned 3") {
		t.Errorf("scale set: %s", out)
	}
	testenv.WaitFor(t, 30*time.Second, "partition 0 to run 3 workers", func() bool {
		l := adminJSON[admin.ScaleList](t, cfg, "scale", "show")
		return l.Partitions[0].Workers == 3 && l.Partitions[0].Pin != nil
	})
	if out := adminCLI(t, cfg, 0, "scale", "show"); !strings.Contains(out, "pinned 3") || !strings.Contains(out, "CHECKPOINT") {
		t.Errorf("scale show: %s", out)
	}
	adminCLI(t, cfg, 0, "scale", "set", "0", "auto")

	// Canaries, and stats over the API in both outputs.
	testenv.WaitFor(t, 30*time.Second, "canaries on every path", func() bool {
		// Exit 1 while an alert is up: that is what a cron checks.
		code, out, _ := cliRun("canary", "status", "-o", "json", "--admin-url", "http://"+cfg.CoordinatorAddr, "--admin-token-file", filepath.Join(cfg.Dir, "admin-token"))
		var c admin.CanaryState
		return code == 0 && json.Unmarshal([]byte(out), &c) == nil && c.Monitor && len(c.Paths) == cfg.RedisPartitions && len(c.Alerts) == 0
	})
	if out := adminCLI(t, cfg, 0, "canary", "status"); !strings.Contains(out, "every path is fresh") {
		t.Errorf("canary status: %s", out)
	}
	code, out, errOut := cliRun("stats", "--admin-url", "http://"+cfg.CoordinatorAddr, "--admin-token-file", filepath.Join(cfg.Dir, "admin-token"))
	if code > 1 || !strings.Contains(out, "topic "+cfg.Topic) {
		t.Errorf("stats over the API: exit %d\n%s\n%s", code, out, errOut)
	}

	// Periodic jobs: a schedule set from the command line fires through the
	// dev gate, runs, and shows its last job (kept by retain) as done;
	// run-now fires one more; delete stops it.
	if out := adminCLI(t, cfg, 0, "periodic", "set", "tick", "--every", "1s", "--topic", cfg.Topic, "--type", "hello", "--retain", "1m", "--payload", `{"n":1}`); !strings.Contains(out, "every 1s") {
		t.Errorf("periodic set: %s", out)
	}
	testenv.WaitFor(t, 30*time.Second, "a periodic job to run", func() bool {
		p := adminJSON[admin.PeriodicState](t, cfg, "periodic", "show", "tick")
		return p.LastJob != nil && p.LastJob.State == "done" && strings.HasPrefix(p.LastJob.ID, "periodic:tick:")
	})
	nonce := adminJSON[admin.PeriodicState](t, cfg, "periodic", "run-now", "tick").Schedule.RunNow
	testenv.WaitFor(t, 30*time.Second, "the run-now's job to be fired", func() bool {
		p := adminJSON[admin.PeriodicState](t, cfg, "periodic", "show", "tick")
		return p.State != nil && p.State.RunNow == nonce
	})
	if out := adminCLI(t, cfg, 0, "periodic", "ls"); !strings.Contains(out, "tick") || !strings.Contains(out, "periodic:tick:") {
		t.Errorf("periodic ls: %s", out)
	}
	if code, _, errOut := cliRun("periodic", "set", "bad", "--every", "10ms", "--topic", cfg.Topic, "--type", "x", "--admin-url", "http://"+cfg.CoordinatorAddr, "--admin-token-file", filepath.Join(cfg.Dir, "admin-token")); code != 1 || !strings.Contains(errOut, "every") {
		t.Errorf("a bad schedule: exit %d %s", code, errOut)
	}
	adminCLI(t, cfg, 0, "periodic", "delete", "tick")

	// Errors: no token, a read-only role, an unreachable coordinator.
	code, _, errOut = cliRun("rate", "get", "--admin-url", "http://"+cfg.CoordinatorAddr)
	if code != 1 || !strings.Contains(errOut, "HTTP 401") || !strings.Contains(errOut, "SLUICE_ADMIN_TOKEN") {
		t.Errorf("without a token: exit %d: %s", code, errOut)
	}
	port, err := stack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	nowhere := "http://127.0.0.1:" + strconv.Itoa(port)
	for _, args := range [][]string{{"dlq", "ls"}, {"stats"}, {"canary", "status"}} {
		code, _, errOut := cliRun(append(args, "--admin-url", nowhere, "--admin-token", "whatever-token")...)
		if code != 1 || !strings.Contains(errOut, "cannot reach the admin API at "+nowhere) ||
			!strings.Contains(errOut, "--admin-url / SLUICE_ADMIN_URL") || !strings.Contains(errOut, "sluice coordinator") {
			t.Errorf("sluice %s against nothing: exit %d: %s", args[0], code, errOut)
		}
	}
	t.Setenv("SLUICE_ADMIN_URL", nowhere)
	if code, _, errOut := cliRun("rate", "get", "--admin-token", "x"); code != 1 || !strings.Contains(errOut, nowhere) {
		t.Errorf("SLUICE_ADMIN_URL not followed: %d %s", code, errOut)
	}
}

// TestCLIAdminHelpAndUsage: every admin command documents itself and
// refuses wrong arguments before calling anything.
func TestCLIAdminHelpAndUsage(t *testing.T) {
	for _, args := range [][]string{{"dlq", "ls"}, {"dlq", "replay"}, {"rate", "set"}, {"limits", "set"}, {"groups", "cancel"}, {"scale", "set"}, {"canary", "status"}, {"stats"}} {
		code, out, _ := cliRun(append(args, "--help")...)
		if code != 0 || !strings.Contains(out, "--admin-url") || !strings.Contains(out, "--admin-token") {
			t.Errorf("sluice %s --help: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}
	if code, out, _ := cliRun("dlq"); code != 2 || !strings.Contains(out, "sluice dlq replay") {
		t.Errorf("sluice dlq: exit %d\n%s", code, out)
	}
	if code, out, _ := cliRun("help"); code != 0 || !strings.Contains(out, "dlq") || !strings.Contains(out, "scale") {
		t.Errorf("sluice help: %d %s", code, out)
	}
	// Usage errors exit 2, as docs/admin.md says (issue 32).
	for _, args := range [][]string{{"rate", "set", "jobs"}, {"scale", "set", "0", "many"}, {"dlq", "replay"}, {"dlq", "ls", "-o", "yaml"}, {"groups", "frobnicate"},
		{"jobs", "ls", "--limit", "5000"}, {"jobs", "ls", "--state", "sleeping"}, {"jobs", "ls", "--topic", "a b"}, {"jobs", "cancel", "jobs"}, {"jobs", "delete"}} {
		if code, _, errOut := cliRun(append(args, "--admin-url", "http://127.0.0.1:1")...); code != 2 || strings.Contains(errOut, "cannot reach") {
			t.Errorf("sluice %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
}

// The admin token comes from SLUICE_ADMIN_TOKEN (or the file in
// SLUICE_ADMIN_TOKEN_FILE), never from a SLUICE_TOKEN set for the gate:
// the flags are named admin-token so that cli's shared fallback is the
// admin variable itself.
func TestAdminTokenFromItsOwnVariable(t *testing.T) {
	resolve := func() string {
		t.Helper()
		fs := flag.NewFlagSet("rate", flag.ContinueOnError)
		var f adminFlags
		f.register(fs)
		if _, err := parseArgs(fs, "sluice rate get", "rate", []string{"get"}, io.Discard); err != nil {
			t.Fatal(err)
		}
		c, err := f.client()
		if err != nil {
			t.Fatal(err)
		}
		return c.Token
	}
	t.Setenv("SLUICE_TOKEN", "the-gate-token")
	t.Setenv("SLUICE_ADMIN_TOKEN", "the-admin-token")
	if got := resolve(); got != "the-admin-token" {
		t.Fatalf("token %q, want SLUICE_ADMIN_TOKEN's", got)
	}
	file := filepath.Join(t.TempDir(), "admin-token")
	os.WriteFile(file, []byte("from-the-file\n"), 0o600)
	t.Setenv("SLUICE_ADMIN_TOKEN", "")
	os.Unsetenv("SLUICE_ADMIN_TOKEN")
	t.Setenv("SLUICE_ADMIN_TOKEN_FILE", file)
	if got := resolve(); got != "from-the-file" {
		t.Fatalf("token %q, want the first line of SLUICE_ADMIN_TOKEN_FILE's file", got)
	}
}
