package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/testenv"
)

// sluice dev's worker follows the execution limits in the dev Consul: a
// limit put there shows in the worker's metrics, and jobs posted to the gate
// for that resource are throttled to it.
func TestDevWorkerFollowsRateLimits(t *testing.T) {
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	startDev(t, &cfg)
	c := devConsul(t, cfg)
	if _, err := c.KV().Put(&consulapi.KVPair{Key: "sluice/dev/limits/billing-api", Value: []byte(`{"rate": 2}`)}, nil); err != nil {
		t.Fatal(err)
	}
	metric := func(name string) float64 {
		resp, err := http.Get("http://" + cfg.WorkerAddr + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	testenv.WaitFor(t, 10*time.Second, "the dev worker to read the limit", func() bool {
		return metric(`sluice_worker_rate_limit_per_second{resource="billing-api"}`) == 2
	})
	for i := range 4 {
		body := `{"type":"charge","group":"g` + strconv.Itoa(i) + `","resource":"billing-api"}`
		resp, err := http.Post("http://"+cfg.GateAddr+"/v1/topics/jobs/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("posting a job: %s", resp.Status)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "the four jobs to start under the limit", func() bool {
		return metric(`sluice_worker_rate_limit_granted_total{resource="billing-api"}`) == 4
	})
	// At 2/s with a burst of 1, four jobs posted within moments cannot
	// all start at once: some waited in delayed for their slots.
	if n := metric(`sluice_worker_rate_limit_throttles_sum{resource="billing-api"}`); n < 1 {
		t.Errorf("%g throttles, want some", n)
	}
}
