package maglev_test

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDocFigures checks that the figures the README's headline numbers and
// docs/peers.md's prose quote are the figures of the tables they summarize:
// each quote below is a sentence of a page with its figures taken from a
// table cell, and the page must contain it as written. A figure changed in
// the prose, or a table regenerated without the prose (bench/peers'
// TestReport rewrites docs/peers.md's table), fails the test, which prints
// the sentence with the table's figures. And every figure in the summary
// sections must belong to a quote, so that a figure added there without one
// fails too.
func TestDocFigures(t *testing.T) {
	tabs := docTables{}
	peer := func(n int, impl, col string) string {
		return tabs.cell(t, "docs/peers.md", "Results", col, "N", strconv.Itoa(n), "impl", impl)
	}
	peers := func(impl, col string) string { // the range over every N
		return span(t, peer(10, impl, col), peer(100, impl, col), peer(1000, impl, col))
	}
	ideal := func(n int, col string) string { return before(peer(n, "*ideal*", col), " (") }
	perf := func(heading, col string, keyvals ...string) string {
		return tabs.cell(t, "docs/performance.md", heading, col, keyvals...)
	}
	hot := func(col string, keyvals ...string) string {
		return tabs.cell(t, "docs/hotkeys.md", "Bounded loads", col, keyvals...)
	}
	grpc := func(col, c string) string {
		return tabs.cell(t, "docs/grpc.md", "Costs", col, "case", c)
	}
	rings := []string{"maglevlb-ring", "groupcache", "serialx", "stathat"}
	var ringLookups []string
	for _, r := range rings {
		for _, n := range []int{10, 100, 1000} {
			ringLookups = append(ringLookups, peer(n, r, "lookup"))
		}
	}
	var tableMoves []string
	for _, impl := range []string{"maglevlb", "maglevlb-M100003", "cilium", "kkdai"} {
		tableMoves = append(tableMoves, peer(1000, impl, "moved on join"), peer(1000, impl, "moved on leave"))
	}

	quotes := []quote{
		// The README's headline numbers.
		{"README.md", "Headline numbers", "| `Lookup`, 16-byte key, N = 1000, M = 65537 | %s, 0 allocations: %s the floor `names[slots[xxh3(key) %% M]]`",
			[]string{perf("Lookup", "`Lookup`", "key length", "16 B"), perf("Lookup", "`Lookup` / floor", "key length", "16 B")}},
		{"README.md", "Headline numbers", "| `New`, N = 1000, M = 65537 / 655373 | a median call of %s / %s (the paper: 1.8 ms / 22.9 ms)",
			[]string{perf("The speed check", "`New`, median of the round", "M", "65537"), perf("The speed check", "`New`, median of the round", "M", "655373")}},
		{"README.md", "Headline numbers", "| `NewWeighted`, worst skew measured | %s `New`",
			[]string{perf("Weights", "/ `New`", "weights", "powers of two, 1 to 2^31")}},
		{"README.md", "Headline numbers", "| first 3 `Candidates`, N = 1000 | %s, 0 allocations",
			[]string{tabs.cell(t, "docs/hotkeys.md", "Cost", "k = 3", "N", "1000", "`LookupHashIndex`", "*")}},
		{"README.md", "Headline numbers", "| `bounded.Picker` Acquire + Release | factor 1.25: %s; factor 0: %s against %s for `LookupHashIndex`; 0 allocations",
			[]string{span(t, hot("1.25, held 0", "N", "10"), hot("1.25, held 64", "N", "100")), hot("off, held 0", "N", "100"), hot("`LookupHashIndex`", "N", "100")}},
		{"README.md", "Headline numbers", "| gRPC pick, key by `WithKey` / by header | %s, 0 allocations / %s, allocations %s",
			[]string{grpc("10 endpoints", "key set with `WithKey`"), grpc("10 endpoints", "key in the header, one value"), before(grpc("allocations", "key in the header, one value"), ":")}},
		{"README.md", "Headline numbers", "the fastest lookup, %s (next: jump %s, kkdai's Maglev %s; the other rings %s)",
			[]string{peer(1000, "maglevlb", "lookup"), peer(1000, "jump", "lookup"), peer(1000, "kkdai", "lookup"),
				span(t, peer(1000, "groupcache", "lookup"), peer(1000, "serialx", "lookup"), peer(1000, "stathat", "lookup"))}},
		{"README.md", "Headline numbers", "builds in %s where Cilium's `pkg/maglev` takes %s and kkdai's %s",
			[]string{peer(1000, "maglevlb", "build"), peer(1000, "cilium", "build"), peer(1000, "kkdai", "build")}},

		// docs/peers.md's summary of its table.
		{"docs/peers.md", "Where each peer wins", "our Maglev table has the fastest lookup at every N, %s with no allocation",
			[]string{peers("maglevlb", "lookup")}},
		{"docs/peers.md", "Where each peer wins", "jump (%s: a hash and O(log N) steps, no memory) and kkdai's table (%s: SipHash and a read lock)",
			[]string{peers("jump", "lookup"), peers("kkdai", "lookup")}},
		{"docs/peers.md", "Where each peer wins", "every ring takes %s", []string{span(t, ringLookups...)}},
		{"docs/peers.md", "Where each peer wins", "Rendezvous hashes every backend: %s at N = 10, %s at N = 1000",
			[]string{peer(10, "rendezvous", "lookup"), peer(1000, "rendezvous", "lookup")}},
		{"docs/peers.md", "Where each peer wins", "jump (%s, %s kept at N = 1000) and rendezvous (%s, %s)",
			[]string{peer(1000, "jump", "build"), peer(1000, "jump", "kept"), peer(1000, "rendezvous", "build"), peer(1000, "rendezvous", "kept")}},
		{"docs/peers.md", "Where each peer wins", "ours builds in %s and keeps %s at every N; Cilium's builds in %s",
			[]string{peers("maglevlb", "build"), peers("maglevlb", "kept"), peers("cilium", "build")}},
		{"docs/peers.md", "Where each peer wins", "kkdai's in %s and keeps up to %s",
			[]string{peers("kkdai", "build"), peer(1000, "kkdai", "kept")}},
		{"docs/peers.md", "Where each peer wins", "Our ring builds in %s at N = 1000",
			[]string{peer(1000, "maglevlb-ring", "build")}},
		{"docs/peers.md", "Where each peer wins", "except Cilium at N = 1000, %s:",
			[]string{peer(1000, "cilium", "max/mean")}},
		{"docs/peers.md", "Where each peer wins", "ours at 256 points a backend %s, groupcache at 50 replicas %s, stathat at 20 replicas %s, serialx at one point %s",
			[]string{peers("maglevlb-ring", "max/mean"), peers("groupcache", "max/mean"), peers("stathat", "max/mean"), peers("serialx", "max/mean")}},
		{"docs/peers.md", "Where each peer wins", "(serialx %s on a join at N = 10, stathat %s on a leave)",
			[]string{peer(10, "serialx", "moved on join"), peer(10, "stathat", "moved on leave")}},
		{"docs/peers.md", "Where each peer wins", "%s against %s at N = 1000",
			[]string{span(t, tableMoves...), ideal(1000, "moved on leave")}},
		{"docs/peers.md", "The paper's table size at N = 1000", "At N = 1000 it moves %s of keys on a join and %s on a leave, against %s and %s at M = 65537",
			[]string{peer(1000, "maglevlb-M100003", "moved on join"), peer(1000, "maglevlb-M100003", "moved on leave"),
				peer(1000, "maglevlb", "moved on join"), peer(1000, "maglevlb", "moved on leave")}},
		{"docs/peers.md", "The paper's table size at N = 1000", "max/mean of keys is set by sampling (%s against %s, both near the ideal %s",
			[]string{peer(1000, "maglevlb-M100003", "max/mean"), peer(1000, "maglevlb", "max/mean"), ideal(1000, "max/mean")}},
		{"docs/peers.md", "The paper's table size at N = 1000", "It builds in %s against %s and keeps %s against %s",
			[]string{peer(1000, "maglevlb-M100003", "build"), peer(1000, "maglevlb", "build"), peer(1000, "maglevlb-M100003", "kept"), peer(1000, "maglevlb", "kept")}},
		{"docs/peers.md", "A backend fails: `Without`", "| 10 | 10.00%% | %s |", []string{peer(10, "maglevlb", "moved on leave")}},
		{"docs/peers.md", "A backend fails: `Without`", "| 100 | 1.00%% | %s |", []string{peer(100, "maglevlb", "moved on leave")}},
		{"docs/peers.md", "A backend fails: `Without`", "| 1000 | 0.10%% | %s |", []string{peer(1000, "maglevlb", "moved on leave")}},
		{"docs/peers.md", "What we noticed and left alone", "so a build is O(N²·log N): %s at N = 1000",
			[]string{peer(1000, "stathat", "build")}},
	}

	// What the quotes say of the order: our table's lookup is the fastest
	// of every peer's at every N, and jump and kkdai's come next at
	// N = 1000 (our other rows, the ring and M = 100003, aside).
	others := []string{"cilium", "kkdai", "groupcache", "serialx", "stathat", "rendezvous", "jump"}
	for _, n := range []int{10, 100, 1000} {
		var order []string
		for _, impl := range append([]string{"maglevlb"}, others...) {
			if peer(n, impl, "lookup") != "—" {
				order = append(order, impl)
			}
		}
		slices.SortStableFunc(order, func(a, b string) int {
			return cmp.Compare(magnitude(t, peer(n, a, "lookup")), magnitude(t, peer(n, b, "lookup")))
		})
		if order[0] != "maglevlb" || n == 1000 && (order[1] != "jump" || order[2] != "kkdai") {
			t.Errorf("docs/peers.md: at N = %d the lookups run %v, fastest first: the README and the prose say maglevlb first, then jump and kkdai at N = 1000", n, order)
		}
	}

	// Every figure of these sections must be part of a quote, or one of the
	// phrases after it, which quote no table.
	covered := map[[2]string][]string{
		{"README.md", "Headline numbers"}:         {"go1.26.8"},
		{"docs/peers.md", "Where each peer wins"}: {"4× smaller M"}, // 65537 over 16381
		{"docs/peers.md", "The paper's table size at N = 1000"}: {
			"100,003", "100,109", "99.90%", // the warning against a size per N: a run of the report that did that
		},
	}

	found := map[[2]string][][2]int{} // where each section's quotes are, in its folded text
	for _, q := range quotes {
		want := fold(fmt.Sprintf(q.text, anys(q.values)...))
		text := fold(tabs.section(t, q.file, q.heading))
		i := strings.Index(text, want)
		if i < 0 {
			t.Errorf("%s, %q: want %q, with the figures of the table it quotes", q.file, q.heading, want)
			continue
		}
		k := [2]string{q.file, q.heading}
		found[k] = append(found[k], [2]int{i, i + len(want)})
	}
	for k, allowed := range covered {
		text := fold(tabs.section(t, k[0], k[1]))
		for _, phrase := range allowed {
			for j := 0; ; {
				i := strings.Index(text[j:], phrase)
				if i < 0 {
					break
				}
				found[k] = append(found[k], [2]int{j + i, j + i + len(phrase)})
				j += i + len(phrase)
			}
		}
	figures:
		for _, m := range figureRE.FindAllStringIndex(text, -1) {
			for _, span := range found[k] {
				if span[0] <= m[0] && m[1] <= span[1] {
					continue figures
				}
			}
			t.Errorf("%s, %q: the figure %q is in no quote of TestDocFigures: quote the table it comes from, or say why not", k[0], k[1], text[m[0]:m[1]])
		}
	}
}

