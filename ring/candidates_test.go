package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/maglevlb/maglev"
)

// slowCandidates is the replica order written out plainly: scan the sorted
// points for the first at or after x (the first point if none), then walk
// every point once, clockwise, keeping each owner name the first time it
// is met.
func slowCandidates(pts []slowPoint, x uint64) []string {
	if len(pts) == 0 {
		return nil
	}
	start := 0
	for k, p := range pts {
		if p.pos >= x {
			start = k
			break
		}
	}
	var out []string
	for d := range pts {
		if name := pts[(start+d)%len(pts)].name; !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// candidateNames returns the names of r's first k candidates of x (all
// of them for k < 0).
func candidateNames(r *Ring, x uint64, k int) []string {
	var out []string
	if k == 0 {
		return out
	}
	for i := range r.CandidatesHash(x) {
		out = append(out, r.backends[i])
		if len(out) == k {
			break
		}
	}
	return out
}

// TestCandidates compares the order with slowCandidates, in full and cut
// short, on random rings of hashed points and on hand-placed rings full of
// ties, at probes on, before and after every point; and checks that the
// first candidate is Lookup's and every backend appears once.
func TestCandidates(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(what string, ring *Ring, slow []slowPoint) {
		t.Helper()
		for _, x := range probes(r, slow) {
			want := slowCandidates(slow, x)
			got := candidateNames(ring, x, -1)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: candidates of %#x: %v, want %v", what, x, got, want)
			}
			if len(got) != ring.Len() || len(got) > 0 && got[0] != ring.LookupHash(x) {
				t.Fatalf("%s: candidates of %#x: %v, Len %d, LookupHash %q", what, x, got, ring.Len(), ring.LookupHash(x))
			}
			k := r.IntN(len(want) + 1)
			if got := candidateNames(ring, x, k); !slices.Equal(got, want[:k]) {
				t.Fatalf("%s: first %d candidates of %#x: %v, want %v", what, k, x, got, want[:k])
			}
		}
	}
	for iter := range 150 {
		n, vnodes := r.IntN(30), 1+r.IntN(20)
		bs := randomBackends(r, n)
		check(fmt.Sprintf("iter %d (N=%d vnodes=%d)", iter, n, vnodes), mustNew(t, bs, vnodes, nil), slowRing(bs, vnodes, nil))
	}
	for iter := range 150 {
		choices := []uint64{0, 1, 2, 3, 4, 5, 6, 7}
		positions := map[string][]uint64{}
		for _, name := range randomBackends(r, 1+r.IntN(6)) {
			ps := make([]uint64, 1+r.IntN(5))
			for k := range ps {
				ps[k] = choices[r.IntN(len(choices))]
			}
			positions[name] = ps
		}
		check(fmt.Sprintf("ties %d", iter), mustPlace(t, positions), slowPlaced(positions))
	}
	ring := mustNew(t, names("b", 7), 3, maglev.Farm())
	for k := range 50 {
		key := fmt.Sprint("key", k)
		got := slices.Collect(ring.Candidates(key))
		if b := slices.Collect(ring.CandidatesBytes([]byte(key))); !slices.Equal(b, got) {
			t.Fatalf("CandidatesBytes(%q) = %v, Candidates %v", key, b, got)
		}
		if h := slices.Collect(ring.CandidatesHash(maglev.Farm().HashString(key))); !slices.Equal(h, got) {
			t.Fatalf("CandidatesHash(%q) = %v, Candidates %v", key, h, got)
		}
	}
}

// TestCandidatesZeroAllocs checks that ranging over the candidates does
// not allocate once the first call has built the distances.
func TestCandidatesZeroAllocs(t *testing.T) {
	ring := mustNew(t, names("b", 50), 100, nil)
	seeded := mustNew(t, names("b", 50), 100, maglev.XXH3Seed(3))
	for range ring.Candidates("warm") {
	}
	for range seeded.Candidates("warm") {
	}
	sink := 0
	keyBytes := []byte("key")
	for name, f := range map[string]func(){
		"k=2": func() {
			n := 0
			for i := range ring.Candidates("key") {
				if sink += i; n == 1 {
					break
				}
				n++
			}
		},
		"all": func() {
			for i := range ring.CandidatesHash(12345) {
				sink += i
			}
		},
		"seeded/all": func() {
			for i := range seeded.CandidatesBytes(keyBytes) {
				sink += i
			}
		},
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s allocates %.1f times per call", name, a)
		}
	}
	_ = sink
}

