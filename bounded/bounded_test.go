package bounded

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/maglevlb/maglev"
)

func mustBounded(t testing.TB, tab *maglev.Table, factor float64) *Picker {
	t.Helper()
	b, err := New(tab, factor)
	if err != nil {
		t.Fatalf("New(factor %v): %v", factor, err)
	}
	return b
}

func TestNewErrors(t *testing.T) {
	tab := mustNew(t, names("b", 3), 7, nil)
	for _, f := range []float64{-1, 0.5, 0.999999, math.SmallestNonzeroFloat64, -1e-300, math.NaN(), math.Inf(1), math.Inf(-1)} {
		b, err := New(tab, f)
		if !errors.Is(err, ErrBalanceFactor) || b != nil {
			t.Errorf("New(factor %v) = %v, %v; want an error wrapping ErrBalanceFactor", f, b, err)
		}
	}
	for _, f := range []float64{0, 1, 1.25, 2, 1e300} {
		b, err := New(tab, f)
		if err != nil || b.Factor() != f || b.Table() != tab {
			t.Errorf("New(factor %v) = %v, %v", f, b, err)
		}
	}
}

// zipfKeys returns n keys drawn Zipf(s) from k distinct keys "key0" (the
// most popular) to "key<k-1>", from a fixed random source.
func zipfKeys(n, k int, s float64) []string {
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, s, 1, uint64(k-1))
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("key", z.Uint64())
	}
	return out
}

// TestBoundedOffIsLookup checks that with factor 0 every pick is Lookup's,
// that nothing is counted, and that Acquire does not allocate: with the
// default hasher (Acquire's own path), another hasher, a seeded XXH3, and
// 4-byte slots.
func TestBoundedOffIsLookup(t *testing.T) {
	tables := []*maglev.Table{
		mustNew(t, names("b", 10), maglev.DefaultSize, nil),
		mustWeighted(t, goldenWeights(20), maglev.DefaultSize, maglev.Farm()),
		mustNew(t, names("b", 10), 13, maglev.XXH3Seed(7)),
	}
	if !testing.Short() {
		big := mustNew(t, names("b", 70000), 70001, nil)
		tables = append(tables, big)
	}
	for _, tab := range tables {
		b := mustBounded(t, tab, 0)
		var leases []Lease
		for _, key := range zipfKeys(2000, 100, 1.1) {
			l := b.Acquire(key)
			if l.Index != tab.LookupIndex(key) || l.Backend() != tab.Lookup(key) || l.Spilled || l.Table != tab {
				t.Fatalf("factor 0: Acquire(%q) = %+v, Lookup %q (index %d)", key, l, tab.Lookup(key), tab.LookupIndex(key))
			}
			if h := tab.Hasher().HashString(key); b.AcquireHash(h).Index != l.Index {
				t.Fatalf("AcquireHash and Acquire disagree for %q", key)
			}
			leases = append(leases, l)
		}
		if st := b.Stats(); st != (Stats{}) {
			t.Fatalf("factor 0: stats %+v, want nothing counted", st)
		}
		for _, bl := range b.Loads(nil) {
			if bl.InFlight != 0 || bl.Capacity != 0 || bl.Spilled != 0 {
				t.Fatalf("factor 0: Loads has %+v, want nothing counted", bl)
			}
		}
		for _, l := range leases {
			l.Release() // does nothing
		}
		if st := b.Stats(); st != (Stats{}) {
			t.Fatalf("after releasing: stats %+v", st)
		}
		if n := testing.AllocsPerRun(100, func() { b.Acquire("key7").Release() }); n != 0 {
			t.Fatalf("factor 0: Acquire and Release allocate %v times", n)
		}
	}
}