// A quote is a sentence of a page's section whose %s are table cells.
type quote struct {
	file, heading, text string
	values              []string
}

// figureRE matches a figure: a number with a unit, a percentage, a
// decimal number, or a ratio such as 2.4×.
var figureRE = regexp.MustCompile(`\d[\d,]*(?:\.\d+)?\s?(?:ns|µs|ms|s|B|KiB|MiB|GiB)\b|\d[\d,]*(?:\.\d+)?[%×]|\d+\.\d+`)

// fold folds runs of white space into one space, so that a quote matches
// across the line breaks of a paragraph.
func fold(s string) string { return strings.Join(strings.Fields(s), " ") }

func anys(s []string) []any {
	a := make([]any, len(s))
	for i, v := range s {
		a[i] = v
	}
	return a
}

// before returns s up to sep, trimmed: "0.10% (1/N)" is 0.10%.
func before(s, sep string) string {
	s, _, _ = strings.Cut(s, sep)
	return strings.TrimSpace(s)
}

// span returns the range of figures as prose writes it: "1.03–1.20 ms",
// "974 µs–30.0 ms", or the figure alone when all are equal.
func span(t *testing.T, figs ...string) string {
	t.Helper()
	lo, hi := figs[0], figs[0]
	for _, f := range figs[1:] {
		if magnitude(t, f) < magnitude(t, lo) {
			lo = f
		}
		if magnitude(t, f) > magnitude(t, hi) {
			hi = f
		}
	}
	if lo == hi {
		return lo
	}
	ln, lu := splitUnit(lo)
	hn, hu := splitUnit(hi)
	if lu == hu {
		if lu == "%" {
			return ln + "–" + hn + "%"
		}
		if lu != "" {
			return ln + "–" + hn + " " + lu
		}
	}
	return lo + "–" + hi
}

