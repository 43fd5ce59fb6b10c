package main

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/maglevlb/maglev"
)

// The bounded row's router is the sliding window the help states, checked
// request by request against a plain model of it: request i is released
// just before request i+C is placed, a request goes to the first of its
// key's candidates holding fewer than ceil(F·w/Σw · L) requests, L counting
// it, and no backend ever holds more than that.
func TestBoundedRouter(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	equal, err := maglev.New(names, 251, nil)
	if err != nil {
		t.Fatal(err)
	}
	var bs []maglev.Backend
	for i, n := range names {
		bs = append(bs, maglev.Backend{Name: n, Weight: uint32([]int{1, 2, 3, 0}[i%4])})
	}
	weighted, err := maglev.NewWeighted(bs, 251, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		t      *maglev.Table
		factor float64
		c      int
	}{
		{"equal 1.25 C=16", equal, 1.25, 16},
		{"equal 1 C=5", equal, 1, 5},
		{"equal 2 C=1", equal, 2, 1},
		{"weighted 1.25 C=24", weighted, 1.25, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Keys drawn Zipf(1.1) over 200, hashed: hot keys fill their
			// backends and spill.
			z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 199)
			hashes := make([]uint64, 3000)
			for i := range hashes {
				hashes[i] = maglev.XXH3().HashString(backendName(int(z.Uint64())))
			}
			index := map[string]int32{}
			for i, n := range names {
				index[n] = int32(100 + i) // not the table's own indices
			}
			alg := (&compareConfig{}).boundedAlgorithm(251, tc.factor, tc.c)
			sim, err := newBoundedSim(tc.t, tc.factor, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			sim.LookupHash(hashes[0]) // the router's simulation is its own
			rt := newRouter(alg, sim, index)
			dst := make([]int32, len(hashes))
			// In uneven batches: the window carries over between them.
			for lo := 0; lo < len(hashes); {
				hi := min(len(hashes), lo+1+lo%7*13)
				rt.route(dst[lo:hi], hashes[lo:hi])
				lo = hi
			}

			ws := tc.t.Weights()
			var sum float64
			for _, w := range ws {
				sum += float64(w)
			}
			counts := make([]int, len(ws))
			var window []int // the backends of the requests in flight, oldest first
			spilled := 0
			for i, h := range hashes {
				if len(window) == tc.c {
					counts[window[0]]--
					window = window[1:]
				}
				L := float64(len(window) + 1)
				got := -1
				first := true
				for cand := range tc.t.CandidatesHash(h) {
					capacity := math.Ceil(tc.factor * float64(ws[cand]) / sum * L)
					if float64(counts[cand]) < capacity {
						got = cand
						if !first {
							spilled++
						}
						break
					}
					first = false
				}
				if got < 0 {
					t.Fatalf("request %d: every candidate full", i)
				}
				if want := int32(100 + got); dst[i] != want {
					t.Fatalf("request %d: routed to %d, want %d (backend %s)", i, dst[i], want, names[got])
				}
				counts[got]++
				window = append(window, got)
				if want := min(i+1, tc.c); len(window) != want {
					t.Fatalf("request %d: %d in flight, want %d", i, len(window), want)
				}
				if capacity := math.Ceil(tc.factor * float64(ws[got]) / sum * L); float64(counts[got]) > capacity {
					t.Fatalf("request %d: %s holds %d, above its capacity %v", i, names[got], counts[got], capacity)
				}
			}
			r := rt.(*boundedRouter)
			if got := r.spilled(); got != int64(spilled) {
				t.Errorf("spilled %d, want %d", got, spilled)
			}
			if st := r.sim.b.Stats(); st.InFlight != int64(min(len(hashes), tc.c)) || st.Spilled != uint64(spilled) || st.Forced != 0 {
				t.Errorf("stats %+v, want %d in flight, %d spilled, 0 forced", st, min(len(hashes), tc.c), spilled)
			}
			// C = 1 never spills (every capacity is at least 1 and
			// nothing else is in flight); the others must, with these hot
			// keys.
			if (tc.c == 1) != (spilled == 0) {
				t.Errorf("C=%d: %d spilled", tc.c, spilled)
			}
		})
	}
}

