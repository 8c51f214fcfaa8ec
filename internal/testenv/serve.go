package testenv

import (
	"context"
	"net"
	"testing"
)

// Serve runs a part's Serve (relay, worker, ...) on a loopback listener of
// its own and returns the listener's address. When the test ends it
// cancels serve's context, waits for it to return, and fails the test if
// it returned an error.
func Serve(t testing.TB, serve func(context.Context, net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}
