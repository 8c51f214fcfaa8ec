package worker_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// A served topic no relay registered (a typo: SLUICE_WORKER_TOPICS=jbos)
// is said at start, one warning naming it and the fix, and on /readyz,
// which stays 200 (docs/worker.md#readiness) until a relay registers it
// (issue 32).
func TestAServedTopicNoRelayRegisteredIsSaid(t *testing.T) {
	b := newBed(t)
	if err := b.pool.RegisterTopics(context.Background(), []string{"jobs"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	cfg := b.config(func(c *worker.Config) {
		c.Topics = worker.TopicWeights{{Topic: "jobs", Weight: 1}, {Topic: "jbos", Weight: 1}}
	})
	w, err := worker.New(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr := testenv.Serve(t, w.Serve)

	testenv.WaitFor(t, 10*time.Second, "the warning", func() bool {
		return strings.Contains(logs.String(), "no relay of this stage registered a served topic")
	})
	warns := strings.Count(logs.String(), "no relay of this stage registered a served topic")
	if warns != 1 || !strings.Contains(logs.String(), "topic=jbos") || !strings.Contains(logs.String(), "SLUICE_WORKER_TOPICS") {
		t.Errorf("%d warnings, want 1 naming jbos and the fix:\n%s", warns, logs.String())
	}
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := readyz(); code != 200 || !strings.HasPrefix(body, "ready, but: ") || !strings.Contains(body, "served topics jbos,") || !strings.Contains(body, "the stage's topics: jobs)") {
		t.Errorf("/readyz: %d %q", code, body)
	}
	// Its relay starts: nothing left to say.
	if err := b.pool.RegisterTopics(context.Background(), []string{"jbos"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, body := readyz(); code != 200 || body != "ready\n" {
		t.Errorf("/readyz once registered: %d %q", code, body)
	}
}
