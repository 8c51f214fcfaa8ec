package arch

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/stack"
)

// TestArchitecturePageNamesEveryPackage: docs/architecture.md is the map of
// the repository, so it names every package `go list ./...` finds and every
// top-level folder git tracks (as `path` or `path/` in code spans); a new
// package or folder fails here until the page has its line.
func TestArchitecturePageNamesEveryPackage(t *testing.T) {
	root, err := stack.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z][a-z0-9_./-]*)`").FindAllStringSubmatch(string(page), -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}

	list := exec.Command("go", "list", "./...")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, stack.ModulePath), "/")
		if rel != "" && !named[rel] {
			t.Errorf("docs/architecture.md does not name package %s: add its line to \"Folders and packages\"", rel)
		}
	}

	files := exec.Command("git", "ls-files")
	files.Dir = root
	out, err = files.Output()
	if err != nil {
		t.Skipf("git ls-files (not a git checkout?): %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		dir, _, isDir := strings.Cut(f, "/")
		if isDir && !strings.HasPrefix(dir, ".") && !named[dir] {
			t.Errorf("docs/architecture.md does not name top-level folder %s/: add its line to \"Folders and packages\"", dir)
			named[dir] = true
		}
	}
}

// TestClientLinksNoStore: the Go client aliases the servers' wire types
// (internal/wire) rather than copying them, and must link no Redis, Kafka
// or Consul client for it: an alias of a type in a package that talks to
// a store (internal/groups, internal/queue) would drag that store's client
// into every program that enqueues a job.
func TestClientLinksNoStore(t *testing.T) {
	root, err := stack.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"./client"} {
		list := exec.Command("go", "list", "-deps", pkg)
		list.Dir = root
		out, err := list.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, store := range []string{"github.com/redis/", "github.com/IBM/sarama", "github.com/twmb/franz-go", "github.com/hashicorp/consul"} {
				if strings.HasPrefix(dep, store) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}
