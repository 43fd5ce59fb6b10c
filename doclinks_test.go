package maglev_test

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"maps"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// docPackages are the packages whose doc comments TestDocNames checks, by
// folder, with their import paths. They name one another: a bare word in
// bounded's doc may name a method of maglev's Table.
var docPackages = map[string]string{
	".":       "github.com/maglevlb/maglev",
	"bounded": "github.com/maglevlb/maglev/bounded",
	"ring":    "github.com/maglevlb/maglev/ring",
}

// proseWords are the words the doc comments use as words, not as
// identifiers of theirs: names of people, systems and units, and names
// from packages they do not import. A word that is neither a declared
// identifier nor listed here fails TestDocNames; if it is prose, add it.
var proseWords = []string{
	"Done", // gRPC's PickResult.Done, in bounded's doc
	"Eisenbud", "Envoy", "FarmHash", "Fingerprint64", "Google", "Karger",
	"KiB", "Maglev", "MiB", "Mirrokni", "NaN", "SplitMix64", "Thorup",
	"Zadimoghaddam", "eBPF", "gRPC",
}

// TestDocNames checks that the doc comments of the root, bounded and ring
// packages name only identifiers that exist, so that a rename or a removal
// cannot leave a doc pointing at nothing. In the package comment and the
// doc of every exported declaration (and exported field) it resolves:
//
//   - every doc link, [Name], [Type.Method], [pkg.Name] or
//     [path/to/pkg.Name], as go doc does: pkg must be imported by the
//     package (or be a standard package of one path element), and Name
//     declared there (a type's method or field after Type.);
//   - every backticked identifier or selector (`NewWeighted`,
//     `Table.Lookup`, `maglev.Table`) that starts with an exported name or
//     a package name;
//   - in the prose, every selector that starts with a package name or an
//     exported identifier (Table.Without, ring.Ring.Diff), every word
//     written as an identifier (a lower-case word with capitals inside, as
//     noBackend), and every capitalized word that does not start a
//     sentence (Lookup, Owner), unless it is an acronym (XXH3, NSDI), a
//     single letter (the M of the formulas) or one of proseWords.
//
// A bare word may name a method or field of any type of the package or of
// the docPackages it imports (Lookup for Table.Lookup), or, as Test...,
// Benchmark..., Fuzz... or Example..., a function of the package's tests;
// a plural (Acquires) names what its singular names. Text in double
// quotes, code blocks, words inside paths and math (hash/fnv, count_A) are
// not read. Exported docs name exported identifiers only: an unexported
// one (noBackend) is not something a reader can look up.
func TestDocNames(t *testing.T) {
	skipShortGoList(t)
	for dir, importPath := range docPackages {
		p := loadDocPackage(t, dir, importPath)
		for _, c := range p.comments {
			seen := map[string]int{}
			for _, f := range p.unresolved(t, c.text) {
				seen[f.name]++
				t.Errorf("%s: %s: %s (in the doc of %s)", p.fset.Position(c.find(f.name, seen[f.name])), f.name, f.why, c.of)
			}
		}
	}
}

