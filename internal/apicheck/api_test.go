// Package apicheck pins the public API of the module: every exported
// declaration of every public package, with its full type, is listed in
// api/<package>.txt at the root of the module, and a change of the API is a
// change of those files, visible in review. It also checks that no exported
// declaration names a type of an internal package, which users could see
// but not name.
//
// After an intended API change, regenerate the files with
//
//	go test ./internal/apicheck -update
package apicheck

import (
	"flag"
	"fmt"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

var update = flag.Bool("update", false, "rewrite api/*.txt from the code")

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// apiDir is where the pinned API files live, relative to this package.
const apiDir = "../../api"

// publicPackages loads every package of the module that a user can import:
// not internal, not a test harness, not an example or a command.
func publicPackages(t *testing.T) []*packages.Package {
	t.Helper()
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedFiles, Dir: "../.."}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		t.Fatalf("loading the module's packages: %v", err)
	}
	var out []*packages.Package
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.PkgPath, testutils.ModulePath), "/")
		if isInternal(p.PkgPath) || p.Name == "main" || strings.HasPrefix(rel, "e2e") || strings.HasPrefix(rel, "examples") {
			continue
		}
		if len(p.Errors) > 0 {
			t.Fatalf("package %s: %v", p.PkgPath, p.Errors)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		t.Fatal("no public package found")
	}
	slices.SortFunc(out, func(a, b *packages.Package) int { return strings.Compare(a.PkgPath, b.PkgPath) })
	return out
}

var internalPath = regexp.MustCompile(`(^|/)internal(/|$)`)

func isInternal(path string) bool { return internalPath.MatchString(path) }

// fileName is the API file of the package at path: "xds.txt" for the
// module's root, "bootstrap.txt" for .../bootstrap.
func fileName(path string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, testutils.ModulePath), "/")
	if rel == "" {
		rel = "xds"
	}
	return strings.ReplaceAll(rel, "/", "_") + ".txt"
}

// TestAPIPinned: the exported API of each public package is the one in
// api/, and api/ has no file for a package that is gone.
func TestAPIPinned(t *testing.T) {
	want := map[string]bool{}
	for _, p := range publicPackages(t) {
		name := fileName(p.PkgPath)
		want[name] = true
		got := strings.Join(apiLines(p.Types), "\n") + "\n"
		file := filepath.Join(apiDir, name)
		if *update {
			if err := os.MkdirAll(apiDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		pinned, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("package %s has no pinned API (%v): run go test ./internal/apicheck -update and review api/%s", p.PkgPath, err, name)
			continue
		}
		if string(pinned) != got {
			t.Errorf("the API of %s differs from api/%s: if the change is intended, run go test ./internal/apicheck -update and commit the diff\n%s",
				p.PkgPath, name, lineDiff(string(pinned), got))
		}
	}
	files, _ := filepath.Glob(filepath.Join(apiDir, "*.txt"))
	for _, f := range files {
		if !want[filepath.Base(f)] {
			if *update {
				os.Remove(f)
				continue
			}
			t.Errorf("api/%s pins a package that no longer exists or is no longer public", filepath.Base(f))
		}
	}
}

// TestNoInternalTypes: no exported declaration of a public package names a
// type of an internal package (of this module or any other).
func TestNoInternalTypes(t *testing.T) {
	n := 0
	for _, p := range publicPackages(t) {
		for _, l := range apiLines(p.Types) {
			for _, ref := range typeRefs.FindAllString(l, -1) {
				if isInternal(ref) {
					t.Errorf("%s: %s names internal package %s", p.PkgPath, l, ref)
					n++
				}
			}
		}
	}
	t.Logf("%d exported declarations name internal types", n)
}

// typeRefs finds the package paths in a line of apiLines: every type is
// written with its full package path.
var typeRefs = regexp.MustCompile(`[a-z0-9.\-]+\.[a-z]+/[A-Za-z0-9_./\-]+`)

// apiLines lists the exported API of pkg, one declaration per line, sorted:
// constants and variables with their types, functions and methods with
// their signatures, types with their underlying type, exported struct
// fields and interface methods on lines of their own. Types of other
// packages are written with their full package path.
func apiLines(pkg *types.Package) []string {
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Path()
	}
	ts := func(t types.Type) string { return types.TypeString(t, qual) }
	var lines []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			lines = append(lines, fmt.Sprintf("const %s %s = %s", name, ts(o.Type()), o.Val().ExactString()))
		case *types.Var:
			lines = append(lines, fmt.Sprintf("var %s %s", name, ts(o.Type())))
		case *types.Func:
			lines = append(lines, "func "+name+sigString(o.Type().(*types.Signature), ts))
		case *types.TypeName:
			lines = append(lines, typeLines(o, ts)...)
		}
	}
	slices.Sort(lines)
	return lines
}