// TestBoundedWith checks that a Bounded made by With picks from its own
// table while sharing counts with the one it came from: leases taken
// through either are counted once, a backend kept across tables keeps its
// count, and the original still picks from its own table.
func TestBoundedWith(t *testing.T) {
	old := mustNew(t, names("b", 4), 13, nil)
	next := mustNew(t, names("b", 5), 13, nil)
	b := mustBounded(t, old, 2)
	w := b.With(next)
	if b.Table() != old || w.Table() != next || w.Factor() != 2 {
		t.Fatalf("tables: b %p w %p, want %p %p", b.Table(), w.Table(), old, next)
	}
	var leases []Lease
	for i := range 40 {
		key := fmt.Sprint("k", i)
		lb, lw := b.Acquire(key), w.Acquire(key)
		if lb.Table != old || lw.Table != next {
			t.Fatalf("lease tables: %p %p, want %p %p", lb.Table, lw.Table, old, next)
		}
		leases = append(leases, lb, lw)
	}
	if got := b.Stats().InFlight; got != 80 || w.Stats().InFlight != 80 {
		t.Fatalf("in flight: b %d, w %d, want 80 in both", got, w.Stats().InFlight)
	}
	// The four backends of old are in next: one count each, seen from both.
	perName := map[string]int64{}
	for _, l := range leases {
		perName[l.Backend()]++
	}
	for _, bl := range w.Loads(nil) {
		if bl.InFlight != perName[bl.Backend] {
			t.Fatalf("w.Loads: %s holds %d, leases %d", bl.Backend, bl.InFlight, perName[bl.Backend])
		}
	}
	for _, bl := range b.Loads(nil) {
		if bl.InFlight != perName[bl.Backend] {
			t.Fatalf("b.Loads: %s holds %d, leases %d", bl.Backend, bl.InFlight, perName[bl.Backend])
		}
	}
	for _, l := range leases {
		l.Release()
	}
	if st := b.Stats(); st.InFlight != 0 {
		t.Fatalf("all released: %d in flight", st.InFlight)
	}
	for _, bl := range w.Loads(nil) {
		if bl.InFlight != 0 {
			t.Fatalf("all released: %s holds %d", bl.Backend, bl.InFlight)
		}
	}
	// With(nil) is an empty table sharing the counts.
	if l := b.With(nil).Acquire("k"); l.Index != -1 || l.Table != nil {
		t.Fatalf("With(nil).Acquire = %+v, want Index -1", l)
	}
}

// model is the test's own account of a Bounded: the leases it holds by
// backend name, and the capacity rule written out.
type model struct {
	factor   float64
	inflight map[string]int64
	total    int64
}

// capacity is backend i's capacity in tab at L = total, computed as the
// documentation states it, in float64.
func (md *model) capacity(tab *maglev.Table, i int, total int64) int64 {
	var sum float64
	ws := tab.Weights()
	for _, w := range ws {
		sum += float64(w)
	}
	share := md.factor * float64(ws[i]) / sum
	return int64(math.Ceil(share * float64(total)))
}

// pick is where the model places key hash h: the first candidate below
// its capacity.
func (md *model) pick(tab *maglev.Table, h uint64) (int, bool) {
	first := -1
	for i := range tab.CandidatesHash(h) {
		if first < 0 {
			first = i
		}
		if md.inflight[tab.Backend(i)] < md.capacity(tab, i, md.total+1) {
			return i, i != first
		}
	}
	return -1, false
}

// TestBoundedSequential runs random Acquires and Releases of Zipf(1.1)
// keys and checks every pick against the model: the first candidate with
// room, whose count after the pick is at most factor × L × w_i/Σw + 1.
// Sequential picks never find every candidate full.
func TestBoundedSequential(t *testing.T) {
	for _, factor := range []float64{1, 1.25, 2} {
		for _, tab := range []*maglev.Table{
			mustNew(t, names("b", 5), 1009, nil),
			mustWeighted(t, goldenWeights(12), 4099, maglev.FNV1a()),
		} {
			b := mustBounded(t, tab, factor)
			md := &model{factor: factor, inflight: map[string]int64{}}
			r := rand.New(rand.NewPCG(1, 2))
			var held []Lease
			spilled := uint64(0)
			for step, key := range zipfKeys(5000, 200, 1.1) {
				// Hold between 0 and 60 leases, drifting.
				for len(held) > 0 && (len(held) > 60 || r.IntN(2) == 0) {
					j := r.IntN(len(held))
					l := held[j]
					held = slices.Delete(held, j, j+1)
					l.Release()
					md.inflight[l.Backend()]--
					md.total--
				}
				h := tab.Hasher().HashString(key)
				want, wantSpill := md.pick(tab, h)
				l := b.Acquire(key)
				if l.Index != want || l.Spilled != wantSpill {
					t.Fatalf("factor %v step %d: Acquire(%q) picked %d (spilled %v), model %d (%v)",
						factor, step, key, l.Index, l.Spilled, want, wantSpill)
				}
				md.total++
				md.inflight[l.Backend()]++
				if l.Spilled {
					spilled++
				}
				held = append(held, l)
				// The bound, exactly: count·Σw ≤ factor·L·w_i + Σw.
				var sum float64
				ws := tab.Weights()
				for _, w := range ws {
					sum += float64(w)
				}
				c := float64(md.inflight[l.Backend()])
				if bound := factor*float64(md.total)*float64(ws[l.Index])/sum + 1; c > bound {
					t.Fatalf("factor %v step %d: %s holds %v requests, bound %v", factor, step, l.Backend(), c, bound)
				}
			}
			st := b.Stats()
			if st.InFlight != md.total || st.Spilled != spilled || st.Forced != 0 {
				t.Fatalf("factor %v: stats %+v, model %d in flight, %d spilled, 0 forced", factor, st, md.total, spilled)
			}
			if spilled == 0 {
				t.Fatalf("factor %v: a hot key never spilled in 5,000 picks", factor)
			}
			for _, bl := range b.Loads(nil) {
				if bl.InFlight != md.inflight[bl.Backend] {
					t.Fatalf("Loads: %s has %d in flight, model %d", bl.Backend, bl.InFlight, md.inflight[bl.Backend])
				}
			}
			var perBackend uint64
			for _, bl := range b.Loads(nil) {
				perBackend += bl.Spilled
			}
			if perBackend != spilled {
				t.Fatalf("Loads: spills add up to %d, Stats says %d", perBackend, spilled)
			}
			for _, l := range held {
				l.Release()
			}
			if st := b.Stats(); st.InFlight != 0 {
				t.Fatalf("all released: %d in flight", st.InFlight)
			}
		}
	}
}

