package testenv

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/stack"
)

// BuildSluice builds the sluice binary into the test's temp dir, for tests
// that run parts as real processes (to kill -9 them).
func BuildSluice(t testing.TB) string {
	t.Helper()
	root, err := stack.ModuleRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: go build ./cmd/sluice: %v\n%s", err, out)
	}
	return bin
}
