package consul

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/testenv"
)

type event struct {
	value  string
	exists bool
}

// watchAsync runs Watch until the test ends and returns what fn receives.
func watchAsync(t *testing.T, c *api.Client, key string, opts WatchOptions) <-chan event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan event, 4096)
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, c, key, opts, func(v []byte, ok bool) { events <- event{string(v), ok} })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch returned %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return after its context ended")
		}
	})
	return events
}

func expect(t *testing.T, events <-chan event, want event, within time.Duration, what string) {
	t.Helper()
	if got := receive(t, events, within, what); got != want {
		t.Fatalf("%s: fn got %+v, want %+v", what, got, want)
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	srv := testenv.Consul(t)
	kv := srv.Client().KV()
	const key = "sluice/test/watch/rate"
	put := func(k, v string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(key, "v1")
	log, rec := newLog()
	events := watchAsync(t, srv.Client(), key, WatchOptions{RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, Log: log})

	expect(t, events, event{"v1", true}, 5*time.Second, "the initial value")
	put(key, "v2")
	expect(t, events, event{"v2", true}, time.Second, "a PUT")
	// Writing the same value again, or another key, changes indexes but
	// not the value: fn hears only of v3.
	put(key, "v2")
	put("sluice/test/watch/other", "x")
	put(key, "v3")
	expect(t, events, event{"v3", true}, time.Second, "the next different value")
	if _, err := kv.Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	expect(t, events, event{"", false}, time.Second, "a DELETE")
	put(key, "v4")
	expect(t, events, event{"v4", true}, time.Second, "a PUT after the DELETE")

	// With the agent down, the last value stays in force: fn keeps quiet
	// through several failed retries.
	srv.Stop()
	testenv.WaitFor(t, 5*time.Second, "the watch to report failing queries", func() bool { return rec.count("watch query failing") == 1 })
	select {
	case e := <-events:
		t.Fatalf("fn called with %+v while the agent is down", e)
	case <-time.After(500 * time.Millisecond): // five RetryMax periods
	}

	// The new agent is empty, and its index has nothing to do with the old
	// one's: the watch reads afresh and reports the key missing.
	srv.Restart()
	expect(t, events, event{"", false}, 5*time.Second, "the missing key after the restart")
	if n := rec.count("watch query succeeded again"); n != 1 {
		t.Errorf("logged recovery %d times, want 1", n)
	}
	if n := rec.count("watch query failing"); n != 1 {
		t.Errorf("logged the failure %d times, want once for the whole outage", n)
	}
	// Blocking on the old agent's index would sit out WaitTime (a minute)
	// before seeing this.
	put(key, "v5")
	expect(t, events, event{"v5", true}, time.Second, "a PUT on the new agent")
}

func TestWatchMissingKey(t *testing.T) {
	t.Parallel()
	c := sharedConsul(t).Client()
	const key = "sluice/test/watch-missing/rate"
	events := watchAsync(t, c, key, WatchOptions{})
	expect(t, events, event{"", false}, 5*time.Second, "the initial state of a missing key")
	if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte("100/s")}, nil); err != nil {
		t.Fatal(err)
	}
	expect(t, events, event{"100/s", true}, time.Second, "the key appearing")
}

// A key rewritten without pause wakes every blocking query on it: the watch
// must not query faster than its Rate, and fn sees the changes coalesced,
// ending with the last value.
func TestWatchRateLimited(t *testing.T) {
	t.Parallel()
	srv := sharedConsul(t)
	proxy := newBlackhole(t, srv.Addr())
	const key = "sluice/test/watch-flapping/rate"
	kv := srv.Client().KV()
	put := func(v string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: key, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("start")
	const rate = 5
	events := watchAsync(t, proxy.client(t), key, WatchOptions{Rate: rate})
	expect(t, events, event{"start", true}, 5*time.Second, "the initial value")

	start, gets0 := time.Now(), proxy.kvGets.Load()
	writes := 0
	for time.Since(start) < time.Second {
		// Each write a new value: Consul skips rewriting an unchanged
		// one, index and all, and would wake no one.
		writes++
		put(strconv.Itoa(writes))
	}
	elapsed := time.Since(start)
	gets := proxy.kvGets.Load() - gets0
	t.Logf("%d writes in %s woke %d watch queries", writes, elapsed, gets)
	if limit := int64(rate*elapsed.Seconds()) + 2; gets > limit {
		t.Errorf("the watch sent %d queries in %s, more than its rate of %d/s allows", gets, elapsed, rate)
	}
	last := event{strconv.Itoa(writes), true}
	calls := 0
	for {
		e := receive(t, events, 5*time.Second, "the last value")
		if calls++; int64(calls) > gets+1 {
			t.Fatalf("fn called %d times for %d queries", calls, gets)
		}
		if e == last {
			break
		}
	}
}

func TestNextIndex(t *testing.T) {
	for _, tc := range []struct{ prev, got, want uint64 }{
		{0, 17, 17},
		{17, 17, 17}, // WaitTime ran out, nothing changed
		{17, 30, 30},
		{30, 12, 0}, // went backwards: agent restarted
		{0, 0, 1},   // Consul must never answer 0; blocking on it would spin
		{5, 0, 0},   // backwards and zero: a plain read first
	} {
		if got := nextIndex(tc.prev, tc.got); got != tc.want {
			t.Errorf("nextIndex(%d, %d) = %d, want %d", tc.prev, tc.got, got, tc.want)
		}
	}
}
