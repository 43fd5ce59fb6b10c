package xdpmaglev

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestExported checks that the package's exported identifiers (funcs,
// methods of exported types, types, each const and var; fields left out)
// are the ones ../api/xdpmaglev.txt lists: an addition or a removal is a
// deliberate edit of that file, reviewed with the code, as the root
// package's api/exported.txt is.
func TestExported(t *testing.T) {
	got := exported(t, ".")
	b, err := os.ReadFile("../api/xdpmaglev.txt")
	if errors.Is(err, fs.ErrNotExist) {
		if _, werr := os.Stat("../go.work"); errors.Is(werr, fs.ErrNotExist) {
			t.Skip("the module outside its repository: no api/ list to compare with")
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			want = append(want, line)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("exported identifiers differ from api/xdpmaglev.txt; now (%d):\n%s", len(got), strings.Join(got, "\n"))
	}
}

// exported lists the exported identifiers of the package in dir, sorted,
// tests left out.
func exported(t *testing.T, dir string) []string {
	t.Helper()
	fs := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				ids = append(ids, funcID(d)...)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							ids = append(ids, "type "+s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								ids = append(ids, d.Tok.String()+" "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// funcID returns d's identifier if it is exported: "func F", or
// "method T.M" for a method of an exported type.
func funcID(d *ast.FuncDecl) []string {
	if !d.Name.IsExported() {
		return nil
	}
	if d.Recv == nil {
		return []string{"func " + d.Name.Name}
	}
	recv := d.Recv.List[0].Type
	if s, ok := recv.(*ast.StarExpr); ok {
		recv = s.X
	}
	if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
		return []string{fmt.Sprintf("method %s.%s", id.Name, d.Name.Name)}
	}
	return nil
}
