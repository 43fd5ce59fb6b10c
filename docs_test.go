package maglev_test

import (
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
