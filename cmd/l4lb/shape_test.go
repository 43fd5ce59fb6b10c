package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a function of a program's code may
// take, its signature and closing brace included.
const maxFuncLines = 80

// maxMainLines is the most lines of code (not blank, not a comment)
// package main of l4lb may have outside its tests: it wires the packages
// of internal/, which hold the parts.
const maxMainLines = 800

// TestFunctionLength: no function of the programs' code in cmd/ (every
// command, every internal package, tests left out) is over maxFuncLines
// lines.
func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	funcs := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
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
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if funcs < 300 {
		t.Errorf("%d functions in cmd/: the walk missed the programs", funcs)
	}
}

// TestMainSize: package main of l4lb is at most maxMainLines lines of
// code, outside its tests.
func TestMainSize(t *testing.T) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.Lines(string(b)) {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
				code++
			}
		}
	}
	if code == 0 || code > maxMainLines {
		t.Errorf("package main has %d lines of code, want at most %d: a part belongs in a package of internal/", code, maxMainLines)
	}
}
