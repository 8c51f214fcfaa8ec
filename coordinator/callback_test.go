package coordinator_test

import (
	"io"
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
	"github.com/sluicehq/sluice/internal/callback"
	"github.com/sluicehq/sluice/internal/retry"
)

// watched is a loopback listener that must see no request: the admin API
// a forged callback aims at.
func watched(t *testing.T, host string) (url string, hits *atomic.Int32) {
	t.Helper()
	hits = &atomic.Int32{}
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, hits
}

// signatureReceiver is a callback receiver that checks each POST's
// signature with each of secrets in turn (callback.Verify, version 2 only:
// what a current receiver accepts) and sends what each check said.
func signatureReceiver(t *testing.T, secrets ...string) (url string, checked <-chan []error) {
	t.Helper()
	out := make(chan []error, 10)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sig := r.Header.Get(callback.HeaderSignature)
		signed := callback.Signed{Group: r.Header.Get("Sluice-Group"), Attempt: r.Header.Get("Sluice-Attempt")}
		errs := make([]error, len(secrets))
		for i, secret := range secrets {
			errs[i] = callback.Verify(sig, body, signed, [][]byte{[]byte(secret)}, time.Now(), callback.VerifyOptions{V2Only: true})
		}
		out <- errs
	}))
	t.Cleanup(rc.Close)
	return rc.URL, out
}

// TestCallbacksAimedInsideAreRefused: with the default guard (no
// allow-list), a callback to the admin API on loopback, to another
// loopback address, to a name that resolves to a private address, and to
// a receiver that redirects to loopback each fail (a refusal at once,
// without a retry), and the loopback listeners see no request. The test's
// dialer fails the test for any dial that is not loopback (bed.loopbackDial).
func TestCallbacksAimedInsideAreRefused(t *testing.T) {
	b := newBed(t, 1)
	admin, adminHits := watched(t, "127.0.0.1")
	other, otherHits := watched(t, "127.0.0.2")
	// An allowed receiver (by its address) that redirects to the admin API.
	redirector := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, admin+"/api/v1/dlq/purge", http.StatusTemporaryRedirect)
	}))
	ln, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	redirector.Listener.Close()
	redirector.Listener = ln
	redirector.Start()
	t.Cleanup(redirector.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	r := b.start(t, "c", func(c *coordinator.Config) {
		c.CallbackAllow = []string{"127.0.0.3"} // the redirector only
		c.CallbackResolver = loopbackNames{"inside.test": {"10.0.0.5"}, "hooks.test": {"127.0.0.3"}}
		c.CallbackMaxAttempts = 2
	})
	r.waitHolding(t)
	cases := map[string]struct{ url, want string }{
		"admin":    {admin + "/api/v1/dlq/purge", "loopback"},
		"loopback": {other + "/hook", "loopback"},
		"private":  {"http://inside.test/hook", "resolves to a private address"},
		"redirect": {"http://hooks.test:" + port + "/hook", "a redirect, which is not followed"},
	}
	for group, c := range cases {
		b.completeGroup(t, group, c.url, allDone(1))
	}
	for group, c := range cases {
		st := b.finished(t, group)
		if st.CallbackState != coordinator.CallbackFailed || !strings.Contains(st.CallbackError, c.want) {
			t.Errorf("%s (%s): %s %q, want failed: %s", group, c.url, st.CallbackState, st.CallbackError, c.want)
		}
		if refused := group != "redirect"; refused && st.CallbackAttempts != 1 {
			t.Errorf("%s: %d attempts: a refusal is final", group, st.CallbackAttempts)
		}
	}
	if n := adminHits.Load() + otherHits.Load(); n != 0 {
		t.Fatalf("the loopback listeners saw %d requests", n)
	}
}

// TestSignedCallbackVerifies: a receiver that knows one of the two
// secrets of a rotation verifies the callback, body and all; a receiver
// with another secret does not.
func TestSignedCallbackVerifies(t *testing.T) {
	b := newBed(t, 1)
	secretFile := filepath.Join(t.TempDir(), "secrets")
	newSecret, oldSecret := strings.Repeat("n", 32), strings.Repeat("o", 32)
	if err := os.WriteFile(secretFile, []byte(newSecret+"\n"+oldSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	receiver, got := signatureReceiver(t, oldSecret, strings.Repeat("x", 32))
	r := b.start(t, "c", func(c *coordinator.Config) { c.CallbackSecretFile = secretFile })
	r.waitHolding(t)
	b.completeGroup(t, "signed", receiver+"/hook", allDone(3))
	var verified, forged error
	select {
	case errs := <-got:
		verified, forged = errs[0], errs[1]
	case <-time.After(20 * time.Second):
		t.Fatal("no callback came")
	}
	if verified != nil {
		t.Errorf("a receiver with the old secret: %v", verified)
	}
	if forged == nil {
		t.Error("a receiver with another secret verified the callback")
	}
}

// TestRetryAfterIsHeeded: a receiver answering 503 with Retry-After 2 gets
// its next attempt no sooner than 2 s later, though the backoff is 10 ms.
func TestRetryAfterIsHeeded(t *testing.T) {
	b := newBed(t, 1)
	var calls []time.Time
	var mu sync.Mutex
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, time.Now())
		first := len(calls) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(rc.Close)
	r := b.start(t, "c", func(c *coordinator.Config) {
		c.CallbackBackoff, c.CallbackMaxBackoff = 10*time.Millisecond, time.Minute
		c.Sleep = retry.Sleep // real waits: the receiver times them
	})
	r.waitHolding(t)
	b.completeGroup(t, "busy", rc.URL+"/hook", allDone(1))
	st := b.finished(t, "busy")
	mu.Lock()
	defer mu.Unlock()
	if st.CallbackState != coordinator.CallbackDelivered || len(calls) != 2 {
		t.Fatalf("%s after %d calls", st.CallbackState, len(calls))
	}
	if gap := calls[1].Sub(calls[0]); gap < 2*time.Second {
		t.Fatalf("the second attempt came %s after the 503 with Retry-After 2", gap)
	}
}
