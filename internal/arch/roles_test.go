package arch

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/stack"
)

// roleParts are the packages that talk to Redis through the queue layer;
// each declares its Redis surface as one interface, sideName, in its
// redis.go.
var roleParts = []string{"gate", "relay", "worker", "coordinator", "console", "cmd/sluice"}

const (
	sideName  = "redisSide"
	sideFile  = "redis.go"
	queuePath = stack.ModulePath + "/internal/queue"
)

// TestRedisSurfaceRoles: each part reaches Redis only through the
// interface in its redis.go (never *queue.Pool directly), and that
// interface lists only methods the part's non-test code calls — so a
// reader of one part sees its whole Redis surface in one place, and no
// part holds an operation it does not need (docs/architecture.md, "Each
// part's Redis surface").
func TestRedisSurfaceRoles(t *testing.T) {
	root, err := stack.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	imp, err := exportImporter(root, roleParts)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range roleParts {
		for _, problem := range checkRole(root, part, imp) {
			t.Errorf("%s: %s", part, problem)
		}
	}
}

// exportImporter type-checks against the compiler's export data (`go list
// -export`), so the check needs nothing beyond the standard library.
func exportImporter(root string, pkgs []string) (types.Importer, error) {
	args := append([]string{"list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}"}, prefixed(pkgs)...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v: %s", err, stderr.String())
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "="); ok {
			exports[path] = file
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	}), nil
}

func prefixed(pkgs []string) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = "./" + p
	}
	return out
}

// checkRole type-checks part's non-test files and returns what breaks the
// rule, each as a sentence saying what to do.
func checkRole(root, part string, imp types.Importer) []string {
	// The files the build uses (go list's GoFiles: build constraints
	// applied, tests left out).
	cmd := exec.Command("go", "list", "-f", "{{.Dir}}\n{{range .GoFiles}}{{.}}\n{{end}}", "./"+part)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return []string{fmt.Sprintf("go list: %v", err)}
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range lines[1:] {
		f, err := parser.ParseFile(fset, filepath.Join(lines[0], name), nil, 0)
		if err != nil {
			return []string{err.Error()}
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: imp}
	pkg, err := conf.Check(part, fset, files, info)
	if err != nil {
		return []string{fmt.Sprintf("type-checking failed: %v", err)}
	}

	var problems []string
	obj := pkg.Scope().Lookup(sideName)
	side, _ := obj.(*types.TypeName)
	var iface *types.Interface
	if side == nil || !types.IsInterface(side.Type()) {
		problems = append(problems, fmt.Sprintf("no interface %s: declare the part's Redis surface as `type %s interface{...}` in %s/%s", sideName, sideName, part, sideFile))
	} else {
		iface = side.Type().Underlying().(*types.Interface)
		if f := filepath.Base(fset.Position(side.Pos()).Filename); f != sideFile {
			problems = append(problems, fmt.Sprintf("%s is declared in %s: move it to %s/%s", sideName, f, part, sideFile))
		}
	}

	// Where the part's code names queue.Pool or calls its methods outside
	// redis.go.
	isPool := func(o types.Object) bool {
		return o != nil && o.Pkg() != nil && o.Pkg().Path() == queuePath && o.Name() == "Pool"
	}
	for id, o := range info.Uses {
		pos := fset.Position(id.Pos())
		if filepath.Base(pos.Filename) == sideFile || !isPool(o) {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s:%d names queue.Pool: hold the part's %s instead (only %s/%s may name queue.Pool)", filepath.Base(pos.Filename), pos.Line, sideName, part, sideFile))
	}

	used := map[string]bool{}
	for sel, s := range info.Selections {
		m, ok := s.Obj().(*types.Func)
		if !ok {
			continue
		}
		recv := s.Recv()
		if p, ok := recv.(*types.Pointer); ok {
			recv = p.Elem()
		}
		if named, ok := recv.(*types.Named); ok && isPool(named.Obj()) {
			pos := fset.Position(sel.Pos())
			if filepath.Base(pos.Filename) != sideFile {
				problems = append(problems, fmt.Sprintf("%s:%d calls (*queue.Pool).%s directly: add %s to %s in %s/%s and call it through that", filepath.Base(pos.Filename), pos.Line, m.Name(), m.Name(), sideName, part, sideFile))
			}
			continue
		}
		if side != nil && types.Identical(s.Recv(), side.Type()) {
			used[m.Name()] = true
		}
	}
	// A redisSide handed to a shared helper as that helper's own interface
	// (groups.Read takes a groups.Redis) uses the helper's methods.
	if side != nil {
		for m := range handedOn(files, info, side.Type()) {
			used[m] = true
		}
	}
	for i := 0; iface != nil && i < iface.NumMethods(); i++ {
		if name := iface.Method(i).Name(); !used[name] {
			problems = append(problems, fmt.Sprintf("%s lists %s but the part's non-test code never calls it: drop %s from %s/%s (a part holds only the Redis operations it uses)", sideName, name, name, part, sideFile))
		}
	}
	sort.Strings(problems)
	return problems
}

// handedOn is the methods of the other interfaces that a value of type side
// is passed as (a call's argument, a struct literal's field).
func handedOn(files []*ast.File, info *types.Info, side types.Type) map[string]bool {
	out := map[string]bool{}
	take := func(arg ast.Expr, to types.Type) {
		if to == nil || types.Identical(to, side) || !types.IsInterface(to) {
			return
		}
		if tv, ok := info.Types[arg]; !ok || !types.Identical(tv.Type, side) {
			return
		}
		ms := types.NewMethodSet(to)
		for i := 0; i < ms.Len(); i++ {
			out[ms.At(i).Obj().Name()] = true
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sig, ok := info.Types[n.Fun].Type.(*types.Signature)
				if !ok || info.Types[n.Fun].IsType() {
					return true
				}
				for i, arg := range n.Args {
					var to types.Type
					switch params := sig.Params(); {
					case sig.Variadic() && i >= params.Len()-1:
						if n.Ellipsis.IsValid() {
							to = params.At(params.Len() - 1).Type()
						} else {
							to = params.At(params.Len() - 1).Type().(*types.Slice).Elem()
						}
					case i < params.Len():
						to = params.At(i).Type()
					}
					take(arg, to)
				}
			case *ast.CompositeLit:
				tv, ok := info.Types[n]
				if !ok {
					return true
				}
				st, ok := tv.Type.Underlying().(*types.Struct)
				if !ok {
					return true
				}
				for i, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if key, ok := kv.Key.(*ast.Ident); ok {
							for j := 0; j < st.NumFields(); j++ {
								if st.Field(j).Name() == key.Name {
									take(kv.Value, st.Field(j).Type())
								}
							}
						}
					} else if i < st.NumFields() {
						take(el, st.Field(i).Type())
					}
				}
			}
			return true
		})
	}
	return out
}