// TestBoundedHotKey follows one key acquired again and again: it fills its
// first candidate up to capacity, then the second, in Candidates order.
func TestBoundedHotKey(t *testing.T) {
	tab := mustNew(t, names("b", 4), 1009, nil)
	b := mustBounded(t, tab, 1)
	order := slices.Collect(tab.Candidates("hot"))
	// With factor 1 and 4 equal backends, backend capacity at L is
	// ceil(L/4): all-hot traffic goes round the candidates, each holding
	// one more before the next is tried.
	for l := 1; l <= 12; l++ {
		got := b.Acquire("hot")
		want := order[(l-1)%4]
		if got.Index != want || got.Spilled != (want != order[0]) {
			t.Fatalf("request %d: %+v, want backend %d", l, got, want)
		}
	}
	for _, bl := range b.Loads(nil) {
		if bl.InFlight != 3 {
			t.Fatalf("%s holds %d, want 3", bl.Backend, bl.InFlight)
		}
	}
	if st := b.Stats(); st.Spilled != 9 {
		t.Fatalf("spilled %d, want 9", st.Spilled)
	}
}

// TestBoundedUpdate checks that counts follow backend names across table
// swaps: leases of backends that stay are released into the new table's
// counts, a departed backend keeps its count while in flight, and a
// backend that leaves with nothing in flight is forgotten.
func TestBoundedUpdate(t *testing.T) {
	abc := mustNew(t, []string{"a", "b", "c"}, 1009, nil)
	bcd := mustNew(t, []string{"b", "c", "d"}, 1009, nil)
	b := mustBounded(t, abc, 1000) // counted, and never full: every pick is Lookup's
	held := map[string][]Lease{}
	for k := range 300 {
		l := b.Acquire(fmt.Sprint(k))
		held[l.Backend()] = append(held[l.Backend()], l)
	}
	b.Update(bcd)
	inflight := func(name string) int64 {
		for _, bl := range b.Loads(nil) {
			if bl.Backend == name {
				return bl.InFlight
			}
		}
		return -1
	}
	for _, name := range []string{"b", "c"} {
		if got, want := inflight(name), int64(len(held[name])); got != want {
			t.Fatalf("after the swap %s has %d in flight, want %d", name, got, want)
		}
	}
	if got := inflight("d"); got != 0 {
		t.Fatalf("new backend d has %d in flight", got)
	}
	for _, l := range held["b"][:10] {
		l.Release() // a lease of the old table
	}
	if got, want := inflight("b"), int64(len(held["b"])-10); got != want {
		t.Fatalf("b after 10 releases of old leases: %d, want %d", got, want)
	}
	if b.c.byName["a"] == nil {
		t.Fatal("departed backend a forgotten while its requests are in flight")
	}
	for _, l := range held["a"] {
		l.Release()
	}
	b.Update(bcd)
	if b.c.byName["a"] != nil {
		t.Fatal("departed backend a, with nothing in flight, still kept")
	}
	if got, want := b.Stats().InFlight, int64(300-10-len(held["a"])); got != want {
		t.Fatalf("%d in flight, want %d", got, want)
	}
	b.Update(nil)
	if l := b.Acquire("x"); l.Index != -1 || l.Table != nil {
		t.Fatalf("empty: %+v", l)
	}
	b.Update(abc) // b and c come back with their leases still counted
	if got, want := inflight("c"), int64(len(held["c"])); got != want {
		t.Fatalf("c after a swap through the empty table: %d, want %d", got, want)
	}
}