// typeLines lists an exported type: its definition, exported fields,
// interface methods and exported methods.
func typeLines(o *types.TypeName, ts func(types.Type) string) []string {
	name := o.Name()
	if o.IsAlias() {
		return []string{fmt.Sprintf("type %s = %s", name, ts(types.Unalias(o.Type())))}
	}
	named, ok := o.Type().(*types.Named)
	if !ok {
		return []string{fmt.Sprintf("type %s %s", name, ts(o.Type()))}
	}
	tparams := ""
	if tp := named.TypeParams(); tp.Len() > 0 {
		var ps []string
		for i := range tp.Len() {
			ps = append(ps, tp.At(i).Obj().Name()+" "+ts(tp.At(i).Constraint()))
		}
		tparams = "[" + strings.Join(ps, ", ") + "]"
	}
	var lines []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		lines = append(lines, fmt.Sprintf("type %s%s struct", name, tparams))
		for i := range u.NumFields() {
			if f := u.Field(i); f.Exported() {
				if f.Embedded() {
					lines = append(lines, fmt.Sprintf("type %s struct, embedded %s", name, ts(f.Type())))
				} else {
					lines = append(lines, fmt.Sprintf("type %s struct, %s %s", name, f.Name(), ts(f.Type())))
				}
			}
		}
	case *types.Interface:
		lines = append(lines, fmt.Sprintf("type %s%s interface", name, tparams))
		for i := range u.NumEmbeddeds() {
			lines = append(lines, fmt.Sprintf("type %s interface, embedded %s", name, ts(u.EmbeddedType(i))))
		}
		for i := range u.NumExplicitMethods() {
			if m := u.ExplicitMethod(i); m.Exported() {
				lines = append(lines, fmt.Sprintf("type %s interface, %s%s", name, m.Name(), sigString(m.Type().(*types.Signature), ts)))
			} else {
				lines = append(lines, fmt.Sprintf("type %s interface, unexported methods", name))
			}
		}
	default:
		lines = append(lines, fmt.Sprintf("type %s%s %s", name, tparams, ts(u)))
	}
	for i := range named.NumMethods() {
		m := named.Method(i)
		if !m.Exported() {
			continue
		}
		sig := m.Type().(*types.Signature)
		recv := name
		if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
			recv = "*" + name
		}
		lines = append(lines, fmt.Sprintf("method (%s) %s%s", recv, m.Name(), sigString(sig, ts)))
	}
	return lines
}

// sigString writes a signature's parameter and result types, without
// their names: renaming a parameter does not change the API.
func sigString(sig *types.Signature, ts func(types.Type) string) string {
	list := func(t *types.Tuple, variadic bool) string {
		var out []string
		for i := range t.Len() {
			s := ts(t.At(i).Type())
			if variadic && i == t.Len()-1 {
				s = "..." + strings.TrimPrefix(s, "[]")
			}
			out = append(out, s)
		}
		return strings.Join(out, ", ")
	}
	s := "(" + list(sig.Params(), sig.Variadic()) + ")"
	switch r := sig.Results(); r.Len() {
	case 0:
	case 1:
		s += " " + list(r, false)
	default:
		s += " (" + list(r, false) + ")"
	}
	return s
}

// lineDiff lists the lines only in want ("-") and only in got ("+").
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if l != "" && !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if l != "" && !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