// TestDocNamesCatches checks that TestDocNames's resolver flags the stale
// names it was written to catch, and passes what exists.
func TestDocNamesCatches(t *testing.T) {
	skipShortGoList(t)
	p := loadDocPackage(t, ".", docPackages["."])
	for _, c := range []struct {
		text string
		want []string // the names found, in order; nil for none
	}{
		// The stale names it was written for (issue: the library's small
		// things), as the docs had them.
		{"so that Lookup, Owner and Backends answer by name.", []string{"Owner"}},
		{"The result has the base's backends (Len, Backends and Index are the base's).", []string{"Len"}},
		{"Weights, Candidates and Bounded; they do not change", []string{"Bounded"}},
		{"If every slot is noBackend, the table is empty.", []string{"noBackend"}},
		{"and so is a Ring of the companion package", []string{"Ring"}},
		// Links, backticks and selectors.
		{"See [Table.Owner] and [NewTable], or `Table.Len` and `Bounded`.", []string{"[Table.Owner]", "[NewTable]", "`Table.Len`", "`Bounded`"}},
		{"Compare with [ring.Ring.Diff] and [atomic.Pointer].", []string{"[ring.Ring.Diff]", "[atomic.Pointer]"}},
		{"Publish it with [sync/atomic.Pointer.Swap]; [sync/atomic.Pointer.Swapp] is not.", []string{"[sync/atomic.Pointer.Swapp]"}},
		{"Use Table.Without and ring.Ring.Diff, not Table.Remove or xxh3.Hash32.", []string{"Table.Remove", "xxh3.Hash32"}},
		{"Ranging over it calls TestNoSuchTest.", []string{"TestNoSuchTest"}},
		// What resolves or is not an identifier.
		{"Lookup returns \"Owner\"; see [Table.Lookup], [New], [Permutation.Skip], [Hasher.HashString], [xxh3.HashString], [farm.Fingerprint64] and `Table.Lookup`, as Google's Maglev does in 2 KiB for its Lookups.", nil},
		{"Compare e.g. t.Without(a), Backends()[i], README.md, docs/peers.md, github.com/zeebo/xxh3's Hash, count_A and TestGolden, with XXH3 for NSDI.", nil},
	} {
		var got []string
		for _, f := range p.unresolved(t, c.text) {
			got = append(got, f.name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: found %q, want %q", c.text, got, c.want)
		}
	}
}

// A docPackage is a package's exported doc comments and what they may
// name.
type docPackage struct {
	fset     *token.FileSet
	doc      *doc.Package
	syms     map[string]bool // declared: Name, Type.Member
	members  map[string]bool // Member of any Type.Member, here or in the docPackages imported
	tests    map[string]bool // the functions of the package's tests
	comments []docComment
}

// A docComment is one doc comment and what it documents.
type docComment struct {
	group *ast.CommentGroup
	text  string
	of    string
}

// find returns the position of the line of c where name occurs for the
// nth time, or of c.
func (c docComment) find(name string, nth int) token.Pos {
	name = strings.Trim(name, "[]`")
	for _, l := range c.group.List {
		if nth -= strings.Count(l.Text, name); nth <= 0 {
			return l.Pos()
		}
	}
	return c.group.Pos()
}

// A finding is a name a doc comment gives that does not resolve, and why.
type finding struct {
	name, why string
}

// loadDocPackage reads the package in dir, its tests' function names,
// and the members of the docPackages it imports.
func loadDocPackage(t *testing.T, dir, importPath string) *docPackage {
	t.Helper()
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := parseDocPackage(t, bp, importPath)
	for _, name := range slices.Concat(bp.TestGoFiles, bp.XTestGoFiles) {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(bp.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
				p.tests[fn.Name.Name] = true
			}
		}
	}
	for _, path := range p.doc.Imports {
		if slices.Contains(slices.Collect(maps.Values(docPackages)), path) {
			imp, err := importDocPackage(t, path)
			if err != nil {
				t.Fatal(err)
			}
			for m := range imp.members {
				p.members[m] = true
			}
		}
	}
	return p
}