// TestBoundedEmpty checks tables with nothing to pick.
func TestBoundedEmpty(t *testing.T) {
	for name, tab := range map[string]*maglev.Table{
		"nil":     nil,
		"empty":   mustNew(t, nil, 7, nil),
		"drained": mustWeighted(t, weighted(0, 0), 7, nil),
	} {
		for _, f := range []float64{0, 1.25} {
			b := mustBounded(t, tab, f)
			l := b.Acquire("k")
			if l.Index != -1 || l.Backend() != "" || b.AcquireHash(1).Index != -1 {
				t.Fatalf("%s: Acquire = %+v, want Index -1", name, l)
			}
			l.Release()
			Lease{}.Release()
			if st := b.Stats(); st != (Stats{}) {
				t.Fatalf("%s: stats %+v", name, st)
			}
		}
	}
}

// TestBoundedConcurrent runs goroutines that acquire concurrently, then
// release concurrently, with table swaps in between, and checks at each
// pause: while only Acquires run, L only grows, so every backend's count
// stays within its capacity at the final L (Forced picks aside, each of
// which adds at most one); and every backend's count is exactly the leases
// the goroutines hold on it, by name, across swaps.
func TestBoundedConcurrent(t *testing.T) {
	const goroutines, perPhase, phases = 8, 100, 12
	t1 := mustNew(t, []string{"a", "b", "c", "d"}, 1009, nil)
	t2 := mustNew(t, []string{"a", "b", "c", "e"}, 1009, nil)
	b := mustBounded(t, t1, 1.25)
	keys := zipfKeys(goroutines*perPhase, 50, 1.1)
	held := make([][]Lease, goroutines)
	before := map[string]int64{} // counts when the phase started
	for phase := range phases {
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(phase), uint64(g)))
				if phase%2 == 0 { // acquire only
					for k := range perPhase {
						held[g] = append(held[g], b.Acquire(keys[g*perPhase+k]))
					}
					return
				}
				for len(held[g]) > 0 && r.IntN(4) != 0 { // release about 3/4
					j := r.IntN(len(held[g]))
					held[g][j].Release()
					held[g] = slices.Delete(held[g], j, j+1)
				}
			})
		}
		if phase%4 == 1 {
			wg.Go(func() { // swap tables while releases run
				b.Update(map[bool]*maglev.Table{true: t1, false: t2}[b.Table() == t2])
			})
		}
		wg.Wait()
		want := map[string]int64{}
		total := int64(0)
		for _, ls := range held {
			for _, l := range ls {
				want[l.Backend()]++
				total++
			}
		}
		st := b.Stats()
		if st.InFlight != total {
			t.Fatalf("phase %d: %d in flight, goroutines hold %d", phase, st.InFlight, total)
		}
		for name, l := range b.c.byName {
			if got := l.inflight.Load(); got != want[name] {
				t.Fatalf("phase %d: %s counts %d, goroutines hold %d", phase, name, got, want[name])
			}
		}
		if phase%2 == 0 {
			// A backend gains a request only while below its capacity,
			// which only grows while L does: so it ends the phase with
			// at most the larger of its count at the start and its
			// capacity at the final L. (All of this phase's picks went
			// to one table: swaps run in release phases.)
			c := int64(math.Ceil(1.25 * float64(total) / 4))
			for _, name := range b.Table().Backends() {
				if got := want[name]; got > max(before[name], c)+int64(st.Forced) {
					t.Fatalf("phase %d: %s holds %d, started with %d, capacity %d at L = %d (%d forced)",
						phase, name, got, before[name], c, total, st.Forced)
				}
			}
		}
		before = want
	}
	if st := b.Stats(); st.Forced > goroutines*perPhase/100 {
		t.Errorf("%d of %d picks forced onto a full backend", st.Forced, goroutines*perPhase*phases/2)
	}
}

