package coordinator_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/testenv"
)

// periodicGate plays the gate for the scheduler: it records each job
// posted, by topic and id.
type periodicGate struct {
	srv     *httptest.Server
	mu      sync.Mutex
	posts   []string // "<topic> <id>"
	refused int      // posts to topic jbos, answered 404
}

// startPeriodic starts a coordinator whose scheduler posts to a recording
// gate with a token, and waits until it leads.
func startPeriodic(t *testing.T, b *bed) (*periodicGate, *running) {
	t.Helper()
	gate := newPeriodicGate(t)
	tokenFile := t.TempDir() + "/token"
	if err := os.WriteFile(tokenFile, []byte("periodic-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.start(t, "c1", func(c *coordinator.Config) {
		c.Periodic.GateURL = gate.srv.URL
		c.Periodic.Token.File = tokenFile
	})
	r.waitHolding(t)
	return gate, r
}

func newPeriodicGate(t *testing.T) *periodicGate {
	g := &periodicGate{}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

// serve records a periodic post, or answers 400.
func (g *periodicGate) serve(w http.ResponseWriter, r *http.Request) {
	topic, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/v1/topics/"), "/jobs")
	body, _ := io.ReadAll(r.Body)
	var j struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if !ok || r.Method != http.MethodPost || json.Unmarshal(body, &j) != nil || j.ID == "" || r.Header.Get("Authorization") != "Bearer periodic-secret" {
		http.Error(w, `{"error":"not a periodic post"}`, http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if topic == "jbos" { // a typo: the gate has no such topic
		g.refused++
		http.Error(w, `{"error":"unknown topic \"jbos\""}`, http.StatusNotFound)
		return
	}
	g.posts = append(g.posts, topic+" "+j.ID)
	w.WriteHeader(http.StatusAccepted)
}

// since returns the posts after the first n.
func (g *periodicGate) since(n int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.posts[min(n, len(g.posts)):]...)
}

func (g *periodicGate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.posts)
}

// waitPostTo waits for a post to topic after the first n posts.
func (g *periodicGate) waitPostTo(t *testing.T, n int, topic, what string) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, what, func() bool {
		for _, p := range g.since(n) {
			if strings.HasPrefix(p, topic+" ") {
				return true
			}
		}
		return false
	})
}

// A post the gate answers 404 (a topic typo) is not retried every second:
// the run-now is recorded as dealt with, the state says it was refused for
// good, and the log says so once (issue 32).
func TestPeriodicRefusedPostIsNotRetried(t *testing.T) {
	b := newBed(t, 2)
	gate, r := startPeriodic(t, b)
	key, _ := periodic.ScheduleKey(b.layout.Stage, "typo")
	if _, err := b.consul.Client().KV().Put(&consulapi.KVPair{Key: key, Value: []byte(`{"every":"24h","topic":"jbos","type":"report","run_now":"n1"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	store := periodic.PoolStore{Pool: b.pool}
	var st periodic.State
	testenv.WaitFor(t, 20*time.Second, "the refused run-now recorded as dealt with", func() bool {
		states, err := store.Load(context.Background())
		st = states["typo"]
		return err == nil && st.RunNow == "n1"
	})
	if !strings.HasPrefix(st.LastError, "refused for good") || !strings.Contains(st.LastError, "404") {
		t.Errorf("state: %+v", st)
	}
	gate.mu.Lock()
	refused := gate.refused
	gate.mu.Unlock()
	if refused != 1 || strings.Count(r.logs.String(), "refused a slot's job for good") != 1 {
		t.Errorf("%d posts refused, want 1; logs:\n%s", refused, r.logs.String())
	}
}

func TestPeriodicSchedulesFireFollowLiveChangesAndOutliveAConsulRestart(t *testing.T) {
	b := newBed(t, 2)
	gate, r := startPeriodic(t, b)
	kv := b.consul.Client().KV()
	key, _ := periodic.ScheduleKey(b.layout.Stage, "tick")
	put := func(value string) {
		t.Helper()
		if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	const every = `{"every":"1s","topic":"jobs","type":"report"}`
	put(every)

	// It fires on its slots: consecutive seconds, each id its slot's.
	testenv.WaitFor(t, 20*time.Second, "three slots posted", func() bool { return gate.count() >= 3 })
	posts := gate.since(0)
	for i, p := range posts[:3] {
		topic, id, _ := strings.Cut(p, " ")
		slot := strings.TrimPrefix(id, "periodic:tick:")
		if topic != "jobs" || slot == id {
			t.Fatalf("post %d: %q", i, p)
		}
		if i > 0 {
			_, prev, _ := strings.Cut(posts[i-1], " ")
			if prev >= id && len(prev) == len(id) {
				t.Fatalf("slots out of order or repeated: %v", posts[:3])
			}
		}
	}

	// A live change takes effect within a watch round: now to "other".
	n := gate.count()
	put(`{"every":"1s","topic":"other","type":"report"}`)
	gate.waitPostTo(t, n, "other", "a post to the changed topic")

	// A bad value is refused and the last good schedule goes on.
	put(`{"every":"10ms","topic":"jobs","type":"report"}`)
	testenv.WaitFor(t, 10*time.Second, "the bad value to be logged", func() bool {
		return strings.Contains(r.logs.String(), "refused a schedule's new value")
	})
	n = gate.count()
	gate.waitPostTo(t, n, "other", "the last good schedule to go on firing")

	// Consul restarted: once its KV is back (the test bed's dev agent
	// forgets it, so the test writes the schedule again, as a restore
	// would), the schedule fires again.
	b.consul.Restart()
	put(`{"every":"1s","topic":"after-restart","type":"report"}`)
	n = gate.count()
	gate.waitPostTo(t, n, "after-restart", "a post after the Consul restart")
}