// parseDocPackage parses the non-test files of bp: its declarations and
// the doc comments of its exported ones.
func parseDocPackage(t *testing.T, bp *build.Package, importPath string) *docPackage {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(bp.Dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// The comments are collected before doc.NewFromFiles, which drops
	// unexported fields from the syntax trees.
	var comments []docComment
	add := func(g *ast.CommentGroup, of string) {
		if g != nil {
			comments = append(comments, docComment{g, g.Text(), of})
		}
	}
	for _, f := range files {
		add(f.Doc, "package "+f.Name.Name)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if name := funcName(d); name != "" {
					add(d.Doc, name)
				}
			case *ast.GenDecl:
				var exported []string
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						exported = append(exported, s.Name.Name)
						add(s.Doc, s.Name.Name)
						add(s.Comment, s.Name.Name)
						for _, fld := range typeFields(s.Type) {
							for _, n := range fld.Names {
								if n.IsExported() {
									add(fld.Doc, s.Name.Name+"."+n.Name)
									add(fld.Comment, s.Name.Name+"."+n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						if !slices.ContainsFunc(s.Names, (*ast.Ident).IsExported) {
							continue
						}
						exported = append(exported, s.Names[0].Name)
						add(s.Doc, s.Names[0].Name)
						add(s.Comment, s.Names[0].Name)
					}
				}
				if len(exported) > 0 {
					add(d.Doc, strings.Join(exported, ", "))
				}
			}
		}
	}
	dp, err := doc.NewFromFiles(fset, files, importPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &docPackage{fset: fset, doc: dp, syms: map[string]bool{}, members: map[string]bool{}, tests: map[string]bool{}, comments: comments}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				p.syms[n] = true
			}
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			p.syms[f.Name] = true
		}
	}
	values(dp.Consts)
	values(dp.Vars)
	funcs(dp.Funcs)
	for _, typ := range dp.Types {
		p.syms[typ.Name] = true
		values(typ.Consts)
		values(typ.Vars)
		funcs(typ.Funcs)
		member := func(name string) {
			p.syms[typ.Name+"."+name] = true
			p.members[name] = true
		}
		for _, m := range typ.Methods {
			member(m.Name)
		}
		for _, s := range typ.Decl.Specs {
			for _, fld := range typeFields(s.(*ast.TypeSpec).Type) {
				for _, n := range fld.Names {
					member(n.Name) // fields, interface methods
				}
			}
		}
	}
	return p
}

// funcName returns the name of an exported function, or Type.Method for
// an exported method of an exported type, or "" for any other.
func funcName(d *ast.FuncDecl) string {
	if !d.Name.IsExported() {
		return ""
	}
	if d.Recv == nil {
		return d.Name.Name
	}
	recv := d.Recv.List[0].Type
	if s, ok := recv.(*ast.StarExpr); ok {
		recv = s.X
	}
	switch r := recv.(type) {
	case *ast.IndexExpr:
		recv = r.X
	case *ast.IndexListExpr:
		recv = r.X
	}
	if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
		return id.Name + "." + d.Name.Name
	}
	return ""
}

// typeFields returns the fields of a struct type or the methods of an
// interface type, or nil.
func typeFields(e ast.Expr) []*ast.Field {
	switch e := e.(type) {
	case *ast.StructType:
		return e.Fields.List
	case *ast.InterfaceType:
		return e.Methods.List
	}
	return nil
}

// imported caches the packages that doc links and qualified names point
// into, by import path.
var imported = map[string]*docPackage{}

// skipShortGoList skips a test that resolves imports, as go/build does,
// by running the go command: short mode is how the emulated
// architectures run the tests, where a test binary that execs a host
// program dies ("morestack on g0" under qemu-i386), and the names in docs
// are the same on every architecture.
func skipShortGoList(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves imports with the go command; skipped in short mode")
	}
}

// importDocPackage returns the package at importPath, or an error if it
// cannot be found.
func importDocPackage(t *testing.T, importPath string) (*docPackage, error) {
	if p, ok := imported[importPath]; ok {
		return p, nil
	}
	bp, err := build.Import(importPath, ".", 0)
	if err != nil {
		return nil, err
	}
	p := parseDocPackage(t, bp, importPath)
	imported[importPath] = p
	return p, nil
}

// pkgPath returns the import path of the package that name qualifies in
// p's docs: p itself, one of its imports (by the name it is imported as)
// or one of the docPackages, which name one another.
func (p *docPackage) pkgPath(name string) (string, bool) {
	if name == p.doc.Name {
		return p.doc.ImportPath, true
	}
	if path, ok := p.doc.Parser().LookupPackage(name); ok && path != "" {
		return path, true
	}
	for _, path := range docPackages {
		if pathBase(path) == name {
			return path, true
		}
	}
	return "", false
}

// pathBase returns an import path's last element: the package's name, for
// the docPackages.
func pathBase(importPath string) string { return path.Base(importPath) }

