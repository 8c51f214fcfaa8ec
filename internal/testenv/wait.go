package testenv

import (
	"strings"
	"sync"
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

// LogBuffer keeps what a part logs, safe to write from its goroutines
// while a test reads it: for tests that look for a line.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
