package consul

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/testenv"
)

// watchPrefixAsync runs WatchPrefix until the test ends and returns what fn
// receives, each map written as "k=v,k=v" in key order.
func watchPrefixAsync(t *testing.T, c *api.Client, prefix string, opts WatchOptions) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan string, 4096)
	done := make(chan error, 1)
	go func() {
		done <- WatchPrefix(ctx, c, prefix, opts, func(m map[string][]byte) {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(m)) {
				parts = append(parts, k+"="+string(m[k]))
			}
			events <- strings.Join(parts, ",")
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("WatchPrefix returned %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("WatchPrefix did not return after its context ended")
		}
	})
	return events
}

func TestWatchPrefix(t *testing.T) {
	t.Parallel()
	srv := testenv.Consul(t)
	kv := srv.Client().KV()
	const prefix = "sluice/test/limits/"
	put := func(k, v string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := func(events <-chan string, want, what string) {
		t.Helper()
		if got := receive(t, events, 5*time.Second, what); got != want {
			t.Fatalf("%s: fn got %q, want %q", what, got, want)
		}
	}
	put(prefix+"api", "10")
	put(prefix, "") // a folder marker: not a resource
	log, rec := newLog()
	events := watchPrefixAsync(t, srv.Client(), prefix, WatchOptions{RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, Log: log})
	want(events, "api=10", "the initial keys")
	put(prefix+"mail", `{"rate": 5}`)
	want(events, "api=10,mail={\"rate\": 5}", "a key added")
	// Writes that change nothing under the prefix, or keys beside it,
	// wake the query but do not call fn.
	put(prefix+"api", "10")
	put("sluice/test/limitsx", "1")
	put("sluice/test/other/api", "1")
	put(prefix+"api", "20")
	want(events, "api=20,mail={\"rate\": 5}", "a key changed")
	if _, err := kv.Delete(prefix+"mail", nil); err != nil {
		t.Fatal(err)
	}
	want(events, "api=20", "a key deleted")

	// With the agent down, the last values stay in force.
	srv.Stop()
	testenv.WaitFor(t, 5*time.Second, "the watch to report failing queries", func() bool { return rec.count("watch query failing") == 1 })
	select {
	case e := <-events:
		t.Fatalf("fn called with %q while the agent is down", e)
	case <-time.After(500 * time.Millisecond): // five RetryMax periods
	}
	// The restarted dev agent is empty: fn hears that every key is gone,
	// then of a key written on the new agent, whose index is lower.
	srv.Restart()
	want(events, "", "the empty prefix after the restart")
	put(prefix+"api", "30")
	want(events, "api=30", "a PUT on the new agent")
}

func TestWatchPrefixArguments(t *testing.T) {
	c := offlineClient()
	for _, prefix := range []string{"", "/sluice/test/", "sluice/test/limits"} {
		err := WatchPrefix(context.Background(), c, prefix, WatchOptions{}, func(map[string][]byte) {})
		if err == nil {
			t.Errorf("WatchPrefix(%q): want an error", prefix)
		}
	}
	if err := WatchPrefix(context.Background(), nil, "a/", WatchOptions{}, func(map[string][]byte) {}); err == nil {
		t.Error("WatchPrefix without a client: want an error")
	}
}
