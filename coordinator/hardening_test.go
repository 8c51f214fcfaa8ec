package coordinator_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestCallbackErrorHidesWhatTheReceiverSaid: a receiver's answer body and
// a dial error (its address and port) stay in the coordinator's log; the
// group's callback_error, which its submitter reads, says the status
// class or the kind of failure only.
func TestCallbackErrorHidesWhatTheReceiverSaid(t *testing.T) {
	b := newBed(t, 1)
	const secret = "redis://10.1.2.3:6379 says NOAUTH"
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, secret)
	}))
	t.Cleanup(rc.Close)
	// A port nothing listens on: the dial error names it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	r := b.start(t, "c", func(c *coordinator.Config) { c.CallbackMaxAttempts = 2 })
	r.waitHolding(t)
	b.completeGroup(t, "talker", rc.URL+"/hook", allDone(1))
	b.completeGroup(t, "nobody", "http://"+closed+"/hook", allDone(1))

	for group, want := range map[string]string{"talker": "the receiver answered HTTP 5xx", "nobody": "could not be reached"} {
		st := b.finished(t, group)
		if st.CallbackState != coordinator.CallbackFailed || !strings.Contains(st.CallbackError, want) {
			t.Errorf("%s: %s %q, want failed: %s", group, st.CallbackState, st.CallbackError, want)
		}
		for _, leak := range []string{"NOAUTH", "10.1.2.3", closed, "500", "connection refused"} {
			if strings.Contains(st.CallbackError, leak) {
				t.Errorf("%s: callback_error %q shows %q", group, st.CallbackError, leak)
			}
		}
	}
	logs := r.logs.String()
	if !strings.Contains(logs, secret) || !strings.Contains(logs, closed) {
		t.Errorf("the coordinator's log lacks the details:\n%s", logs)
	}
}

