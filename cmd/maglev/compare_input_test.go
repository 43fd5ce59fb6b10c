package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes text to a new file called name in a temporary directory
// and returns its path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o666); err != nil {
		t.Fatal(err)
	}
	return path
}

// sameNumbers checks that two reports agree on every number that does not
// depend on timing.
func sameNumbers(t *testing.T, what string, a, b *report) {
	t.Helper()
	if a.N != b.N || a.K != b.K || a.Added != b.Added || a.Removed != b.Removed || len(a.Rows) != len(b.Rows) {
		t.Fatalf("%s: N %d/%d, K %d/%d, added %q/%q, removed %q/%q, %d/%d rows; want equal",
			what, a.N, b.N, a.K, b.K, a.Added, b.Added, a.Removed, b.Removed, len(a.Rows), len(b.Rows))
	}
	for i := range a.Rows {
		x, y := a.Rows[i], b.Rows[i]
		if x.Name != y.Name || x.LoadMax != y.LoadMax || x.LoadMin != y.LoadMin || x.LoadStddev != y.LoadStddev || x.Add != y.Add || x.Remove != y.Remove ||
			spilledOf(x) != spilledOf(y) {
			t.Errorf("%s: rows differ:\n%+v\n%+v", what, x, y)
		}
	}
}

// spilledOf returns a bounded row's spilled fraction, and -1 for another
// row.
func spilledOf(res result) float64 {
	if res.Spilled == nil {
		return -1
	}
	return *res.Spilled
}

// synthBackends returns the -backends file of the first n synthetic
// backends, with weights ws used in turn (none if ws is empty).
func synthBackends(n int, ws ...uint32) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(backendName(i))
		if len(ws) > 0 {
			fmt.Fprintf(&b, " %d", ws[i%len(ws)])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// synthKeyLines returns k synthetic keys, one a line, with line ending eol
// and an empty line after every tenth.
func synthKeyLines(k int, seed uint64, eol string) string {
	var b strings.Builder
	ks, _ := drain(newSynthKeys(k, seed))
	for i, key := range ks {
		b.WriteString(key + eol)
		if i%10 == 9 {
			b.WriteString(eol)
		}
	}
	return b.String()
}

// A file of the synthetic backends gives the synthetic backends' numbers.
func TestCompareBackendsFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "backends.txt", "# the synthetic ones\n"+synthBackends(20))
	got := compareJSON(t, "-k", "20000", "-backends", path)
	sameNumbers(t, "unweighted", compareJSON(t, "-k", "20000", "-n", "20"), got)
	if got.BackendsFile != path || got.Weighted {
		t.Errorf("backends_file %q, weighted %v; want %q, false", got.BackendsFile, got.Weighted, path)
	}

	path = writeFile(t, "weighted.txt", synthBackends(20, 1, 2, 3))
	got = compareJSON(t, "-k", "20000", "-backends", path, "-add", "10.0.0.21:80 3")
	checkSane(t, got)
	sameNumbers(t, "weighted", compareJSON(t, "-k", "20000", "-n", "20", "-weights", "1,2,3"), got)
	if !got.Weighted {
		t.Error("a file with weights: weighted false, want true")
	}
}

// A file of the synthetic keys, through a file or standard input, gives
// the synthetic keys' numbers.
func TestCompareKeysFile(t *testing.T) {
	t.Parallel()
	want := compareJSON(t, "-k", "20000", "-n", "20")
	path := writeFile(t, "keys.txt", synthKeyLines(20000, 1, "\n"))
	got := compareJSON(t, "-n", "20", "-keys", path)
	sameNumbers(t, "file", want, got)
	if got.KeysFile != path || got.K != 20000 {
		t.Errorf("keys_file %q, k %d; want %q, 20000", got.KeysFile, got.K, path)
	}

	stdout, stderr, status := maglevCmd(t, synthKeyLines(20000, 1, "\r\n"), "compare", "-json", "-n", "20", "-keys", "-")
	if status != 0 || stderr != "" {
		t.Fatalf("-keys -: status %d, stderr %q", status, stderr)
	}
	got = decodeReport(t, stdout)
	sameNumbers(t, "standard input, CRLF", want, got)
	if got.KeysFile != "-" {
		t.Errorf("keys_file %q, want -", got.KeysFile)
	}
	stdout, _, _ = maglevCmd(t, synthKeyLines(100, 1, "\n"), "compare", "-n", "20", "-keys", "-", "-vnodes", "5")
	if want := "N=20 backends, K=100 keys (standard input), hash xxh3;"; !strings.HasPrefix(stdout, want) {
		t.Errorf("output starts %.60q, want %q", stdout, want)
	}
}

