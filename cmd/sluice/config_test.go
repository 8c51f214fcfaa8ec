package main

import (
	"bytes"
	"context"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/worker"
)

// configPart is a part as sluice <part> runs it: a Config whose
// RegisterFlags defines the part's flags, and the flags the binary adds.
type configPart struct {
	part string
	// defaults returns a pointer to a new DefaultConfig().
	defaults func() any
	// binary are the flags sluice <part> adds to the Config's.
	binary []string
	// dir is the part's package, whose source documents the fields.
	dir string
	// beside, if set, is a second part whose flags sluice <part> adds to
	// its own, but for those it defines itself (sluice coordinator's
	// console: besideShared).
	beside       *configPart
	besideShared []string
}

var configParts = []configPart{
	{"gate", func() any { c := gate.DefaultConfig(); return &c }, []string{"log-level", "log-format", "tracing"}, "../../gate", nil, nil},
	{"relay", func() any { c := relay.DefaultConfig(); return &c }, []string{"log-level", "log-format", "tracing"}, "../../relay", nil, nil},
	{"worker", func() any { c := worker.DefaultConfig(); return &c }, []string{"log-level", "log-format", "tracing", "handle", "http", "handle-other"}, "../../worker", nil, nil},
	{"coordinator", func() any { c := coordinator.DefaultConfig(); return &c }, []string{"log-level", "log-format", "tracing", "console"}, "../../coordinator",
		&configPart{"console", func() any { c := coordinatorConsoleConfig(); return &c }, nil, "../../console", nil, nil}, sharedConsoleFlags},
	{"console", func() any { c := console.DefaultConfig(); return &c }, []string{"log-level", "log-format", "tracing"}, "../../console", nil, nil},
}

// helpLineRE is one flag of --help: the flag, its variable, the rest.
var helpLineRE = regexp.MustCompile(`^  --?(\S+)\s+(SLUICE_\S+)\s+(.*)$`)

// TestEveryPartsFlagsAreItsConfig: for each part, sluice <part> --help
// lists every flag of its Config's RegisterFlags with the SLUICE_ variable
// internal/cli reads and the default DefaultConfig() holds; each of those
// flags sets a field of the Config; and every exported field of the Config
// has a flag, or its documentation says it has none. sluice coordinator
// lists the console's flags too, but for those it shares with the
// coordinator (the list share copies).
func TestEveryPartsFlagsAreItsConfig(t *testing.T) {
	for _, p := range configParts {
		t.Run(p.part, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(context.Background(), []string{p.part, "--help"}, &out, &errOut); code != 0 {
				t.Fatalf("sluice %s --help: exit %d: %s", p.part, code, errOut.String())
			}
			helped := map[string][2]string{}
			for _, line := range strings.Split(out.String(), "\n") {
				if m := helpLineRE.FindStringSubmatch(line); m != nil {
					helped[m[1]] = [2]string{m[2], m[3]}
				}
			}
			want := checkConfigFlags(t, p.part, p.defaults, p.dir, helped, nil)
			if b := p.beside; b != nil {
				shared := map[string]bool{}
				for _, name := range want {
					shared[name] = true
				}
				besides := checkConfigFlags(t, p.part, b.defaults, b.dir, helped, shared)
				var gotShared []string
				fs := flag.NewFlagSet("", flag.ContinueOnError)
				b.defaults().(interface{ RegisterFlags(*flag.FlagSet) }).RegisterFlags(fs)
				fs.VisitAll(func(f *flag.Flag) {
					if shared[f.Name] {
						gotShared = append(gotShared, f.Name)
					}
				})
				if sort.Strings(gotShared); !slices.Equal(gotShared, slices.Sorted(slices.Values(p.besideShared))) {
					t.Errorf("the %s flags sluice %s defines itself are %v; it shares %v", b.part, p.part, gotShared, p.besideShared)
				}
				want = append(want, besides...)
			}
			want = append(want, p.binary...)
			var got []string
			for name := range helped {
				got = append(got, name)
			}
			sort.Strings(want)
			sort.Strings(got)
			if !slices.Equal(got, want) {
				t.Errorf("--help lists %v,\nthe Config's flags and the binary's are %v", got, want)
			}
		})
	}
}

