package maglev_test

import (
	"fmt"
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
	"unicode"
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

// docPages returns README.md and every page under docs/ and its folders
// (docs/notes/ among them).
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// maxPageLines is the most lines a page of the docs may have: a longer
// one mixes what readers come for, and is split by it (a guide, a
// reference, an explanation, the tests' records).
const maxPageLines = 600

// TestDocPageLength checks that no page under docs/, nor the README, is
// longer than maxPageLines, and lists each one that is.
func TestDocPageLength(t *testing.T) {
	var long []string
	for _, file := range docPages(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(text), "\n"); n > maxPageLines {
			long = append(long, fmt.Sprintf("%s (%d lines)", file, n))
		}
	}
	if len(long) > 0 {
		t.Errorf("pages over %d lines, to split by what a reader comes for:\n\t%s", maxPageLines, strings.Join(long, "\n\t"))
	}
}

var (
	// mdLink matches a Markdown link target: [text](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// goCmd matches the package paths of a go run, test, vet or generate
	// command line, up to a pipe, a redirection, a comment or a closing
	// backquote.
	goCmd = regexp.MustCompile("\\bgo (?:run|test|vet|generate|build)\\b([^|>&;#`]*)")
	// heading matches a Markdown heading line, its text in group 1.
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// TestDocLinks checks that every relative link in the README and the docs
// pages (docs/notes/ too) names a file or folder of the repository, and
// that every anchor of a link to a page (#section, page.md#section) is a
// heading of that page, as GitHub names it, so that a section moved to
// another page or renamed cannot leave a link pointing at nothing.
func TestDocLinks(t *testing.T) {
	anchors := map[string]map[string]bool{} // by page
	pageAnchors := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(text))
		anchors[path] = a
		return a
	}
	for _, file := range docPages(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(target, "#")
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link to %s: %v", file, m[1], err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !pageAnchors(path)[anchor] {
				t.Errorf("%s: link to %s: %s has no heading #%s", file, m[1], path, anchor)
			}
		}
	}
}

// TestHeadingAnchors checks headingAnchors against anchors GitHub gives
// headings of these docs.
func TestHeadingAnchors(t *testing.T) {
	text := "# Top\n" +
		"## Backends in other subnets: `-forward ipip|gue` and `l4lb decap`\n" +
		"```sh\n# a comment, no heading\n```\n" +
		"### Per packet\n## Per packet\n" +
		"## Bounded loads: `-inflight`, `-balance-factor`\n" +
		"## l4lb's own\n"
	got := headingAnchors(text)
	for _, want := range []string{"top", "backends-in-other-subnets--forward-ipipgue-and-l4lb-decap", "per-packet", "per-packet-1", "bounded-loads--inflight--balance-factor", "l4lbs-own"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["a-comment-no-heading"] || len(got) != 6 {
		t.Errorf("anchors %v, want the 6 headings' only", got)
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown page: each heading lower-cased, without the characters that are
// not letters, digits, spaces, '-' or '_', its spaces made '-'; a second
// heading with the same anchor gets "-1", a third "-2". Lines in code
// blocks are no headings.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		m := heading.FindStringSubmatch(line)
		if fence || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
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
