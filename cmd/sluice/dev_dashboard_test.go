package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	consulapi "github.com/hashicorp/consul/api"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/console/dashboard"
	"github.com/sluicehq/sluice/internal/limits"
	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/topics"
)

// chromiumPath finds Debian's chromium. A missing browser fails the test
// with the fix, as a missing redis-server does: nothing is skipped.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found in PATH (the dashboard test drives the page in headless Chromium): " +
		"run `apt-get install chromium` or `make deps`, or point SLUICE_CHROMIUM at a Chromium binary")
	return ""
}

// browser is a headless Chromium for the test. It collects what the page
// reports as broken: uncaught exceptions, console errors and the browser's
// own errors, among them Content-Security-Policy violations and failed
// requests (a blocked script or style would otherwise only show as a blank
// panel).
type browser struct {
	ctx context.Context

	mu       sync.Mutex
	problems []string
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
		// Docker gives /dev/shm 64 MB, too little for Chromium's renderer;
		// /tmp serves as well everywhere else. (chromedp's default too: set
		// here so that no default change can drop it.)
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to start as root with its sandbox on, and CI and
		// fresh machines here run the tests as root. The page is our own.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// The first action starts the browser and binds it to its context: this
	// one has no deadline, and each later action gets its own.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting headless Chromium: %v (is it installed? `apt-get install chromium` or `make deps`)", err)
	}
	b := &browser{ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return // the browser closed
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.problems = append(b.problems, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// answerDialogs answers the page's confirm() dialogs, in order, with the
// decisions sent on answers, and passes each dialog's message on. A dialog
// blocks the page, and the click that opened it, until it is answered.
func (b *browser) answerDialogs() (answers chan<- bool, messages <-chan string) {
	ans, msgs := make(chan bool, 4), make(chan string, 4)
	dialogs := chromedp.Events(b.ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return // the browser closed
			}
			msgs <- ev.Message
			var accept bool
			select {
			case accept = <-ans:
			case <-b.ctx.Done():
				return
			}
			if _, err := chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept}); err != nil {
				return
			}
		}
	}()
	return ans, msgs
}

// forget drops the problems reported so far.
func (b *browser) forget() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = nil
}

func (b *browser) pageProblems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// do runs actions with a deadline; on failure it keeps a screenshot of the
// page as it was, next to the test's artifact.
func (b *browser) do(t *testing.T, what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.screenshot(t, "dashboard-failed.png")
		t.Fatalf("%s: %v; the page reported: %q", what, err, b.pageProblems())
	}
}

// waitJS polls a JavaScript expression in the page until it is true. Right
// after a navigation the poll can land in the old document's context, which
// Chromium then drops ("Cannot find context"): it is started again in the
// new one, within the same deadline.
func (b *browser) waitJS(t *testing.T, what string, timeout time.Duration, expr string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithDeadline(b.ctx, deadline.Add(5*time.Second))
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
			chromedp.WithPollingTimeout(time.Until(deadline)), chromedp.WithPollingInterval(100*time.Millisecond)))
		cancel()
		if err == nil {
			return
		}
		if gone := strings.Contains(err.Error(), "Cannot find context") || strings.Contains(err.Error(), "context was destroyed"); !gone || time.Now().After(deadline) {
			b.screenshot(t, "dashboard-failed.png")
			t.Fatalf("waiting for %s: %v; the page reported: %q", what, err, b.pageProblems())
		}
	}
}

func (b *browser) text(t *testing.T, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("reading %s: %v", expr, err)
	}
	return s
}

// screenshot keeps the whole page as a test artifact: in $SLUICE_ARTIFACTS
// when set (CI collects that folder), else in .artifacts/ at the module root.
func (b *browser) screenshot(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot: %v", err)
		return ""
	}
	dir := os.Getenv("SLUICE_ARTIFACTS")
	if dir == "" {
		root, err := stack.ModuleRoot()
		if err != nil {
			t.Errorf("screenshot: %v", err)
			return ""
		}
		dir = filepath.Join(root, ".artifacts")
	}
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("screenshot: %v", err)
		return ""
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return ""
	}
	t.Logf("screenshot of the dashboard: %s", path)
	return path
}