// TestARetryingCallbackHoldsNoSlot: with one delivery slot per queue
// partition, a callback whose receiver fails and waits for its retry does
// not stall the next group's callback to another receiver.
func TestARetryingCallbackHoldsNoSlot(t *testing.T) {
	b := newBed(t, 1)
	failing := newReceiver(t, func(int, *http.Request) int { return http.StatusServiceUnavailable })
	good := newReceiver(t, nil)
	waiting := make(chan struct{}, 10)
	r := b.start(t, "c", func(c *coordinator.Config) {
		c.Deliveries = 1
		c.CallbackResolver = loopbackNames{"failing.test": {"127.0.0.1"}, "good.test": {"127.0.0.1"}}
		// The retry's wait lasts until the coordinator stops: the
		// failing group's callback waits for the whole test.
		c.Sleep = func(ctx context.Context, _ time.Duration) error {
			waiting <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
	})
	r.waitHolding(t)
	_, fport, _ := net.SplitHostPort(strings.TrimPrefix(failing.URL, "http://"))
	_, gport, _ := net.SplitHostPort(strings.TrimPrefix(good.URL, "http://"))
	b.completeGroup(t, "stuck", "http://failing.test:"+fport+"/hook", allDone(1))
	select {
	case <-waiting:
	case <-time.After(15 * time.Second):
		t.Fatal("the failing callback never waited for a retry")
	}
	b.completeGroup(t, "next", "http://good.test:"+gport+"/hook", allDone(1))
	if st := b.finished(t, "next"); st.CallbackState != coordinator.CallbackDelivered {
		t.Fatalf("the next group: %+v", st)
	}
}

// TestOneReceiverHostHoldsAtMostItsDeliveries: a receiver that hangs gets
// at most CallbackHostDeliveries POSTs at once, and its groups waiting for
// a turn hold none of the partition's delivery slots: another receiver's
// callback on the same partition is delivered meanwhile.
func TestOneReceiverHostHoldsAtMostItsDeliveries(t *testing.T) {
	b := newBed(t, 1)
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(unblock) // before Close, which waits for the handlers
	good := newReceiver(t, nil)
	r := b.start(t, "c", func(c *coordinator.Config) {
		c.Deliveries = 3 // 2 POSTs in flight, one slot left for the others
		c.CallbackHostDeliveries = 2
		c.CallbackTimeout = time.Minute
		c.CallbackResolver = loopbackNames{"slow.test": {"127.0.0.1"}, "good.test": {"127.0.0.1"}}
	})
	r.waitHolding(t)
	_, sport, _ := net.SplitHostPort(strings.TrimPrefix(slow.URL, "http://"))
	_, gport, _ := net.SplitHostPort(strings.TrimPrefix(good.URL, "http://"))
	const slowGroups = 6
	for i := range slowGroups {
		b.completeGroup(t, fmt.Sprintf("slow%d", i), "http://slow.test:"+sport+"/hook", allDone(1))
	}
	testenv.WaitFor(t, 15*time.Second, "two POSTs in flight at the slow receiver", func() bool { return inFlight.Load() >= 2 })
	b.completeGroup(t, "quick", "http://good.test:"+gport+"/hook", allDone(1))
	if st := b.finished(t, "quick"); st.CallbackState != coordinator.CallbackDelivered {
		t.Fatalf("the other receiver's group: %+v", st)
	}
	if m := most.Load(); m != 2 {
		t.Fatalf("%d POSTs at once at the slow receiver, want at most 2 (CallbackHostDeliveries)", m)
	}
	unblock()
	for i := range slowGroups {
		if st := b.finished(t, fmt.Sprintf("slow%d", i)); st.CallbackState != coordinator.CallbackDelivered {
			t.Fatalf("slow%d: %+v", i, st)
		}
	}
	if m := most.Load(); m > 2 {
		t.Fatalf("%d POSTs at once at the slow receiver, want at most 2", m)
	}
}

// TestCallbackSecretsReloadKeepsTheLastGoodSet: a secrets file emptied,
// or given a short secret, while the coordinator runs is refused and
// logged; callbacks stay signed with the last good secret.
func TestCallbackSecretsReloadKeepsTheLastGoodSet(t *testing.T) {
	b := newBed(t, 1)
	file := filepath.Join(t.TempDir(), "secrets")
	good := strings.Repeat("g", 32)
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file+".new", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	write(good + "\n")
	receiver, verified := signatureReceiver(t, good)
	r := b.start(t, "c", func(c *coordinator.Config) { c.CallbackSecretFile = file })
	r.waitHolding(t)
	for i, content := range []string{"", "short-secret\n"} {
		write(content)
		group := fmt.Sprintf("g%d", i)
		b.completeGroup(t, group, receiver+"/hook", allDone(1))
		if st := b.finished(t, group); st.CallbackState != coordinator.CallbackDelivered {
			t.Fatalf("after the file became %q: %+v", content, st)
		}
		if err := (<-verified)[0]; err != nil {
			t.Fatalf("after the file became %q, the callback does not verify with the last good secret: %v", content, err)
		}
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "last good secrets stay in force") || !strings.Contains(logs, "holds no secret") || !strings.Contains(logs, "want at least 32") {
		t.Errorf("the refusals are not logged:\n%s", logs)
	}
	if strings.Contains(logs, "short-secret") {
		t.Error("the log shows a secret")
	}
}

// TestAShortCallbackSecretStopsTheStart: a secrets file with a secret
// under 32 bytes, or one open to others, is an error of New naming
// Config.CallbackSecretFile, never the secret.
func TestAShortCallbackSecretStopsTheStart(t *testing.T) {
	b := newBed(t, 1)
	dir := t.TempDir()
	for name, c := range map[string]struct {
		content string
		mode    os.FileMode
		want    string
	}{
		"short":  {"tiny-secret\n", 0o600, "want at least 32"},
		"open":   {strings.Repeat("k", 32) + "\n", 0o644, "chmod 600"},
		"absent": {"", 0, "no such file"},
	} {
		file := filepath.Join(dir, name)
		if c.mode != 0 {
			os.WriteFile(file, []byte(c.content), 0o600)
			os.Chmod(file, c.mode)
		}
		cfg := b.config(func(cfg *coordinator.Config) { cfg.CallbackSecretFile = file })
		co, err := coordinator.New(cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			co.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "Config.CallbackSecretFile") || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "tiny-secret") {
			t.Errorf("%s: %v, want an error naming Config.CallbackSecretFile: %s", name, err, c.want)
		}
	}
}

// TestACallbackToTheCoordinatorsOwnListenerIsRefused: with loopback
// allowed (sluice dev), a callback aimed at the coordinator's own
// listener, where the console's admin API is, is refused at once, and the
// listener sees no callback.
func TestACallbackToTheCoordinatorsOwnListenerIsRefused(t *testing.T) {
	b := newBed(t, 1)
	r := b.start(t, "c", nil) // CallbackAllow opens 127.0.0.0/8
	r.waitHolding(t)
	b.completeGroup(t, "self", "http://"+r.addr+"/api/v1/dlq/purge", allDone(1))
	st := b.finished(t, "self")
	if st.CallbackState != coordinator.CallbackFailed || st.CallbackAttempts != 1 || !strings.Contains(st.CallbackError, "own listener") {
		t.Fatalf("status: %+v", st)
	}
	if !strings.Contains(r.logs.String(), "a listener of this part's own") {
		t.Errorf("the refusal is not logged:\n%s", r.logs)
	}
}
