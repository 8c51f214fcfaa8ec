// Package arch holds tests of the module's layout: the folders are the
// architecture, so the import rules between them are checked, not hoped for.
package arch

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/stack"
)

var parts = []string{"gate", "relay", "worker", "coordinator", "console"}

// TestImportRules: parts talk to each other only through internal/
// contracts, and internal/ plumbing never reaches up into a part, the load
// generator or the binary.
func TestImportRules(t *testing.T) {
	root, err := stack.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod := stack.ModulePath + "/"
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "tools" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		from := filepath.ToSlash(filepath.Dir(rel))
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			to, ok := strings.CutPrefix(strings.Trim(imp.Path.Value, `"`), mod)
			if !ok {
				continue
			}
			if reason := forbidden(from, to); reason != "" {
				t.Errorf("%s imports %s: %s", rel, to, reason)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func top(p string) string { first, _, _ := strings.Cut(p, "/"); return first }

func forbidden(from, to string) string {
	isPart := func(p string) bool {
		for _, part := range parts {
			if top(p) == part {
				return true
			}
		}
		return false
	}
	switch {
	case isPart(from) && isPart(to) && top(from) != top(to):
		return "parts talk through internal/ contracts, not through each other"
	case top(from) == "internal" && (isPart(to) || top(to) == "loadtest" || top(to) == "cmd"):
		return "internal/ is shared plumbing and must not depend on a part"
	}
	return ""
}

func TestForbiddenRules(t *testing.T) {
	for _, c := range []struct {
		from, to string
		bad      bool
	}{
		{"gate", "internal/job", false},
		{"gate", "relay", true},
		{"console", "coordinator", true},
		{"coordinator", "console/dashboard", true},
		{"worker/internal/x", "coordinator", true},
		{"internal/kafka", "gate", true},
		{"internal/testenv", "internal/stack", false},
		{"cmd/sluice", "gate", false},
		{"loadtest", "internal/job", false},
	} {
		if got := forbidden(c.from, c.to) != ""; got != c.bad {
			t.Errorf("forbidden(%s -> %s) = %v, want %v", c.from, c.to, got, c.bad)
		}
	}
}
