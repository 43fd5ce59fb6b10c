package maglev

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxExported is the most exported identifiers the package may have
// (issue 32's goal for v1): each one must earn its place.
const maxExported = 55

// TestExported checks that the package's exported identifiers (funcs,
// methods of exported types, types, each const and var) are the ones
// api/exported.txt lists, and no more than maxExported: an addition or a
// removal is a deliberate edit of that file, reviewed with the code.
func TestExported(t *testing.T) {
	got := exported(t, ".")
	b, err := os.ReadFile("api/exported.txt")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			want = append(want, line)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("exported identifiers differ from api/exported.txt; now:\n%s", strings.Join(got, "\n"))
	}
	if len(got) > maxExported {
		t.Errorf("%d exported identifiers, more than %d", len(got), maxExported)
	}
}

// exported lists the exported identifiers of the package in dir, sorted.
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
		f, err := parser.ParseFile(fs, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					ids = append(ids, "func "+d.Name.Name)
					continue
				}
				recv := d.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
					ids = append(ids, fmt.Sprintf("method %s.%s", id.Name, d.Name.Name))
				}
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
	return ids
}
