package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The whole fan-in path in sluice dev: a bulk group POSTed to the gate runs
// through Kafka, the relay and the worker, and the coordinator POSTs its
// callback once, with every item.
func TestDevDeliversABulkGroupsCallback(t *testing.T) {
	got := make(chan []byte, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer hook.Close()
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	startDev(t, &cfg)

	resp, err := http.Post("http://"+cfg.GateAddr+"/v1/topics/jobs/groups", "application/json",
		strings.NewReader(`{"id":"dev-fanin","type":"hello","callback_url":"`+hook.URL+`/done","items":[{"n":0},{"n":1},{"n":2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST group: %d %s", resp.StatusCode, answer)
	}
	var body struct {
		Group string `json:"group"`
		Done  int    `json:"done"`
		Items []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"items"`
	}
	select {
	case b := <-got:
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("callback body %s: %v", b, err)
		}
		if body.Group != "dev-fanin" || body.Done != 3 || len(body.Items) != 3 || body.Items[2].ID != "dev-fanin.2" || body.Items[2].State != "done" {
			t.Fatalf("callback body: %s", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no callback within 30s")
	}
	// The state is recorded right after the 2xx answer.
	testenv.WaitFor(t, 5*time.Second, "GET /v1/groups/dev-fanin to say delivered", func() bool {
		resp, err := http.Get("http://" + cfg.GateAddr + "/v1/groups/dev-fanin")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		status, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(status), `"state":"delivered"`)
	})
	select {
	case b := <-got:
		t.Fatalf("a second callback: %s", b)
	default:
	}
}