// resolve explains why sym (Name or Type.Member) is not declared by the
// package at importPath, or returns "".
func (p *docPackage) resolve(t *testing.T, importPath, sym string) string {
	q := p
	if importPath != p.doc.ImportPath {
		var err error
		if q, err = importDocPackage(t, importPath); err != nil {
			return fmt.Sprintf("no package %s: %v", importPath, err)
		}
	}
	if q.syms[sym] {
		return ""
	}
	return fmt.Sprintf("%s declares no %s", importPath, sym)
}

var (
	// backticked matches a backticked span.
	backticked = regexp.MustCompile("`([^`\n]*)`")
	// selectorLike matches an identifier or a selector, with an optional
	// leading * and trailing call or (), as written in backticks.
	selectorLike = regexp.MustCompile(`^\*?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:\(.*\))?$`)
	// word matches a word of prose, or a selector.
	word = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*`)
	// quoted matches text in double quotes.
	quoted = regexp.MustCompile(`"[^"]*"`)
)

// unresolved returns the names text, a doc comment of p, gives that do
// not resolve.
func (p *docPackage) unresolved(t *testing.T, text string) []finding {
	var bad []finding
	parser := comment.Parser{
		// Every syntactic doc link becomes a DocLink, checked below. A
		// name that is not a package go doc knows is marked with a NUL.
		LookupPackage: func(name string) (string, bool) {
			if path, ok := p.doc.Parser().LookupPackage(name); ok {
				return path, true
			}
			if path, ok := comment.DefaultLookupPackage(name); ok {
				return path, true
			}
			return "\x00" + name, true
		},
		LookupSym: func(recv, name string) bool { return true },
	}
	var walkText func([]comment.Text)
	walkText = func(texts []comment.Text) {
		for _, x := range texts {
			switch x := x.(type) {
			case comment.Plain:
				bad = append(bad, p.unresolvedProse(t, string(x))...)
			case comment.Italic:
				bad = append(bad, p.unresolvedProse(t, string(x))...)
			case *comment.Link:
				walkText(x.Text)
			case *comment.DocLink:
				if f, ok := p.unresolvedLink(t, x); ok {
					bad = append(bad, f)
				}
			}
		}
	}
	var walk func([]comment.Block)
	walk = func(blocks []comment.Block) {
		for _, b := range blocks {
			switch b := b.(type) {
			case *comment.Paragraph:
				walkText(b.Text)
			case *comment.Heading:
				walkText(b.Text)
			case *comment.List:
				for _, item := range b.Items {
					walk(item.Content)
				}
			}
		}
	}
	walk(parser.Parse(text).Content)
	return bad
}

// unresolvedLink returns the doc link l as a finding if it does not
// resolve.
func (p *docPackage) unresolvedLink(t *testing.T, l *comment.DocLink) (finding, bool) {
	sym := l.Name
	if l.Recv != "" {
		sym = l.Recv + "." + l.Name
	}
	pkg, unknown := strings.CutPrefix(l.ImportPath, "\x00")
	link := "[" + sym + "]"
	switch {
	case pkg == "":
	case sym == "":
		link = "[" + pkg + "]"
	default:
		link = "[" + pkg + "." + sym + "]"
	}
	switch {
	case unknown && sym == "":
		return finding{}, false // [i], an index: go doc links no package i either
	case unknown:
		return finding{link, "package " + pkg + " is not imported here, so go doc does not link it: name it by its import path"}, true
	case sym == "":
		if _, err := importDocPackage(t, pkg); err != nil {
			return finding{link, err.Error()}, true
		}
		return finding{}, false
	}
	if pkg == "" {
		pkg = p.doc.ImportPath
	}
	if why := p.resolve(t, pkg, sym); why != "" {
		return finding{link, why}, true
	}
	return finding{}, false
}