// boundedLoadBound returns the most load/mean a bounded row's backend of
// weight share s (w/Σw) can carry over k requests: it holds at most
// capacity = ceil(F·C·s) of the C requests in flight at each of the k
// picks, and each request is in flight at C picks, but for the last C.
func boundedLoadBound(factor float64, c, k int, s float64) float64 {
	capacity := math.Ceil(factor * s * float64(c))
	return (float64(k)*capacity/float64(c) + float64(c)) / (float64(k) * s)
}

func TestCompareBounded(t *testing.T) {
	t.Parallel()
	const n, k, c, f = 20, 20000, 64, 1.25
	args := []string{"-k", "20000", "-n", "20", "-zipf", "1.1", "-m", "4099", "-vnodes", "5,100"}
	plain := compareJSON(t, args...)
	r := compareJSON(t, append(args, "-inflight", "64")...)
	checkSaneRows(t, r, 5) // two tables, the bounded row, two rings
	sameNumbers(t, "two runs", r, compareJSON(t, append(args, "-inflight", "64")...))
	if len(r.Rows) != len(plain.Rows)+1 {
		t.Fatalf("%d rows, want %d and the bounded one", len(r.Rows), len(plain.Rows))
	}
	// The other rows do not change.
	sameNumbers(t, "the rows beside the bounded one", plain, &report{
		N: r.N, K: r.K, Added: r.Added, Removed: r.Removed,
		Rows: append(r.Rows[:1:1], r.Rows[2:]...),
	})
	mg, b := r.Rows[0], r.Rows[1]
	if b.Name != "bounded F=1.25 C=64" || b.Algorithm != "bounded" || b.M != 4099 || b.BalanceFactor != f || b.InFlight != c || b.Spilled == nil {
		t.Fatalf("row 1: %+v, want bounded F=1.25 C=64 over M=4099", b)
	}
	// The hot key sinks the plain table's backend; the bounded row holds
	// every backend to its capacity ceil(F·C/N) of the C in flight.
	if bound := boundedLoadBound(f, c, k, 1.0/n); !(b.LoadMax <= bound && b.LoadMax < mg.LoadMax/2) {
		t.Errorf("bounded max load %v, plain %v; want at most %v and below half the plain", b.LoadMax, mg.LoadMax, bound)
	}
	if mg.LoadMax < 0.9*r.HotKeyShare*n {
		t.Errorf("plain max load %v, want at least 0.9 × %v × %d", mg.LoadMax, r.HotKeyShare, n)
	}
	// The hottest key's requests beyond what its backend may hold must
	// spill.
	capShare := math.Ceil(f*c/n) / c
	if least := r.HotKeyShare - capShare - float64(c)/k; !(*b.Spilled >= least) {
		t.Errorf("spilled %v, want at least %v (hot key %v, capacity share %v)", *b.Spilled, least, r.HotKeyShare, capShare)
	}
	// A change moves requests beyond the key-level churn: spills shift.
	if !(b.Add.Moved > mg.Add.Moved && b.Remove.Moved > mg.Remove.Moved) {
		t.Errorf("bounded moves add %v, remove %v; want above the plain table's %v, %v", b.Add, b.Remove, mg.Add, mg.Remove)
	}

	// -balance-factor alone adds the row with C = 64, and -inflight alone
	// with F = 1.25.
	if r := compareJSON(t, "-k", "2000", "-n", "20", "-m", "4099", "-vnodes", "5", "-balance-factor", "2"); r.Rows[1].Name != "bounded F=2 C=64" {
		t.Errorf("-balance-factor 2: row 1 is %q, want bounded F=2 C=64", r.Rows[1].Name)
	}

	// A backend that never fills (capacity F·L/N ≥ L), and a window of
	// one, are the plain table.
	for _, extra := range [][]string{{"-balance-factor", "20"}, {"-inflight", "1"}} {
		r := compareJSON(t, append(args, extra...)...)
		mg, b := r.Rows[0], r.Rows[1]
		if *b.Spilled != 0 || b.LoadMax != mg.LoadMax || b.LoadMin != mg.LoadMin || b.LoadStddev != mg.LoadStddev || b.Add != mg.Add || b.Remove != mg.Remove {
			t.Errorf("%v: bounded row %+v (spilled %v), want the plain one's numbers %+v and 0 spilled", extra, b, *b.Spilled, mg)
		}
	}
}