// Past the keys that lookups are timed on, the rest of the stream is
// routed the same way.
func TestCompareStreamsPastTimingKeys(t *testing.T) {
	run := func() *report {
		t.Helper()
		c := compareConfig{n: 20, k: 5000, m: 4099, hash: "xxh3", keySeed: 1, set: map[string]bool{}}
		if err := c.check("5,100", ""); err != nil {
			t.Fatal(err)
		}
		ks, closeKeys, err := c.openKeys(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer closeKeys()
		r, err := compare(&c, c.algorithms(), ks, &progress{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	all := run()
	defer func(n int) { timingKeys = n }(timingKeys)
	for _, n := range []int{1, 100, 4999, 5000} {
		timingKeys = n
		sameNumbers(t, fmt.Sprintf("timing on %d keys", n), all, run())
	}
}

func TestCompareAddRemove(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "b.txt", "a 2\nb 1\nc 4 # the big one\nd 1\ne 2\n")
	r := compareJSON(t, "-k", "20000", "-backends", path, "-add", "f 5", "-remove", "c")
	checkSane(t, r)
	if r.Added != "f" || r.Removed != "c" || r.N != 5 {
		t.Errorf("added %q, removed %q, n %d; want f, c, 5", r.Added, r.Removed, r.N)
	}
	for _, res := range r.Rows {
		if res.Add.Ideal != 5.0/15 || res.Remove.Ideal != 4.0/10 {
			t.Errorf("%s: ideal add %v, remove %v; want 5/15 and 4/10", res.Name, res.Add.Ideal, res.Remove.Ideal)
		}
	}
	// By default the first backend leaves, and the first synthetic name
	// not in the file joins, with weight 1.
	path = writeFile(t, "b.txt", "10.0.0.3:80\n10.0.0.4:80 3\n")
	r = compareJSON(t, "-k", "20000", "-backends", path)
	if r.Added != "10.0.0.5:80" || r.Removed != "10.0.0.3:80" {
		t.Errorf("added %q, removed %q; want 10.0.0.5:80 and 10.0.0.3:80", r.Added, r.Removed)
	}
	for _, res := range r.Rows {
		if res.Add.Ideal != 1.0/5 || res.Remove.Ideal != 1.0/4 {
			t.Errorf("%s: ideal add %v, remove %v; want 1/5 and 1/4", res.Name, res.Add.Ideal, res.Remove.Ideal)
		}
	}
	// Synthetic backends take -add and -remove too.
	r = compareJSON(t, "-k", "20000", "-n", "20", "-add", "new", "-remove", "10.0.0.7:80")
	checkSane(t, r)
	if r.Added != "new" || r.Removed != "10.0.0.7:80" || r.Rows[0].Add.Ideal != 1.0/21 {
		t.Errorf("added %q, removed %q, ideal %v; want new, 10.0.0.7:80, 1/21", r.Added, r.Removed, r.Rows[0].Add.Ideal)
	}
}

func TestCompareZipf(t *testing.T) {
	t.Parallel()
	const s = 2.0
	r := compareJSON(t, "-k", "20000", "-n", "20", "-zipf", "2")
	checkSane(t, r)
	sameNumbers(t, "two runs", r, compareJSON(t, "-k", "20000", "-n", "20", "-zipf", "2"))
	// The hottest key draws 1/H(K, s) of the requests; its backend's load
	// is at least that over 1/N, less the sampling error.
	h := 0.0
	for i := 1; i <= 20000; i++ {
		h += 1 / float64(i*i)
	}
	if math := 1 / h; r.Zipf != s || r.HotKeyShare < math*(1-1e-12) || r.HotKeyShare > math*(1+1e-12) {
		t.Errorf("zipf %v, hot_key_share %v; want %v and %v", r.Zipf, r.HotKeyShare, s, math)
	}
	for _, res := range r.Rows {
		if res.LoadMax < 0.9*r.HotKeyShare*20 {
			t.Errorf("%s: max load %v, want at least 0.9 × %v × 20", res.Name, res.LoadMax, r.HotKeyShare)
		}
	}
	uniform := compareJSON(t, "-k", "20000", "-n", "20")
	if uniform.Rows[0].LoadMax > 1.5 || uniform.HotKeyShare != 0 || uniform.Zipf != 0 {
		t.Errorf("uniform keys: max load %v, hot key share %v, zipf %v; want below 1.5, 0, 0",
			uniform.Rows[0].LoadMax, uniform.HotKeyShare, uniform.Zipf)
	}
	other := compareJSON(t, "-k", "20000", "-n", "20", "-zipf", "2", "-keyseed", "9")
	if other.Rows[0].LoadMax == r.Rows[0].LoadMax && other.Rows[0].Add == r.Rows[0].Add {
		t.Error("-keyseed 9 gives the same numbers as -keyseed 1")
	}

	stdout, stderr, status := maglevCmd(t, "", "compare", "-k", "20000", "-n", "20", "-zipf", "2")
	if status != 0 || stderr != "" {
		t.Fatalf("status %d, stderr %q", status, stderr)
	}
	for _, want := range []string{
		"N=20 backends, K=20,000 keys Zipf(2), hash xxh3;",
		fmt.Sprintf("Zipf(2): the most popular key alone draws %s of the requests, %.1f× an equal share", percent(r.HotKeyShare), 20*r.HotKeyShare),
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

// The text and the chart name the files and the backends in them.
func TestCompareFilesText(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	backends := writeFile(t, "backends.txt", "alpha 1\nbeta 2\ngamma 1\n")
	keys := writeFile(t, "keys.txt", synthKeyLines(5000, 1, "\n"))
	svg := filepath.Join(dir, "load.svg")
	stdout, stderr, status := maglevCmd(t, "", "compare", "-backends", backends, "-keys", keys, "-svg", svg, "-vnodes", "5")
	if status != 0 || stderr != "" {
		t.Fatalf("status %d, stderr %q", status, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("N=3 backends (%s), K=5,000 keys (%s), hash xxh3, weighted;", backends, keys),
		"add 10.0.0.4:80", "remove alpha",
		"Keys from a file can repeat: a key on many lines is a hot key",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if want := "backends alpha to gamma, in that order"; !strings.Contains(string(data), want) {
		t.Errorf("chart lacks %q", want)
	}
}

func TestCompareInputErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o666); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := file("good.txt", "a\nb 2\nc\n")
	empty := file("empty.txt", "")
	blank := file("blank.txt", "\n\r\n\n")
	dup := file("dup.txt", "a\nb\n# c\nb 2\n")
	badWeight := file("weight.txt", "a\nb 2\nc heavy\n")
	extra := file("extra.txt", "a 1 2\n")
	one := file("one.txt", "# just one\nonly 3\n")
	drained := file("drained.txt", "a 5\nb 0\nc 0\n")
	longKey := file("longkey.txt", "k1\nk2\n"+strings.Repeat("k", maxLine+1)+"\n")
	many := file("many.txt", synthBackends(8))
	missing := filepath.Join(dir, "missing.txt")
	tests := []struct {
		stdin string
		args  []string
		err   string
	}{
		{"", []string{"-backends", empty}, empty + ": no backends"},
		{"", []string{"-backends", blank}, blank + ": no backends"},
		{"", []string{"-backends", dup}, dup + `:4: duplicate name "b" (first on line 2)`},
		{"", []string{"-backends", badWeight}, badWeight + `:3: bad weight "heavy": want an integer from 0 to 4294967295`},
		{"", []string{"-backends", extra}, extra + `:1: unexpected "2" after the weight`},
		{"", []string{"-backends", missing}, "open " + missing + ": no such file or directory"},
		{"", []string{"-backends", one}, one + ": 1 backend: compare removes one, so give at least 2"},
		{"", []string{"-backends", drained}, drained + `: every backend left after removing "a" has weight 0`},
		{"", []string{"-backends", many, "-m", "7"}, many + ": 8 backends: a table of -m 7 slots holds at most 7, and compare adds one"},
		{"", []string{"-backends", good, "-add", "b"}, `-add "b": already a backend (` + good + ":2)"},
		{"", []string{"-backends", good, "-add", "d x"}, `-add "d x": bad weight "x": want an integer from 0 to 4294967295`},
		{"", []string{"-backends", good, "-add", "d 1 2"}, `-add "d 1 2": unexpected "2" after the weight`},
		{"", []string{"-backends", good, "-add", ""}, `-add "": empty name`},
		{"", []string{"-backends", good, "-remove", "z"}, `-remove "z": not one of ` + good},
		{"", []string{"-backends", good, "-remove", ""}, `-remove "": empty name`},
		{"", []string{"-add", "10.0.0.3:80"}, `-add "10.0.0.3:80": already one of the 100 backends`},
		{"", []string{"-remove", "10.0.0.101:80"}, `-remove "10.0.0.101:80": not one of the 100 backends`},
		{"", []string{"-n", "2", "-weights", "0,1", "-remove", "10.0.0.2:80"}, `-weights "0,1": every backend left after removing "10.0.0.2:80" would be drained`},
		{"", []string{"-backends", good, "-n", "3"}, "-n and -backends: give one or the other"},
		{"", []string{"-backends", good, "-weights", "1,2"}, "-weights and -backends: give one or the other"},
		{"", []string{"-keys", good, "-k", "3"}, "-k and -keys: give one or the other"},
		{"", []string{"-keys", good, "-keyseed", "3"}, "-keyseed and -keys: give one or the other"},
		{"", []string{"-keys", good, "-zipf", "1.5"}, "-zipf and -keys: give one or the other"},
		{"", []string{"-keys", empty}, empty + ": no keys"},
		{"", []string{"-keys", blank}, blank + ": no keys"},
		{"", []string{"-keys", "-"}, "stdin: no keys"},
		{"\n\n", []string{"-keys", "-"}, "stdin: no keys"},
		{"", []string{"-keys", longKey}, longKey + ":3: line longer than 1048576 bytes"},
		{"", []string{"-keys", missing}, "open " + missing + ": no such file or directory"},
		{"", []string{"-keys", dir}, "read " + dir + ": is a directory"},
		{"", []string{"-zipf", "1"}, "-zipf 1: want an exponent above 1, or 0 for uniform keys"},
		{"", []string{"-zipf", "0.5"}, "-zipf 0.5: want an exponent above 1, or 0 for uniform keys"},
		{"", []string{"-zipf", "-2"}, "-zipf -2: want an exponent above 1, or 0 for uniform keys"},
		{"", []string{"-zipf", "NaN"}, "-zipf NaN: want an exponent above 1, or 0 for uniform keys"},
		{"", []string{"-zipf", "Inf"}, "-zipf +Inf: want an exponent above 1, or 0 for uniform keys"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := append([]string{"compare", "-vnodes", "5"}, tt.args...)
			if !strings.Contains(strings.Join(tt.args, " "), "-keys") {
				args = append(args, "-k", "100")
			}
			stdout, stderr, status := maglevCmd(t, tt.stdin, args...)
			if want := "error: " + tt.err + "\n"; stdout != "" || stderr != want || status != 1 {
				t.Errorf("got stdout %q, stderr %q, status %d; want \"\", %q, 1", stdout, stderr, status, want)
			}
		})
	}
}

// A turnRouter sends requests to its backends in turn, and records the
// hashes it was given: a router with state, as a bounded-load picker
// would be.
type turnRouter struct {
	backends []int32
	next     int
	seen     *[]uint64
}

func (r *turnRouter) route(dst []int32, hashes []uint64) {
	for i := range hashes {
		dst[i] = r.backends[r.next%len(r.backends)]
		r.next++
	}
	*r.seen = append(*r.seen, hashes...)
}

// A row may route through a router of its own, which sees every request
// in stream order.
func TestCompareRowWithState(t *testing.T) {
	const n, k = 20, 50000 // more keys than timingKeys, below
	defer func(n int) { timingKeys = n }(timingKeys)
	timingKeys = 1000
	c := compareConfig{n: n, k: k, m: 4099, hash: "xxh3", keySeed: 1, set: map[string]bool{}}
	if err := c.check("5", ""); err != nil {
		t.Fatal(err)
	}
	var seen []*[]uint64 // what each router saw
	turns := algorithm{
		name: "in turn", kind: "test",
		build: c.algorithms()[0].build, // a Maglev table, for the timing
		router: func(l lookuper, index map[string]int32) router {
			r := &turnRouter{seen: new([]uint64)}
			for _, name := range l.(interface{ Backends() []string }).Backends() {
				r.backends = append(r.backends, index[name])
			}
			seen = append(seen, r.seen)
			return r
		},
	}
	ks, closeKeys, err := c.openKeys(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeKeys()
	r, err := compare(&c, []algorithm{turns}, ks, &progress{})
	if err != nil {
		t.Fatal(err)
	}
	// k is a multiple of n: every backend gets exactly its share.
	if res := r.Rows[0]; r.K != k || res.Name != "in turn" || res.LoadMax != 1 || res.LoadMin != 1 || res.LoadStddev != 0 {
		t.Errorf("K %d, row %q: load max %v, min %v, sd %v; want %d, in turn, 1, 1, 0", r.K, res.Name, res.LoadMax, res.LoadMin, res.LoadStddev, k)
	}
	keys, _ := drain(newSynthKeys(k, 1))
	if len(seen) != 4 {
		t.Fatalf("%d routers made, want 4 (base, add, remove, fail)", len(seen))
	}
	for i, p := range seen {
		hs := *p
		if len(hs) != k {
			t.Fatalf("router %d saw %d requests, want %d", i, len(hs), k)
		}
		for j, h := range hs {
			if h != c.h.HashString(keys[j]) {
				t.Fatalf("router %d: request %d has hash %#x, want key %q's", i, j, h, keys[j])
			}
		}
	}
}
