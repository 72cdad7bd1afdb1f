// Package house checks the shape of the repository that no compiler does: the
// size of the public API, the length of the adapters' functions and the size
// of the docs. Each limit is a budget the project chose (see CONTRIBUTING.md);
// a change that goes over it must take something out, or change the budget
// here in a commit that says why.
package house

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// top is the repository's top directory, from this package's.
const top = "../.."

// Budgets.
const (
	maxRootNames       = 100 // exported declarations of the root package
	maxRedisNames      = 80  // of redislimit
	maxPublicNames     = 250 // of every public package together
	maxRootInterfaces  = 4
	maxAdapterFuncLine = 60 // lines of a non-test function in quota, httplimit, grpclimit
	maxReadme          = 10_000
	maxDesign          = 50_000 // every DESIGN*.md together
)

// exported matches a line of `go doc -all` that declares a name: a function,
// a type or a method (the count the project's budget is in).
var exported = regexp.MustCompile(`(?m)^(func|type|    func)`)

// iface matches the line of `go doc -all` that declares an interface type.
var iface = regexp.MustCompile(`(?m)^type \w+(\[[^\]]*\])? interface`)

// publicPackages returns the packages a user can import, by directory
// relative to top: every package of a published module (tools/release's
// unpublished.txt names the others) but internal and cmd ones.
func publicPackages(t *testing.T) []string {
	t.Helper()
	unpublished := map[string]bool{}
	f, err := os.ReadFile(filepath.Join(top, "tools/release/unpublished.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(f))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			unpublished[line] = true
		}
	}
	var modules []string
	err = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			dir, _ := filepath.Rel(top, filepath.Dir(p))
			if !unpublished[filepath.ToSlash(dir)] {
				modules = append(modules, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, m := range modules {
		cmd := exec.Command("go", "list", "-f", "{{.Dir}}", "./...")
		cmd.Dir = filepath.Join(top, m)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", m, err)
		}
		abs, _ := filepath.Abs(top)
		for _, dir := range strings.Fields(string(out)) {
			rel, _ := filepath.Rel(abs, dir)
			rel = filepath.ToSlash(rel)
			if strings.Contains("/"+rel+"/", "/internal/") || strings.Contains("/"+rel+"/", "/cmd/") {
				continue
			}
			// A nested published module's packages are listed by its own go list.
			pkgs = append(pkgs, rel)
		}
	}
	return pkgs
}

// goDoc returns `go doc -all` of the package in dir (relative to top).
func goDoc(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("go", "doc", "-all", ".")
	cmd.Dir = filepath.Join(top, dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go doc -all in %s: %v", dir, err)
	}
	return string(out)
}

func TestExportBudget(t *testing.T) {
	total := 0
	seen := map[string]int{}
	for _, p := range publicPackages(t) {
		doc := goDoc(t, p)
		n := len(exported.FindAllString(doc, -1))
		seen[p] = n
		total += n
		t.Logf("%-12s %3d exported declarations", p, n)
		if p == "." {
			if k := len(iface.FindAllString(doc, -1)); k > maxRootInterfaces {
				t.Errorf("the root exports %d interfaces; the budget is %d", k, maxRootInterfaces)
			}
		}
	}
	if _, ok := seen["."]; !ok {
		t.Fatal("the root package was not found among the public packages")
	}
	if seen["."] > maxRootNames {
		t.Errorf("the root exports %d declarations; the budget is %d", seen["."], maxRootNames)
	}
	if seen["redislimit"] > maxRedisNames {
		t.Errorf("redislimit exports %d declarations; the budget is %d", seen["redislimit"], maxRedisNames)
	}
	if total > maxPublicNames {
		t.Errorf("the public packages export %d declarations together; the budget is %d", total, maxPublicNames)
	}
	t.Logf("total        %3d", total)
}

func TestAdapterFunctionsAreShort(t *testing.T) {
	for _, dir := range []string{"quota", "httplimit", "grpclimit"} {
		files, err := filepath.Glob(filepath.Join(top, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s (%v)", dir, err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				if lines > maxAdapterFuncLine {
					t.Errorf("%s: %s is %d lines; an adapter's function is at most %d: split it where it does two jobs",
						filepath.Join(dir, filepath.Base(f)), fd.Name.Name, lines, maxAdapterFuncLine)
				}
			}
		}
	}
}

func TestDocsAreShort(t *testing.T) {
	readme, err := os.Stat(filepath.Join(top, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if readme.Size() > maxReadme {
		t.Errorf("README.md is %d bytes; the budget is %d: move detail to the package docs", readme.Size(), maxReadme)
	}
	var design int64
	issue := regexp.MustCompile(`(?i)\bissue #?[0-9]+`)
	err = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), "DESIGN") || !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		design += int64(len(b))
		if m := issue.Find(b); m != nil {
			t.Errorf("%s cites %q: a design note says why, not which issue asked", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if design == 0 {
		t.Fatal("no DESIGN*.md found")
	}
	if design > maxDesign {
		t.Errorf("the DESIGN*.md files are %d bytes together; the budget is %d", design, maxDesign)
	}
}

// TestShortOnlyTrimsBenchmarks: testing.Short is read only where a
// *testing.B is at hand (a Benchmark function, or a helper that takes
// one). CI runs the tests with -short, for the benchmarks that run once
// in the same binaries (.ci/run), so a test that read it would run
// smaller in CI than in `.ci/test`.
func TestShortOnlyTrimsBenchmarks(t *testing.T) {
	fset := token.NewFileSet()
	found := 0
	err := filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			reads := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Short" {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "testing" {
						reads = true
					}
				}
				return true
			})
			if !reads {
				continue
			}
			found++
			if !strings.HasPrefix(fn.Name.Name, "Benchmark") && !takesB(fn) {
				t.Errorf("%s: %s reads testing.Short without a *testing.B: CI runs the tests with -short", fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no function reads testing.Short: is the walk looking at the repository?")
	}
}

// takesB reports whether fn has a parameter of type *testing.B.
func takesB(fn *ast.FuncDecl) bool {
	for _, p := range fn.Type.Params.List {
		if star, ok := p.Type.(*ast.StarExpr); ok {
			if sel, ok := star.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "B" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "testing" {
					return true
				}
			}
		}
	}
	return false
}
