package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
)

// stallingNames answers cb.example at once and stalls every other name
// until the lookup's context ends, counting the lookups: a resolver the
// test controls, no lookup leaves the process.
type stallingNames struct{ lookups atomic.Int32 }

func (s *stallingNames) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	if host == "cb.example" {
		return []netip.Addr{netip.MustParseAddr("203.0.113.10")}, nil
	}
	s.lookups.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestABatchsCallbackLookupsHaveATotalBudget: a batch of 20 jobs whose
// callback hosts each stall their lookup is answered within the batch's
// budget (not 20 lookup timeouts), its stalled jobs rejected with a
// reason naming the budget, its job with a quick host accepted; and 20
// jobs sharing one stalled host cost one lookup.
func TestABatchsCallbackLookupsHaveATotalBudget(t *testing.T) {
	k := newKafka(t)
	res := &stallingNames{}
	g := startGate(t, k, func(c *gate.Config) {
		c.CallbackResolver = res
		c.CallbackResolveTimeout = 500 * time.Millisecond
		c.CallbackResolveBudget = time.Second
	})
	batch := func(host func(i int) string) (int, []map[string]any, time.Duration) {
		t.Helper()
		var b strings.Builder
		b.WriteString("[")
		for i := range 20 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"type":"t","payload":{},"callback_url":"http://%s/hook"}`, host(i))
		}
		b.WriteString(`,{"type":"t","payload":{},"callback_url":"http://cb.example/hook"}]`)
		start := time.Now()
		a := post(t, g.url+"/v1/topics/jobs/jobs:batch", b.String(), "Content-Type", "application/json")
		took := time.Since(start)
		var out struct {
			Results []map[string]any `json:"results"`
		}
		if err := json.Unmarshal([]byte(a.body), &out); err != nil {
			t.Fatalf("%d %s: %v", a.status, a.body, err)
		}
		return a.status, out.Results, took
	}

	status, results, took := batch(func(i int) string { return fmt.Sprintf("slow-%d.test", i) })
	// 20 lookups of 500 ms one after another would take 10 s.
	if took > 4*time.Second {
		t.Errorf("the batch took %s: its lookups have no total budget", took)
	}
	if status != http.StatusMultiStatus || len(results) != 21 {
		t.Fatalf("status %d, %d results", status, len(results))
	}
	budgeted := 0
	for i, r := range results[:20] {
		msg, _ := r["error"].(string)
		if code, _ := r["status"].(float64); code != http.StatusBadRequest {
			t.Errorf("item %d: %v", i, r)
		}
		if strings.Contains(msg, "--callback-resolve-budget") {
			budgeted++
		}
	}
	if budgeted < 15 {
		t.Errorf("%d of the 20 stalled items name the budget, want most: %v", budgeted, results)
	}
	if code, _ := results[20]["status"].(float64); code != http.StatusAccepted {
		t.Errorf("the job with a quick host: %v", results[20])
	}

	before := res.lookups.Load()
	_, results, _ = batch(func(int) string { return "same-slow.test" })
	if n := res.lookups.Load() - before; n != 1 {
		t.Errorf("20 jobs sharing one host: %d lookups, want 1", n)
	}
	if code, _ := results[20]["status"].(float64); code != http.StatusAccepted {
		t.Errorf("the job with a quick host: %v", results[20])
	}
}
