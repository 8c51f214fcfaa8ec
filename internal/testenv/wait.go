package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond, backing off from 5 ms to 250 ms, until it holds; the
// test fails if it still does not after timeout. It is for conditions that
// have no event to wait on (an outside server's state), not a sleep.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 250*time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(wait)
	}
}
