package maglev_test

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docFiles returns README.md and every page under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, pages...)
}

var (
	// mdLink matches a Markdown link target: [text](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// goCmd matches the package paths of a go run, test, vet or generate
	// command line, up to a pipe, a redirection, a comment or a closing
	// backquote.
	goCmd = regexp.MustCompile("\\bgo (?:run|test|vet|generate|build)\\b([^|>&;#`]*)")
)

// TestDocLinks checks that every relative link in the README and the docs
// pages names a file or folder of the repository.
func TestDocLinks(t *testing.T) {
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link to %s: %v", file, m[1], err)
			}
		}
	}
}

// TestDocCommands checks that every local package a go command in the
// README and the docs pages names (./cmd/maglev, ./ring/, ./grpcmaglev/...)
// exists, so that no documented command points at a moved folder. Paths are
// relative to the repository root, or to the folder a command cds into.
func TestDocCommands(t *testing.T) {
	cd := regexp.MustCompile(`\bcd (\S+)`)
	n := 0
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			dir := "."
			if m := cd.FindStringSubmatch(line); m != nil {
				dir = m[1]
			}
			for _, m := range goCmd.FindAllStringSubmatch(line, -1) {
				for _, arg := range strings.Fields(m[1]) {
					if !strings.HasPrefix(arg, "./") && arg != "." {
						continue
					}
					pkg := strings.TrimSuffix(strings.TrimSuffix(arg, "..."), "/")
					path := filepath.Join(dir, filepath.FromSlash(pkg))
					n++
					if st, err := os.Stat(path); err != nil || !st.IsDir() {
						t.Errorf("%s:%d: %q names %s, which is not a folder of the repository", file, i+1, strings.TrimSpace(line), path)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Error("no go command with a local package found in the docs")
	}
}

// TestDocSignatures checks that every function signature the README and
// the docs list in their Go blocks (a line starting "func " that opens no
// body) is one a package of the repository declares, parameter names and
// all, so that an API
// listing cannot drift from the code.
func TestDocSignatures(t *testing.T) {
	decls := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (d.Name() == "testdata" || path == "bench" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || !fn.Name.IsExported() {
					continue
				}
				fn.Body, fn.Doc = nil, nil
				var b strings.Builder
				if err := printer.Fprint(&b, fset, fn); err != nil {
					t.Fatal(err)
				}
				decls[normalizeSig(b.String())] = true
			}
		}
	}
	listed := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inGo := false
		for n, line := range strings.Split(string(data), "\n") {
			switch {
			case strings.HasPrefix(line, "```go"):
				inGo = true
			case strings.HasPrefix(line, "```"):
				inGo = false
			case inGo && strings.HasPrefix(line, "func ") && !strings.HasSuffix(strings.TrimSpace(line), "{"):
				// A listed signature, not an example's function.
				sig, _, _ := strings.Cut(line, "//")
				if sig = normalizeSig(sig); !decls[sig] {
					t.Errorf("%s:%d: %q is not a signature of any package of the repository", file, n+1, sig)
				}
				listed++
			}
		}
	}
	if listed < 20 {
		t.Fatalf("only %d signatures found in the docs: is the check reading them?", listed)
	}
}

// normalizeSig folds white space.
func normalizeSig(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