// TestCandidatesConcurrentFirstUse starts many iterators on a fresh ring
// at once: the distances are built once, and all agree (run with -race).
func TestCandidatesConcurrentFirstUse(t *testing.T) {
	ring := mustNew(t, names("b", 20), 50, nil)
	want := slowCandidates(slowRing(names("b", 20), 50, nil), 99)
	done := make(chan []string)
	for range 8 {
		go func() { done <- candidateNames(ring, 99, -1) }()
	}
	for range 8 {
		if got := <-done; !slices.Equal(got, want) {
			t.Fatalf("concurrent first use: %v, want %v", got, want)
		}
	}
}

// goldenCandidates pins, per built-in hasher, the first 5 candidates of a
// few keys on a ring of the 20 backends "10.0.0.1:80" to "10.0.0.20:80"
// with DefaultVnodes points each. The values were produced by
// slowCandidates over slowRing, the plain spec, and agree with the package
// on linux/amd64, linux/386 and linux/s390x (big-endian, under QEMU). A
// change to any of them moves replicas: a breaking change.
var goldenCandidates = map[string]string{
	"xxh3/\"\"":                 "10.0.0.20:80 10.0.0.6:80 10.0.0.12:80 10.0.0.14:80 10.0.0.8:80",
	"xxh3/\"a\"":                "10.0.0.5:80 10.0.0.6:80 10.0.0.19:80 10.0.0.7:80 10.0.0.15:80",
	"xxh3/\"192.0.2.7\"":        "10.0.0.7:80 10.0.0.11:80 10.0.0.1:80 10.0.0.20:80 10.0.0.5:80",
	"xxh3/\"user:42\"":          "10.0.0.20:80 10.0.0.19:80 10.0.0.4:80 10.0.0.14:80 10.0.0.7:80",
	"xxh3/\"tenant/acme\"":      "10.0.0.16:80 10.0.0.2:80 10.0.0.7:80 10.0.0.14:80 10.0.0.8:80",
	"xxh3/\"\\x00\\xff\"":       "10.0.0.16:80 10.0.0.2:80 10.0.0.6:80 10.0.0.8:80 10.0.0.10:80",
	"xxh3-seed/\"\"":            "10.0.0.13:80 10.0.0.7:80 10.0.0.9:80 10.0.0.3:80 10.0.0.15:80",
	"xxh3-seed/\"a\"":           "10.0.0.8:80 10.0.0.12:80 10.0.0.5:80 10.0.0.13:80 10.0.0.19:80",
	"xxh3-seed/\"192.0.2.7\"":   "10.0.0.10:80 10.0.0.11:80 10.0.0.1:80 10.0.0.20:80 10.0.0.5:80",
	"xxh3-seed/\"user:42\"":     "10.0.0.18:80 10.0.0.7:80 10.0.0.19:80 10.0.0.6:80 10.0.0.2:80",
	"xxh3-seed/\"tenant/acme\"": "10.0.0.20:80 10.0.0.17:80 10.0.0.4:80 10.0.0.3:80 10.0.0.16:80",
	"xxh3-seed/\"\\x00\\xff\"":  "10.0.0.13:80 10.0.0.5:80 10.0.0.10:80 10.0.0.12:80 10.0.0.2:80",
	"farm/\"\"":                 "10.0.0.5:80 10.0.0.20:80 10.0.0.13:80 10.0.0.18:80 10.0.0.10:80",
	"farm/\"a\"":                "10.0.0.19:80 10.0.0.15:80 10.0.0.14:80 10.0.0.16:80 10.0.0.17:80",
	"farm/\"192.0.2.7\"":        "10.0.0.20:80 10.0.0.15:80 10.0.0.1:80 10.0.0.12:80 10.0.0.5:80",
	"farm/\"user:42\"":          "10.0.0.11:80 10.0.0.8:80 10.0.0.10:80 10.0.0.14:80 10.0.0.17:80",
	"farm/\"tenant/acme\"":      "10.0.0.4:80 10.0.0.5:80 10.0.0.1:80 10.0.0.6:80 10.0.0.13:80",
	"farm/\"\\x00\\xff\"":       "10.0.0.4:80 10.0.0.6:80 10.0.0.15:80 10.0.0.8:80 10.0.0.14:80",
	"fnv1a/\"\"":                "10.0.0.14:80 10.0.0.11:80 10.0.0.13:80 10.0.0.9:80 10.0.0.1:80",
	"fnv1a/\"a\"":               "10.0.0.14:80 10.0.0.3:80 10.0.0.8:80 10.0.0.12:80 10.0.0.4:80",
	"fnv1a/\"192.0.2.7\"":       "10.0.0.11:80 10.0.0.16:80 10.0.0.1:80 10.0.0.4:80 10.0.0.15:80",
	"fnv1a/\"user:42\"":         "10.0.0.18:80 10.0.0.10:80 10.0.0.17:80 10.0.0.11:80 10.0.0.9:80",
	"fnv1a/\"tenant/acme\"":     "10.0.0.20:80 10.0.0.9:80 10.0.0.11:80 10.0.0.8:80 10.0.0.15:80",
	"fnv1a/\"\\x00\\xff\"":      "10.0.0.10:80 10.0.0.15:80 10.0.0.13:80 10.0.0.19:80 10.0.0.4:80",
}