func postJSON(t *testing.T, url, body string) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return b
}

// enqueueID posts a job (postJSON) and gives the id the gate answered.
func enqueueID(t *testing.T, url, body string) string {
	t.Helper()
	out := postJSON(t, url, body)
	var a struct{ ID string }
	if err := json.Unmarshal(out, &a); err != nil || a.ID == "" {
		t.Fatalf("enqueue answer %s: %v", out, err)
	}
	return a.ID
}

// adminPut does what the dashboard's editor does, for the test to compare
// the page's message with the API's own answer.
func adminPut(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error string `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error
}

// The dashboard against a running sluice dev, in headless Chromium: the
// token form; the partitions with live numbers, a rate-limited bulk group's
// progress and ETA, the canaries, the dead set and the Kafka DLQ; its
// replay button puts a dead job back (seen in Redis); its editors write
// Consul, and a bad value shows the API's own error; an API that goes away
// is said. A full-page screenshot is kept.
func TestDevDashboard(t *testing.T) {
	started := time.Now()
	b := startBrowser(t)

	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	cfg.CanaryInterval = time.Second
	const token, readToken = "dashboard-test-token", "dashboard-read-token"
	cfg.AdminTokens = token + " admin;" + readToken + " read"
	startDev(t, &cfg)
	gate := "http://" + cfg.GateAddr
	coord := "http://" + cfg.CoordinatorAddr
	layout := queue.Keyspace{Stage: "dev", Partitions: cfg.RedisPartitions}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	defer rdb.Close()
	ctx := context.Background()
	consul := devConsul(t, cfg)
	// consulRate reads a topic's relay rate as the relay does.
	consulRate := func(key string) (rate float64, paused bool, ok bool) {
		kv, _, err := consul.KV().Get(key, nil)
		if err != nil || kv == nil {
			return 0, false, false
		}
		r, err := limits.ParseRate(kv.Value)
		if err != nil {
			return 0, false, false
		}
		return r.PerSecond, r.Paused, true
	}
	// consulLimit reads a resource's execution limit as the worker does.
	consulLimit := func(key string) (rate float64, ok bool) {
		kv, _, err := consul.KV().Get(key, nil)
		if err != nil || kv == nil {
			return 0, false
		}
		l, err := limits.ParseLimit(kv.Value)
		if err != nil {
			return 0, false
		}
		return l.PerSecond, true
	}

	// Without a token the page asks for one, and a wrong one is refused.
	b.do(t, "opening the dashboard", 20*time.Second, chromedp.Navigate(coord+"/"))
	b.waitJS(t, "the token form", 10*time.Second,
		`!document.querySelector('#login').hidden && document.querySelector('#main').hidden && document.querySelector('#login-msg').textContent.includes('needs a token')`)
	b.do(t, "entering a wrong token", 10*time.Second,
		chromedp.SetValue(chromedp.ID("token"), "not-the-token"),
		chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)))
	b.waitJS(t, "the wrong token refused", 10*time.Second,
		`!document.querySelector('#login').hidden && document.querySelector('#login-msg').textContent.includes('refused this token')`)
	// Then the way an operator's link does: the token in the fragment,
	// which never reaches the server.
	b.do(t, "opening the dashboard with the token", 20*time.Second, chromedp.Navigate("about:blank"), chromedp.Navigate(coord+"/#token="+token))
	b.waitJS(t, "the page to be signed in and live", 20*time.Second,
		`!document.querySelector('#main').hidden && document.querySelector('#conn').textContent.startsWith('live')`)
	if h := b.text(t, `location.hash`); h != "" {
		t.Errorf("the token stayed in the address bar: %q", h)
	}
	if s := b.text(t, `sessionStorage.getItem('sluice.admin.token') || ''`); s != token {
		t.Errorf("sessionStorage holds %q, want the token", s)
	}
	// Only what comes after the sign-in counts as the page's problems (the
	// two refusals above log their 401s).
	b.forget()

	// An execution limit set from the page, for the bulk group below: its
	// items then start at 10/s, so the group is still running while the
	// page measures its rate and ETA.
	const resource, limit, bulkItems = "dash-api", 10, 200
	b.do(t, "setting a limit on another resource", 10*time.Second,
		chromedp.SetValue(chromedp.ID("limit-new-resource"), resource),
		chromedp.SetValue(chromedp.ID("limit-new-rate"), strconv.Itoa(limit)),
		chromedp.Click(chromedp.CSS(`#limit-new button[type=submit]`)))
	testenv.WaitFor(t, 10*time.Second, "the limit in Consul", func() bool {
		r, ok := consulLimit("sluice/dev/limits/" + resource)
		return ok && r == limit
	})
	b.waitJS(t, "the limit in force on the page", 10*time.Second,
		fmt.Sprintf(`(() => { const r = document.querySelector('#limits-table tr[data-key=%q]'); return r && r.cells[1].textContent.startsWith('%d starts/s'); })()`, resource, limit))
	testenv.WaitFor(t, 10*time.Second, "the dev worker to follow the limit", func() bool {
		return metricValue(t, "http://"+cfg.WorkerAddr+"/metrics", fmt.Sprintf(`sluice_worker_rate_limit_per_second{resource=%q}`, resource)) == strconv.Itoa(limit)
	})

	// A periodic schedule: the panel shows its last job done, and pauses it.
	tick, _ := periodic.ScheduleKey("dev", "dash-tick")
	if _, err := consul.KV().Put(&consulapi.KVPair{Key: tick, Value: []byte(`{"every":"1s","topic":"` + cfg.Topic + `","type":"hello","retain":"1m"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	b.waitJS(t, "the schedule's last job done on the page", 30*time.Second,
		`(() => { const r = document.querySelector('#periodic-table tr[data-key="dash-tick"]'); return r && /^periodic:dash-tick:\d+: done$/.test(r.cells[5].textContent); })()`)
	b.do(t, "pausing the schedule", 10*time.Second, chromedp.Click(chromedp.CSS(`#periodic-table tr[data-key="dash-tick"] button.pause`)))
	testenv.WaitFor(t, 10*time.Second, "the schedule paused in Consul", func() bool {
		kv, _, err := consul.KV().Get(tick, nil)
		if err != nil || kv == nil {
			return false
		}
		p, err := periodic.Parse("dash-tick", kv.Value)
		return err == nil && p.Paused
	})
	b.waitJS(t, "the page to show it paused", 10*time.Second,
		`document.querySelector('#periodic-table tr[data-key="dash-tick"]').cells[3].textContent === 'PAUSED'`)

	// Work for every panel: jobs over many groups (throughput on several
	// partitions), jobs that fail at once into the dead set (the sleep
	// handler refuses a payload without a number: a permanent error), the
	// rate-limited bulk group, and a record the relay cannot decode, for
	// the Kafka DLQ.
	var batch []string
	for i := range 60 {
		batch = append(batch, fmt.Sprintf(`{"type":"work","group":"dash-g%d"}`, i%16))
	}
	postJSON(t, gate+"/v1/topics/jobs/jobs:batch", `[`+strings.Join(batch, ",")+`]`)
	var deadIDs, deadGroups []string
	for i := range 3 {
		group := fmt.Sprintf("dash-bad%d", i)
		deadIDs = append(deadIDs, enqueueID(t, gate+"/v1/topics/jobs/jobs", `{"type":"sleep","group":"`+group+`","max_attempts":1,"payload":{"ms":"soon"}}`))
		deadGroups = append(deadGroups, group)
	}
	items := make([]string, bulkItems)
	for i := range items {
		items[i] = fmt.Sprintf(`{"n":%d}`, i)
	}
	postJSON(t, gate+"/v1/topics/jobs/groups", `{"id":"dash-bulk","type":"work","resource":"`+resource+`","items":[`+strings.Join(items, ",")+`]}`)
	// The key is markup: the page must show it as text.
	const poisonKey = `dash-<b>poison</b>`
	kc, err := kgo.NewClient(kgo.SeedBrokers(cfg.KafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if err := kc.ProduceSync(ctx, &kgo.Record{Topic: cfg.Topic, Key: []byte(poisonKey), Value: []byte(`not json <b>at all</b>`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// deadKey is the partition of dead job i, which its dead set must hold.
	deadKey := func(i int) (queue.Keys, error) {
		k := layout.Keys(layout.QueueOf(cfg.Topic, deadGroups[i], ""))
		if _, err := rdb.ZScore(ctx, k.Dead(), deadIDs[i]).Result(); err != nil {
			return queue.Keys{}, fmt.Errorf("%s not in the dead set of its group's partition: %v", deadIDs[i], err)
		}
		return k, nil
	}

	// Partitions: one row each, with numbers that move.
	b.waitJS(t, "a row per partition", 10*time.Second,
		fmt.Sprintf(`document.querySelectorAll('#partitions-table tbody tr').length === %d`, cfg.RedisPartitions))
	// The canaries complete a job per path every second: some partition's
	// completed counter grows between two polls, a throughput above zero.
	b.waitJS(t, "a throughput above zero", 20*time.Second,
		`[...document.querySelectorAll('#partitions-table tbody tr')].some(r => parseFloat(r.cells[7].textContent) > 0)`)
	b.waitJS(t, "the sparkline drawn", 10*time.Second,
		`[...document.querySelectorAll('#partitions-table tbody polyline')].some(p => p.getAttribute('points').split(' ').length >= 2)`)
	// The dead column sums to what the dead sets hold.
	b.waitJS(t, "the dead jobs counted per partition", 10*time.Second,
		fmt.Sprintf(`[...document.querySelectorAll('#partitions-table tbody tr')].reduce((a, r) => a + parseInt(r.cells[4].textContent.replace(/,/g, ''), 10), 0) >= %d`, len(deadIDs)))

	// The rate-limited group's jobs wait: some partition holds work.
	b.waitJS(t, "jobs waiting in a partition", 10*time.Second,
		`[...document.querySelectorAll('#partitions-table tbody tr')].some(r => [1, 2, 3].some(i => parseInt(r.cells[i].textContent.replace(/,/g, ''), 10) > 0))`)

	// Groups: the bulk group with its bar, its rate and an ETA measured
	// between polls (at 10 jobs/s, 200 items take 20 s).
	b.waitJS(t, "the bulk group's progress bar", 20*time.Second,
		fmt.Sprintf(`(() => { const p = document.querySelector('#groups-table tr[data-key="jobs/dash-bulk"] progress');
		          return p && p.max === %d && p.value > 0; })()`, bulkItems))
	b.waitJS(t, "the bulk group's ETA", 20*time.Second,
		`(() => { const r = document.querySelector('#groups-table tr[data-key="jobs/dash-bulk"]');
		          return r && /^[0-9.]+ (s|min)$/.test(r.cells[8].textContent) && parseFloat(r.cells[7].textContent) > 0; })()`)
	eta := b.text(t, `document.querySelector('#groups-table tr[data-key="jobs/dash-bulk"]').cells[8].textContent`)
	rate := b.text(t, `document.querySelector('#groups-table tr[data-key="jobs/dash-bulk"]').cells[7].textContent`)
	t.Logf("bulk group on the page: %s jobs/s, ETA %s", rate, eta)
	// The limit holds the group to 10/s: a rate far above says the page
	// measured something else.
	if r, _ := strconv.ParseFloat(rate, 64); r > 2*limit {
		t.Errorf("the page says the group finishes %s jobs/s, with a limit of %d/s", rate, limit)
	}

	// Canaries: a row per path (one per Kafka partition of the topic), and
	// a diagnosis line.
	b.waitJS(t, "the canary paths", 20*time.Second,
		fmt.Sprintf(`document.querySelectorAll('#canary-table tbody tr').length === %d && document.querySelector('#canary-diagnosis').textContent !== ''`, cfg.Partitions))

	// Dead letters: the three dead jobs and the poison record, escaped.
	for _, id := range deadIDs {
		b.waitJS(t, "dead job "+id+" listed", 20*time.Second,
			fmt.Sprintf(`!!document.querySelector('#deadset-table tr[data-key=%q]')`, cfg.Topic+"/"+id))
	}
	b.waitJS(t, "the poison record in the Kafka DLQ, its key as text", 20*time.Second,
		fmt.Sprintf(`[...document.querySelectorAll('#dlq-table tbody tr')].some(r => r.textContent.includes(%q))`, poisonKey))
	if n := b.text(t, `String(document.querySelectorAll('#main b').length)`); n != "0" {
		t.Errorf("data became markup: %s <b> elements in the page", n)
	}

	// Find a job: a dead one by its topic, id and group shows its state
	// and last error; an unknown id says what cannot be known.
	b.do(t, "finding a dead job", 10*time.Second,
		chromedp.SetValue(chromedp.ID("find-id"), deadIDs[2]),
		chromedp.SetValue(chromedp.ID("find-group"), deadGroups[2]),
		chromedp.Click(chromedp.CSS(`#find-form button[type=submit]`)))
	b.waitJS(t, "the dead job found, with its last error", 10*time.Second,
		`!document.querySelector('#find-result').hidden && document.querySelector('#find-result .find-state').textContent === 'dead' && document.querySelector('#find-result').textContent.includes('last error')`)
	b.do(t, "finding an unknown job", 10*time.Second,
		chromedp.SetValue(chromedp.ID("find-id"), "no-such-job"),
		chromedp.SetValue(chromedp.ID("find-group"), "no-such-group"),
		chromedp.Click(chromedp.CSS(`#find-form button[type=submit]`)))
	b.waitJS(t, "the unknown job not found", 10*time.Second,
		`document.querySelector('#find-result .find-state').textContent === 'not-found'`)

	// Replay one dead job from its row: it leaves the dead set with the
	// replay recorded on its hash (it fails again, being the same job, and
	// dies anew: so the mark, not its absence, is the evidence).
	replayed := deadIDs[0]
	k, err := deadKey(0)
	if err != nil {
		t.Fatal(err)
	}
	replayedField := "funnel:" + cfg.Topic + ":" + queue.MilestoneReplayed
	replayedBefore, _ := rdb.HGet(ctx, k.Stats(), replayedField).Int64()
	b.do(t, "clicking Replay", 10*time.Second, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#deadset-table tr[data-key=%q] button.replay`, cfg.Topic+"/"+replayed))))
	testenv.WaitFor(t, 10*time.Second, "the job's replay in Redis", func() bool {
		v, _ := rdb.HGet(ctx, k.Job(replayed), "replayed_ms").Result()
		return v != ""
	})
	b.waitJS(t, "the replay's confirmation", 10*time.Second,
		fmt.Sprintf(`document.querySelector('#dead-msg').textContent.includes(%q)`, "Replayed "+replayed))
	if n, _ := rdb.HGet(ctx, k.Stats(), replayedField).Int64(); n != replayedBefore+1 {
		t.Errorf("the partition's replayed counter went from %d to %d, want one more", replayedBefore, n)
	}

	// Purge asks first: dismissed, nothing happens; accepted, the job and
	// its record are gone from Redis.
	answers, dialogs := b.answerDialogs()
	purged := deadIDs[1]
	pk, err := deadKey(1)
	if err != nil {
		t.Fatal(err)
	}
	purge := chromedp.Click(chromedp.CSS(fmt.Sprintf(`#deadset-table tr[data-key=%q] button.purge`, cfg.Topic+"/"+purged)))
	dialog := func() string {
		select {
		case m := <-dialogs:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no confirmation asked")
			return ""
		}
	}
	answers <- false
	b.do(t, "clicking Purge, then Cancel", 10*time.Second, purge)
	if m := dialog(); !strings.Contains(m, purged) {
		t.Errorf("the purge's confirmation %q does not name the job", m)
	}
	// The page polls at once after an action it makes; a cancelled one
	// makes none, so one more poll must still list the job.
	b.waitJS(t, "a poll after the cancel", 10*time.Second, `(() => {
		const c = document.querySelector('#conn').textContent; window.__seen = window.__seen || c; return c !== window.__seen; })()`)
	if _, err := rdb.ZScore(ctx, pk.Dead(), purged).Result(); err != nil {
		t.Fatalf("a cancelled purge removed %s from the dead set: %v", purged, err)
	}
	answers <- true
	b.do(t, "clicking Purge, then OK", 10*time.Second, purge)
	dialog()
	testenv.WaitFor(t, 10*time.Second, "the purged job gone from Redis", func() bool {
		_, inSet := rdb.ZScore(ctx, pk.Dead(), purged).Result()
		n, _ := rdb.Exists(ctx, pk.Job(purged)).Result()
		return errors.Is(inSet, redis.Nil) && n == 0
	})
	b.waitJS(t, "the purged job gone from the page", 10*time.Second,
		fmt.Sprintf(`!document.querySelector('#deadset-table tr[data-key=%q]')`, cfg.Topic+"/"+purged))

	// The relay rate editor writes Consul, and Pause and Resume too.
	rateKey := "sluice/dev/relay/" + cfg.Topic + "/rate"
	row := fmt.Sprintf(`#relay-table tr[data-key=%q]`, cfg.Topic)
	b.waitJS(t, "the topic's rate editor", 20*time.Second, fmt.Sprintf(`!!document.querySelector('%s form.editor')`, row))
	b.do(t, "setting the rate to 250", 10*time.Second,
		chromedp.SetValue(chromedp.CSS(row+` input.rate`), "250"),
		chromedp.Click(chromedp.CSS(row+` button.save`)))
	testenv.WaitFor(t, 10*time.Second, "the rate of 250 in Consul", func() bool {
		r, paused, ok := consulRate(rateKey)
		return ok && r == 250 && !paused
	})
	b.waitJS(t, "the rate in force on the page", 10*time.Second,
		fmt.Sprintf(`document.querySelector('%s').cells[1].textContent.startsWith('250 jobs/s')`, row))
	b.do(t, "pausing the relay", 10*time.Second, chromedp.Click(chromedp.CSS(row+` button.pause`)))
	testenv.WaitFor(t, 10*time.Second, "the relay paused in Consul", func() bool {
		r, paused, ok := consulRate(rateKey)
		return ok && paused && r == 250
	})
	b.waitJS(t, "the pause on the page", 10*time.Second,
		fmt.Sprintf(`document.querySelector('%s').cells[1].textContent.startsWith('PAUSED') && document.querySelector('%s button.pause').textContent === 'Resume'`, row, row))
	b.do(t, "resuming the relay", 10*time.Second, chromedp.Click(chromedp.CSS(row+` button.pause`)))
	testenv.WaitFor(t, 10*time.Second, "the relay resumed in Consul", func() bool {
		r, paused, ok := consulRate(rateKey)
		return ok && !paused && r == 250
	})
	b.waitJS(t, "the resume on the page", 10*time.Second,
		fmt.Sprintf(`document.querySelector('%s').cells[1].textContent.startsWith('250 jobs/s')`, row))

	// A bad value: the API refuses it, and the page shows the API's words.
	const bad = "-5"
	status, apiErr := adminPut(t, coord+"/api/v1/rates/"+cfg.Topic, token, `{"rate":`+bad+`}`)
	if status != http.StatusBadRequest || apiErr == "" {
		t.Fatalf("PUT rate %s: %d %q, want a 400 with an error", bad, status, apiErr)
	}
	b.do(t, "entering a bad rate", 10*time.Second,
		chromedp.SetValue(chromedp.CSS(row+` input.rate`), bad),
		chromedp.Click(chromedp.CSS(row+` button.save`)))
	b.waitJS(t, "the API's error under the editor", 10*time.Second,
		fmt.Sprintf(`(() => { const m = document.querySelector('%s .msg'); return m.classList.contains('bad') && m.textContent.includes(%q); })()`, row, apiErr))
	if r, paused, ok := consulRate(rateKey); !ok || r != 250 || paused {
		t.Fatalf("after the bad value Consul holds rate %g, paused %v (read: %v), want the 250 kept", r, paused, ok)
	}

	// Topics: one created from the page is listed in Consul and made in
	// Kafka, and the page lists it. Delete asks first; the API refuses a
	// topic that holds a job, the page asks whether to force with the
	// API's words; declined, the topic stays and the refusal shows;
	// forced, it is gone from Consul, Kafka and the page.
	const newTopic, newParts = "dash-new", 2
	topicKey, err := topics.Key("dev", newTopic)
	if err != nil {
		t.Fatal(err)
	}
	// kafkaParts is how many partitions Kafka has for topic (0: none).
	kafkaParts := func(topic string) int {
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = false
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, kc)
		if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
			return 0
		}
		return len(resp.Topics[0].Partitions)
	}
	b.do(t, "creating a topic", 10*time.Second,
		chromedp.SetValue(chromedp.ID("topic-new-name"), newTopic),
		chromedp.SetValue(chromedp.ID("topic-new-partitions"), strconv.Itoa(newParts)),
		chromedp.Click(chromedp.CSS(`#topic-new button[type=submit]`)))
	topicRow := fmt.Sprintf(`#topics-table tr[data-key=%q]`, newTopic)
	b.waitJS(t, "the new topic listed on the page", 10*time.Second,
		fmt.Sprintf(`(() => { const r = document.querySelector('%s'); return r && r.cells[1].textContent === '%d' && r.cells[2].textContent === '1' && r.cells[3].textContent === 'yes'; })()`, topicRow, newParts))
	if m := b.text(t, `document.querySelector('#topics-msg').textContent`); !strings.HasPrefix(m, "Created "+newTopic+": 2 partitions, replication 1") {
		t.Errorf("the create's message: %q", m)
	}
	if kv, _, err := consul.KV().Get(topicKey, nil); err != nil || kv == nil {
		t.Fatalf("the created topic is not in Consul's list (%s): %v", topicKey, err)
	}
	for _, k := range []string{newTopic, newTopic + ".retry", newTopic + ".dlq"} {
		if n := kafkaParts(k); n == 0 {
			t.Errorf("Kafka has no topic %s after the create", k)
		}
	}
	// A job due in an hour holds the topic: delayed in Redis, or in Kafka
	// until the relay takes it. The gate finds a new topic within a second.
	job := `{"type":"work","run_at":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`
	testenv.WaitFor(t, 10*time.Second, "the gate to take a job for the new topic", func() bool {
		resp, err := http.Post(gate+"/v1/topics/"+newTopic+"/jobs", "application/json", strings.NewReader(job))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusAccepted
	})
	deleteTopic := chromedp.Click(chromedp.CSS(topicRow + ` button.topic-delete`))
	// First time: the first question accepted, forcing declined.
	answers <- true
	answers <- false
	b.do(t, "clicking Delete on the topic", 10*time.Second, deleteTopic)
	if m := dialog(); !strings.Contains(m, "Delete topic "+newTopic+"?") {
		t.Errorf("the delete's confirmation %q does not name the topic", m)
	}
	force := dialog()
	if !strings.Contains(force, "still holds jobs") || !strings.Contains(force, "anyway") {
		t.Errorf("the force question %q does not give the API's refusal and the choice", force)
	}
	b.waitJS(t, "the API's refusal on the page", 10*time.Second,
		`(() => { const m = document.querySelector('#topics-msg'); return m.classList.contains('bad') && m.textContent.startsWith('409: ') && m.textContent.includes('still holds jobs'); })()`)
	if kv, _, err := consul.KV().Get(topicKey, nil); err != nil || kv == nil {
		t.Fatalf("a declined force took the topic out of Consul's list: %v", err)
	}
	if kafkaParts(newTopic) != newParts {
		t.Fatalf("a declined force deleted the Kafka topic %s", newTopic)
	}
	// Second time: forced.
	answers <- true
	answers <- true
	b.do(t, "clicking Delete on the topic, forcing", 10*time.Second, deleteTopic)
	dialog()
	dialog()
	b.waitJS(t, "the topic gone from the page", 10*time.Second,
		fmt.Sprintf(`!document.querySelector('%s') && document.querySelector('#topics-msg').textContent.startsWith('Deleted %s: Kafka topics ')`, topicRow, newTopic))
	if kv, _, err := consul.KV().Get(topicKey, nil); err != nil || kv != nil {
		t.Errorf("the deleted topic is still in Consul's list (%v)", err)
	}
	for _, k := range []string{newTopic, newTopic + ".retry", newTopic + ".dlq"} {
		if n := kafkaParts(k); n != 0 {
			t.Errorf("Kafka still has %s (%d partitions) after the delete", k, n)
		}
	}

	// Let a few more polls draw the sparklines, then keep the picture.
	b.waitJS(t, "a few polls of throughput", 15*time.Second,
		`[...document.querySelectorAll('#partitions-table tbody polyline')].some(p => p.getAttribute('points').split(' ').length >= 4)`)
	b.screenshot(t, "dashboard.png")
	var unexpected []string
	for _, p := range b.pageProblems() {
		// The bad value's 400 and the unforced delete's 409 were the point.
		badRate := strings.Contains(p, "status of 400") && strings.Contains(p, "/api/v1/rates/"+cfg.Topic)
		refused := strings.Contains(p, "status of 409") && strings.Contains(p, "/api/v1/topics/"+newTopic)
		if !badRate && !refused {
			unexpected = append(unexpected, p)
		}
	}
	if len(unexpected) > 0 {
		t.Errorf("the page reported problems: %q", unexpected)
	}

	// A read token sees the page without the controls that change things;
	// the API would refuse them anyway.
	b.do(t, "opening the dashboard with a read token", 20*time.Second, chromedp.Navigate("about:blank"), chromedp.Navigate(coord+"/#token="+readToken))
	b.waitJS(t, "the read-only page", 20*time.Second, `document.querySelector('#conn').textContent.startsWith('live') &&
		document.querySelector('#role').textContent === 'role: read' && !document.querySelector('#readonly-note').hidden &&
		document.querySelectorAll('#deadset-table tbody tr').length > 0 && document.querySelectorAll('#topics-table tbody tr').length > 0`)
	if n := b.text(t, `String([...document.querySelectorAll('button.replay, button.purge, button.pause, form.editor, #limit-new, #deadset-purge, #topic-new, button.topic-delete')].filter(e => e.offsetParent !== null).length)`); n != "0" {
		t.Errorf("a read token's page shows %s controls that change things", n)
	}

	// An API that goes away: the page served through a stand-in that
	// forwards /api/v1/ to the coordinator, then stops.
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: cfg.CoordinatorAddr}))
	mux.Handle("/", dashboard.Handler())
	standIn := httptest.NewServer(mux)
	defer standIn.Close()
	b.do(t, "opening the dashboard through the stand-in", 20*time.Second, chromedp.Navigate(standIn.URL+"/#token="+token))
	b.waitJS(t, "the page live through the stand-in", 20*time.Second, `document.querySelector('#conn').textContent.startsWith('live')`)
	standIn.Close()
	b.waitJS(t, "the page to say the API is unreachable", 15*time.Second,
		`document.querySelector('#conn').textContent.startsWith('API unreachable since') &&
		 !document.querySelector('#banner').hidden && document.querySelector('#banner').textContent.includes('unreachable since') &&
		 document.querySelector('#main').classList.contains('stale-data')`)
	b.screenshot(t, "dashboard-unreachable.png")
	t.Logf("dashboard test took %s", time.Since(started).Round(100*time.Millisecond))
}