// Weighted backends get capacities in proportion to their weights.
func TestCompareBoundedWeighted(t *testing.T) {
	t.Parallel()
	const n, k, c, f = 12, 20000, 48, 1.5
	r := compareJSON(t, "-k", "20000", "-n", "12", "-weights", "1,2,3,0", "-zipf", "1.2", "-m", "4099", "-vnodes", "5",
		"-inflight", "48", "-balance-factor", "1.5")
	checkSaneRows(t, r, 4)
	b := r.Rows[1]
	// Backends weigh 1,2,3,0 in turn: Σw = 3·6 = 18. The loosest bound is
	// the largest over the weights.
	bound := 0.0
	for _, w := range []float64{1, 2, 3} {
		bound = max(bound, boundedLoadBound(f, c, k, w/18))
	}
	if b.Name != "bounded F=1.5 C=48" || b.LoadMax > bound || *b.Spilled == 0 {
		t.Errorf("%s: max load %v, spilled %v; want at most %v and some spilled", b.Name, b.LoadMax, *b.Spilled, bound)
	}
	if mg := r.Rows[0]; b.LoadMax >= mg.LoadMax {
		t.Errorf("bounded max load %v, want below the plain table's %v", b.LoadMax, mg.LoadMax)
	}
}

func TestCompareBoundedText(t *testing.T) {
	t.Parallel()
	svg := filepath.Join(t.TempDir(), "load.svg")
	args := []string{"compare", "-k", "20000", "-n", "20", "-zipf", "1.1", "-m", "4099", "-vnodes", "5", "-inflight", "32", "-balance-factor", "1.5"}
	stdout, stderr, status := maglevCmd(t, "", append(args, "-svg", svg)...)
	if status != 0 || stderr != "" {
		t.Fatalf("status %d, stderr %q", status, stderr)
	}
	r := compareJSON(t, args[1:]...)
	lines := strings.Split(stdout, "\n")
	header := lines[3]
	if f := strings.Fields(header); strings.Join(f[4:8], " ") != "max min sd spilled" {
		t.Errorf("header %q, want spilled after sd", header)
	}
	for i, res := range r.Rows {
		line := lines[4+i]
		f := strings.Fields(line)
		name := strings.Join(f[:len(strings.Fields(res.Name))], " ")
		if utf8.RuneCountInString(line) != utf8.RuneCountInString(header) || name != res.Name {
			t.Errorf("row %d = %q, want %q aligned under %q", i, line, res.Name, header)
			continue
		}
		spilled := "-"
		if res.Spilled != nil {
			spilled = percent(*res.Spilled)
		}
		tail := strings.Join(f[len(f)-12:], " ")
		want := strings.Join([]string{
			fmtF(res.LoadMax), fmtF(res.LoadMin), fmtF(res.LoadStddev), spilled,
			percent(res.Add.Moved), percent(res.Add.Ideal), percent(res.Add.Excess),
			percent(res.Remove.Moved), percent(res.Remove.Ideal), percent(res.Remove.Excess),
			percent(res.Fail.Moved), percent(res.Fail.Excess),
		}, " ")
		if tail != want {
			t.Errorf("%s: row ends %q, want %q", res.Name, tail, want)
		}
	}
	for _, want := range []string{
		"Bounded loads spill it instead",
		"bounded F=1.5 C=32: the M=4099 table through bounded.New(t, 1.5), with a sliding\n" +
			"window of 32 requests in flight: request i is released just before request i+32 is\n" +
			"placed, so each pick sees L = 32, itself included (i+1 for the first 32).",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Count(string(data), "<rect "), 1+4*20; got != want {
		t.Errorf("chart has %d rects, want %d", got, want)
	}
	if !strings.Contains(string(data), boundColor) {
		t.Errorf("chart lacks the bounded row's colour %s", boundColor)
	}
}