var goldenCandidateKeys = []string{"", "a", "192.0.2.7", "user:42", "tenant/acme", "\x00\xff"}

func goldenRingBackends() []string {
	bs := make([]string, 20)
	for i := range bs {
		bs[i] = fmt.Sprintf("10.0.0.%d:80", i+1)
	}
	return bs
}

// TestGoldenCandidates pins the replica order per built-in hasher.
func TestGoldenCandidates(t *testing.T) {
	for _, b := range builtins {
		ring := mustNew(t, goldenRingBackends(), DefaultVnodes, b.h)
		slow := slowRing(goldenRingBackends(), DefaultVnodes, b.h)
		for _, key := range goldenCandidateKeys {
			gk := fmt.Sprintf("%s/%q", b.name, key)
			x := b.h.HashString(key)
			got := strings.Join(candidateNames(ring, x, 5), " ")
			ref := strings.Join(slowCandidates(slow, x)[:5], " ")
			if got != goldenCandidates[gk] || ref != goldenCandidates[gk] {
				t.Errorf("%s: first candidates %q (reference %q), golden %q", gk, got, ref, goldenCandidates[gk])
			}
		}
	}
}

// FuzzCandidates compares the order with slowCandidates on hand-placed
// rings.
func FuzzCandidates(f *testing.F) {
	f.Add(fuzzLE(100, 200, 300), uint64(320))
	f.Add(fuzzLE(5, 5, 5, 5, 9, 9), uint64(5))
	f.Fuzz(func(t *testing.T, data []byte, x uint64) {
		positions := fuzzPositions(data)
		r, err := NewWithPositions(positions, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := candidateNames(r, x, -1), slowCandidates(slowPlaced(positions), x); !slices.Equal(got, want) {
			t.Fatalf("candidates of %#x: %v, want %v", x, got, want)
		}
	})
}

// BenchmarkCandidates measures the first k candidates of a key hash on a
// ring of DefaultVnodes points per backend, for k = 1, 2, 3 and N.
func BenchmarkCandidates(b *testing.B) {
	_, hashes := benchKeys()
	for _, n := range benchN {
		ring, err := New(benchBackends(n), DefaultVnodes, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range ring.CandidatesHash(0) {
		}
		for _, k := range []int{1, 2, 3, n} {
			b.Run(fmt.Sprintf("N=%d/k=%d", n, k), func(b *testing.B) {
				b.ReportAllocs()
				s := 0
				for i := 0; b.Loop(); i++ {
					got := 0
					for c := range ring.CandidatesHash(hashes[i%numKeys]) {
						s += c
						if got++; got == k {
							break
						}
					}
				}
				sinkInt = s
			})
		}
	}
}