// units scales a figure's unit to a common base.
var units = map[string]float64{
	"": 1, "%": 1, "×": 1,
	"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1,
	"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
}

// splitUnit splits "1.03 ms" into 1.03 and ms, and "0.65%" into 0.65 and %.
func splitUnit(f string) (num, unit string) {
	if n, u, ok := strings.Cut(f, " "); ok {
		return n, u
	}
	if rest, ok := strings.CutSuffix(f, "%"); ok {
		return rest, "%"
	}
	if rest, ok := strings.CutSuffix(f, "×"); ok {
		return rest, "×"
	}
	return f, ""
}

func magnitude(t *testing.T, f string) float64 {
	t.Helper()
	num, unit := splitUnit(f)
	v, err := strconv.ParseFloat(strings.ReplaceAll(num, ",", ""), 64)
	scale, ok := units[unit]
	if err != nil || !ok {
		t.Fatalf("%q is not a figure TestDocFigures can compare", f)
	}
	return v * scale
}

// docTables reads pages once, and finds their sections and tables.
type docTables map[string]string

func (d docTables) page(t *testing.T, file string) string {
	t.Helper()
	if s, ok := d[file]; ok {
		return s
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	d[file] = string(b)
	return d[file]
}

// section returns the text of the section of file under the heading
// (without its #s), up to the next heading of the same or a higher level.
func (d docTables) section(t *testing.T, file, heading string) string {
	t.Helper()
	lines := strings.Split(d.page(t, file), "\n")
	start, level := -1, 0
	inCode := false
	for i, line := range lines {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		hashes := len(line) - len(strings.TrimLeft(line, "#"))
		title := strings.TrimSpace(line[hashes:])
		switch {
		case start < 0 && title == heading:
			start, level = i+1, hashes
		case start >= 0 && hashes <= level:
			return strings.Join(lines[start:i], "\n")
		}
	}
	if start < 0 {
		t.Fatalf("%s has no heading %q", file, heading)
	}
	return strings.Join(lines[start:], "\n")
}

// cell returns the cell in column col of the one row, among the tables of
// the section, whose columns hold the values keyvals pairs give (column,
// value, ...; a value of "*" asks only that the table have the column).
func (d docTables) cell(t *testing.T, file, heading, col string, keyvals ...string) string {
	t.Helper()
	var cells []string
	for _, tab := range mdTables(d.section(t, file, heading)) {
		c := slices.Index(tab.cols, col)
		if c < 0 {
			continue
		}
	rows:
		for _, row := range tab.rows {
			for i := 0; i+1 < len(keyvals); i += 2 {
				k := slices.Index(tab.cols, keyvals[i])
				if k < 0 || k >= len(row) || row[k] != keyvals[i+1] && keyvals[i+1] != "*" {
					continue rows
				}
			}
			if c < len(row) {
				cells = append(cells, row[c])
			}
		}
	}
	if len(cells) != 1 {
		t.Fatalf("%s, %q: %d cells in column %q for %v, want 1", file, heading, len(cells), col, keyvals)
	}
	return cells[0]
}

// An mdTable is a Markdown table: its column names and its rows, each cell
// trimmed, with **bold** unmarked.
type mdTable struct {
	cols []string
	rows [][]string
}

// mdTables returns the tables of a section, outside code blocks.
func mdTables(text string) []mdTable {
	var tabs []mdTable
	var cur *mdTable
	inCode := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		line = strings.TrimSpace(line)
		if inCode || !strings.HasPrefix(line, "|") {
			cur = nil
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(strings.TrimSpace(c), "**", "")
		}
		switch {
		case cur == nil:
			tabs = append(tabs, mdTable{cols: cells})
			cur = &tabs[len(tabs)-1]
		case strings.Trim(line, "|-: ") == "": // the separator row
		default:
			cur.rows = append(cur.rows, cells)
		}
	}
	return tabs
}
