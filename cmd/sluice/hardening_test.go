package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestAdminInsecureWithTokensStopsTheStart: --admin-insecure beside
// --admin-tokens (or --admin-tokens-file) is a start-up error whose
// message names both flags, for sluice console and sluice coordinator.
func TestAdminInsecureWithTokensStopsTheStart(t *testing.T) {
	for _, args := range [][]string{
		{"console", "--listen", "127.0.0.1:0", "--admin-insecure", "--admin-tokens", "a-long-admin-token-1 admin"},
		{"coordinator", "--listen", "127.0.0.1:0", "--admin-insecure", "--admin-tokens-file", "/nonexistent/admin-tokens"},
	} {
		var out, errOut bytes.Buffer
		// Bounded: a part that starts anyway serves until ctx ends.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := run(ctx, args, &out, &errOut)
		cancel()
		msg := errOut.String()
		if code != 1 || !strings.Contains(msg, "--admin-insecure") || !strings.Contains(msg, "--admin-tokens") || strings.Contains(msg, "a-long-admin-token-1") {
			t.Errorf("%v: exit %d, %q; want exit 1 naming --admin-insecure and --admin-tokens", args, code, msg)
		}
	}
}
