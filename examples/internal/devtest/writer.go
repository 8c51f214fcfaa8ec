package devtest

import (
	"io"
	"sync"
)

// lockedWriter serialises the child's stdout and stderr, which exec
// copies into it from two goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
