package xdpmaglev

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a function of the package may take, its
// signature and closing brace included, as in cmd/l4lb's shape test.
const maxFuncLines = 80

// TestFunctionLength: no function of the package's Go (tests and the
// files bpf2go generates left out) is over maxFuncLines lines.
func TestFunctionLength(t *testing.T) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	funcs := 0
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, "_bpfel.go") || strings.HasSuffix(path, "_bpfeb.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			funcs++
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines, more than %d", fset.Position(fd.Pos()), fd.Name.Name, n, maxFuncLines)
			}
		}
	}
	if funcs < 100 {
		t.Errorf("%d functions in the package: the walk missed its files", funcs)
	}
}
