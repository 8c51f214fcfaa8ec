package stack

import (
	"context"
	"strings"
	"testing"
)

// A Jaeger that cannot be found fails saying how to build it.
func TestAMissingJaegerSaysHowToBuildIt(t *testing.T) {
	t.Setenv("SLUICE_JAEGER_BIN", "/nonexistent/jaeger")
	if _, err := FindJaeger(); err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Errorf("FindJaeger: %v, want an error naming `make deps`", err)
	}
	_, err := StartJaeger(context.Background(), JaegerConfig{OTLPHTTPAddr: "127.0.0.1:1", OTLPGRPCAddr: "127.0.0.1:2", QueryAddr: "127.0.0.1:3", Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Errorf("StartJaeger: %v, want an error naming `make deps`", err)
	}
}