// unresolvedProse returns the names the plain text s gives that do not
// resolve: backticked identifiers, and identifiers in the prose.
func (p *docPackage) unresolvedProse(t *testing.T, s string) []finding {
	var bad []finding
	blank := func(x string) string { return strings.Repeat(" ", len(x)) }
	s = backticked.ReplaceAllStringFunc(s, func(span string) string {
		if m := selectorLike.FindStringSubmatch(span[1 : len(span)-1]); m != nil {
			if why := p.resolveName(t, m[1], true); why != "" {
				bad = append(bad, finding{span, why})
			}
		}
		return blank(span)
	})
	s = quoted.ReplaceAllStringFunc(s, blank)
	for _, loc := range word.FindAllStringIndex(s, -1) {
		w := s[loc[0]:loc[1]]
		before, _ := utf8.DecodeLastRuneInString(s[:loc[0]])
		after, _ := utf8.DecodeRuneInString(s[loc[1]:])
		if loc[0] > 0 && (unicode.IsLetter(before) || unicode.IsDigit(before) || strings.ContainsRune("/-'.\\_", before)) ||
			unicode.IsLetter(after) || unicode.IsDigit(after) || after == '/' || after == '-' {
			continue // part of a path, a math word or a number
		}
		if strings.Contains(w, ".") {
			if why := p.resolveName(t, w, false); why != "" {
				bad = append(bad, finding{w, why})
			}
			continue
		}
		switch {
		case len(w) == 1, isAcronym(w), strings.Contains(w, "_"), slices.Contains(proseWords, w):
		case unicode.IsLower(rune(w[0])) && strings.IndexFunc(w, unicode.IsUpper) > 0:
			bad = append(bad, finding{w, "not exported: an exported doc names exported identifiers only"})
		case unicode.IsUpper(rune(w[0])) && !sentenceStart(s[:loc[0]]):
			if !p.bare(w) {
				bad = append(bad, finding{w, p.doc.ImportPath + " declares no " + w + ", nor a method or field of that name"})
			}
		}
	}
	return bad
}

// bare reports whether the bare word w names an identifier of p, a method
// or field (see docPackage.members), or a function of p's tests, or is the
// plural of one.
func (p *docPackage) bare(w string) bool {
	for _, w := range []string{w, strings.TrimSuffix(w, "s")} {
		if p.syms[w] || p.members[w] || p.tests[w] || isAcronym(w) {
			return true
		}
	}
	return false
}

// resolveName explains why an identifier or selector written in prose or
// backticks does not resolve, or returns "". A selector is resolved when
// its first part is a package name p may qualify with (see pkgPath) or an
// exported identifier of p; one starting with another word is an
// expression (t.Without(a)) or a file name (README.md), not checked.
// Single words are checked here only when backticked and exported.
func (p *docPackage) resolveName(t *testing.T, name string, backticked bool) string {
	parts := strings.Split(name, ".")
	if len(parts) == 1 {
		if !backticked || !token.IsExported(name) || p.bare(name) {
			return ""
		}
		return p.doc.ImportPath + " declares no " + name
	}
	if path, ok := p.pkgPath(parts[0]); ok {
		return p.resolve(t, path, strings.Join(parts[1:], "."))
	}
	if len(parts) > 2 || !token.IsExported(parts[0]) || isAcronym(parts[0]) && !p.syms[parts[0]] {
		return ""
	}
	return p.resolve(t, p.doc.ImportPath, name)
}

// isAcronym reports whether w is written in capitals (and digits): XXH3,
// NSDI, SHA.
func isAcronym(w string) bool {
	return strings.IndexFunc(w, unicode.IsLower) < 0 && strings.IndexFunc(w, unicode.IsUpper) >= 0
}

// sentenceStart reports whether a word that follows s starts a sentence:
// s, a paragraph's text up to the word, ends with the end of a sentence
// (and perhaps an opening bracket or quote), or is empty.
func sentenceStart(s string) bool {
	s = strings.TrimRightFunc(s, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune("([*\"“", r) })
	if s == "" {
		return true
	}
	last, _ := utf8.DecodeLastRuneInString(s)
	return strings.ContainsRune(".!?", last)
}