// checkConfigFlags checks the Config that defaults returns against
// sluice part's --help (helped: flag -> variable, usage): each flag but
// those in skip is listed with its variable and default; each sets a
// field; each field has a flag or says it has none. It returns the flags
// it checked.
func checkConfigFlags(t *testing.T, part string, defaults func() any, dir string, helped map[string][2]string, skip map[string]bool) []string {
	t.Helper()
	cfg := defaults()
	fs := flag.NewFlagSet(part, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.(interface{ RegisterFlags(*flag.FlagSet) }).RegisterFlags(fs)
	if !reflect.DeepEqual(cfg, defaults()) {
		t.Fatalf("RegisterFlags changed the config:\n got %+v\nwant %+v", cfg, defaults())
	}
	// The default each flag shows is the value of what it is bound to,
	// which is DefaultConfig()'s (above).
	fs.VisitAll(func(f *flag.Flag) {
		if f.DefValue != f.Value.String() {
			t.Errorf("--%s shows the default %q, but its field holds %q", f.Name, f.DefValue, f.Value.String())
		}
	})
	var checked []string
	fs.VisitAll(func(f *flag.Flag) {
		if skip[f.Name] {
			return
		}
		checked = append(checked, f.Name)
		h, ok := helped[f.Name]
		switch {
		case !ok:
			t.Errorf("--help does not list --%s", f.Name)
			return
		case h[0] != cli.EnvName(part, f.Name):
			t.Errorf("--help names %s for --%s, internal/cli reads %s", h[0], f.Name, cli.EnvName(part, f.Name))
		}
		shown := ""
		if i := strings.LastIndex(h[1], " (default "); i >= 0 {
			shown = strings.TrimSuffix(h[1][i+len(" (default "):], ")")
		}
		if wantShown := f.DefValue; wantShown != "false" && shown != wantShown {
			t.Errorf("--help shows --%s's default as %q, the Config's is %q", f.Name, shown, wantShown)
		}
	})

	// Each flag sets a field, and each field has a flag or says it has
	// none.
	fields := cli.FlagFields(fs, cfg)
	reached := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		if len(fields[f.Name]) == 0 {
			t.Errorf("--%s sets no field of the Config", f.Name)
		}
		for _, field := range fields[f.Name] {
			reached[field] = true
		}
	})
	docs := configFieldDocs(t, dir)
	// The fields of the embedded queue.StageRedis and consul.Config are
	// documented there.
	for _, embedded := range [][2]string{{"../../internal/queue", "StageRedis"}, {"../../internal/consul", "Config"}} {
		for name, doc := range typeFieldDocs(t, embedded[0], embedded[1]) {
			if _, ok := docs[name]; !ok {
				docs[name] = doc
			}
		}
	}
	for _, field := range cli.ConfigFields(cfg) {
		if reached[field] {
			continue
		}
		top, _, _ := strings.Cut(field, ".")
		leaf := field[strings.LastIndex(field, ".")+1:]
		if doc := docs[top]; !strings.Contains(doc, "No flag") || !strings.Contains(doc, leaf) {
			t.Errorf("Config.%s has no flag, and the doc of Config.%s does not say so (\"No flag\" naming %s): %q", field, top, leaf, doc)
		}
	}
	return checked
}

// configFieldDocs reads the doc comments of the fields of type Config in
// the package in dir, by field name (an embedded field by its type's).
func configFieldDocs(t *testing.T, dir string) map[string]string {
	t.Helper()
	return typeFieldDocs(t, dir, "Config")
}

// typeFieldDocs reads the doc comments of the fields of the struct type
// typeName in the package in dir.
func typeFieldDocs(t *testing.T, dir, typeName string) map[string]string {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok || ts.Name.Name != typeName {
					return true
				}
				for _, field := range ts.Type.(*ast.StructType).Fields.List {
					doc := field.Doc.Text() + field.Comment.Text()
					names := field.Names
					if len(names) == 0 { // embedded: queue.StageRedis
						if sel, ok := field.Type.(*ast.SelectorExpr); ok {
							names = []*ast.Ident{sel.Sel}
						}
					}
					for _, name := range names {
						docs[name.Name] = doc
					}
				}
				return false
			})
		}
	}
	if len(docs) == 0 {
		t.Fatalf("no type %s in %s", typeName, dir)
	}
	return docs
}
