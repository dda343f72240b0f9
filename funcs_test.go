package otad_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"strings"
	"testing"
)

// maxFuncLines bounds a function of product code, the benchmarks and the
// test kits: one that grows past it has steps, and each step gets a name
// of its own (docs/design.md, "Seams"). Files are split along concepts,
// not counted.
const maxFuncLines = 80

// TestFunctionsStayShort: no function (tests and the QEMU suite aside) is
// over maxFuncLines lines, its signature and closing brace included.
func TestFunctionsStayShort(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "*.go").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	fset := token.NewFileSet()
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, "e2e/") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			continue // deleted in the work tree, or not ours to parse
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			from, to := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := to.Line - from.Line + 1; n > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines, over %d: give its steps names of their own", f, from.Line, fd.Name.Name, n, maxFuncLines)
			}
		}
	}
}