// TestBoundedZeroAllocs checks that Acquire and Release do not allocate,
// with bounded loads on and off and a hot key spilling.
func TestBoundedZeroAllocs(t *testing.T) {
	tab := mustWeighted(t, goldenWeights(50), maglev.DefaultSize, nil)
	for _, f := range []float64{0, 1.25} {
		b := mustBounded(t, tab, f)
		held := make([]Lease, 0, 64)
		for range 64 {
			held = append(held, b.Acquire("hot"))
		}
		k := 0
		if a := testing.AllocsPerRun(200, func() {
			held[k%64].Release()
			held[k%64] = b.Acquire("hot")
			k++
		}); a != 0 {
			t.Errorf("factor %v: Acquire+Release allocates %.1f times", f, a)
		}
		if a := testing.AllocsPerRun(200, func() { b.AcquireHash(uint64(k)).Release(); k++ }); a != 0 {
			t.Errorf("factor %v: AcquireHash+Release allocates %.1f times", f, a)
		}
		if f != 0 && b.Stats().Spilled == 0 {
			t.Errorf("factor %v: the hot key never spilled", f)
		}
		for _, l := range held {
			l.Release()
		}
	}
}

// boundedSink keeps benchmark results alive.
var boundedSink int

// BenchmarkBounded measures a pick with Acquire and Release against plain
// LookupIndex, in one run: bounded loads off and at 1.25, each with no
// other request in flight (held=0) and with 64 leases held, the oldest
// released before each pick, so that a hot key spills; keys drawn
// Zipf(1.1) over 1,000 keys.
func BenchmarkBounded(b *testing.B) {
	for _, n := range []int{10, 100} {
		tab, err := maglev.New(benchBackends(n), maglev.DefaultSize, nil)
		if err != nil {
			b.Fatal(err)
		}
		keys := zipfKeys(1<<12, 1000, 1.1)
		hs := make([]uint64, len(keys))
		for i, k := range keys {
			hs[i] = tab.Hasher().HashString(k)
		}
		mask := len(hs) - 1
		b.Run(fmt.Sprintf("N=%d/lookup", n), func(b *testing.B) {
			b.ReportAllocs()
			s := 0
			for i := 0; b.Loop(); i++ {
				s += tab.LookupHashIndex(hs[i&mask])
			}
			boundedSink = s
		})
		for _, f := range []float64{0, 1.25} {
			for _, held := range []int{0, 64} {
				b.Run(fmt.Sprintf("N=%d/factor=%v/held=%d", n, f, held), func(b *testing.B) {
					bd, err := New(tab, f)
					if err != nil {
						b.Fatal(err)
					}
					ring := make([]Lease, held)
					b.ReportAllocs()
					s := 0
					for i := 0; b.Loop(); i++ {
						l := bd.AcquireHash(hs[i&mask])
						s += l.Index
						if held == 0 {
							l.Release()
							continue
						}
						ring[i%held].Release()
						ring[i%held] = l
					}
					boundedSink = s
				})
			}
		}
	}
}

// BenchmarkAcquireOff measures Acquire with bounded loads off beside
// Lookup on the same keys, hashing included: with factor 0 an Acquire is a
// Lookup that returns a Lease.
func BenchmarkAcquireOff(b *testing.B) {
	tab, err := maglev.New(benchBackends(100), maglev.DefaultSize, nil)
	if err != nil {
		b.Fatal(err)
	}
	keys := zipfKeys(1<<12, 1000, 1.1)
	mask := len(keys) - 1
	bd, err := New(tab, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Lookup", func(b *testing.B) {
		b.ReportAllocs()
		s := 0
		for i := 0; b.Loop(); i++ {
			s += len(tab.Lookup(keys[i&mask]))
		}
		boundedSink = s
	})
	b.Run("Acquire", func(b *testing.B) {
		b.ReportAllocs()
		s := 0
		for i := 0; b.Loop(); i++ {
			l := bd.Acquire(keys[i&mask])
			s += len(l.Backend())
			l.Release()
		}
		boundedSink = s
	})
}

// TestPickerWithout: a Picker over a table from Without never picks a
// backend out of service, with bounded loads on or off.
func TestPickerWithout(t *testing.T) {
	base := mustNew(t, names("c", 40), 1009, nil)
	down, err := base.Without("c3", "c17", "c31")
	if err != nil {
		t.Fatal(err)
	}
	for _, factor := range []float64{0, 1.25} {
		b := mustBounded(t, down, factor)
		var leases []Lease
		for k := range 1000 {
			l := b.Acquire(fmt.Sprintf("key-%d", k))
			if n := l.Backend(); n == "c3" || n == "c17" || n == "c31" || n == "" {
				t.Fatalf("factor %v: key-%d picked %q", factor, k, n)
			}
			leases = append(leases, l)
		}
		for _, l := range leases {
			l.Release()
		}
	}
}

func benchBackends(n int) []string {
	b := make([]string, n)
	for i := range b {
		b[i] = fmt.Sprintf("10.%d.%d.%d:8080", i>>16, i>>8&0xff, i&0xff)
	}
	return b
}
