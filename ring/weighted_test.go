package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/maglevlb/maglev"
)

// slowWeighted is NewWeighted's rule written plainly: backend b gets
// vnodes·w points at H(le64(j) + name), and weight-0 backends none.
func slowWeighted(backends []maglev.Backend, vnodes int, h maglev.Hasher) []slowPoint {
	var pts []slowPoint
	for _, b := range backends {
		if b.Weight == 0 {
			continue
		}
		for j := range vnodes * int(b.Weight) {
			var le [8]byte
			binary.LittleEndian.PutUint64(le[:], uint64(j))
			pts = append(pts, slowPoint{h.HashString(string(le[:]) + b.Name), b.Name, j})
		}
	}
	sortSlow(pts)
	return pts
}

func mustWeightedRing(t *testing.T, backends []maglev.Backend, vnodes int, h maglev.Hasher) *Ring {
	t.Helper()
	r, err := NewWeighted(backends, vnodes, h)
	if err != nil {
		t.Fatalf("NewWeighted(%d backends, %d): %v", len(backends), vnodes, err)
	}
	return r
}

// TestNewWeightedSpec checks NewWeighted against the plain rule over
// random weights, in random input order, and that points are in
// proportion to weight.
func TestNewWeightedSpec(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 60 {
		n := 1 + rng.IntN(12)
		backends := make([]maglev.Backend, n)
		for i := range backends {
			backends[i] = maglev.Backend{Name: fmt.Sprint("b", i), Weight: uint32(rng.IntN(7)) * uint32(1+rng.IntN(3))}
		}
		vnodes := 1 + rng.IntN(40)
		r := mustWeightedRing(t, backends, vnodes, maglev.FNV1a())
		if !sameAsSlow(r, slowWeighted(backends, vnodes, maglev.FNV1a())) {
			t.Fatalf("NewWeighted(%v, %d) differs from the plain rule", backends, vnodes)
		}
		rng.Shuffle(n, func(i, j int) { backends[i], backends[j] = backends[j], backends[i] })
		if s := mustWeightedRing(t, backends, vnodes, maglev.FNV1a()); !slices.Equal(s.AppendPoints(nil), r.AppendPoints(nil)) {
			t.Fatalf("NewWeighted depends on the order of backends")
		}
		// Points per backend are proportional to weight.
		per := make([]int, r.Len())
		for _, p := range r.AppendPoints(nil) {
			per[p.Backend]++
		}
		names := r.Backends()
		for i, name := range names {
			w := backends[slices.IndexFunc(backends, func(b maglev.Backend) bool { return b.Name == name })].Weight
			if w == 0 {
				t.Fatalf("weight-0 backend %s is among Backends", name)
			}
			if per[i]%vnodes != 0 || per[0]*int(w) != per[i]*int(weightOf(backends, names[0])) {
				t.Fatalf("backend %s (weight %d) has %d points, %s (weight %d) %d", name, w, per[i], names[0], weightOf(backends, names[0]), per[0])
			}
		}
		// Candidates end, naming every backend with points once.
		if r.Len() > 0 {
			seen := 0
			for range r.Candidates("k") {
				seen++
			}
			if seen != r.Len() {
				t.Fatalf("Candidates named %d backends, want %d", seen, r.Len())
			}
		}
	}
}

func weightOf(backends []maglev.Backend, name string) uint32 {
	for _, b := range backends {
		if b.Name == name {
			return b.Weight
		}
	}
	return 0
}

// TestNewWeightedEqualIsNew checks that weights of 1 give New's ring, and
// equal weights w New's ring of w·vnodes points.
func TestNewWeightedEqualIsNew(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	for _, w := range []uint32{1, 3} {
		want := mustNew(t, names, 50*int(w), nil)
		bs := make([]maglev.Backend, len(names))
		for i, n := range names {
			bs[i] = maglev.Backend{Name: n, Weight: w}
		}
		r := mustWeightedRing(t, bs, 50, nil)
		if !slices.Equal(r.AppendPoints(nil), want.AppendPoints(nil)) || r.Vnodes() != 50 {
			t.Fatalf("weights all %d: ring differs from New's with %d vnodes (Vnodes %d)", w, 50*w, r.Vnodes())
		}
	}
}

// TestNewWeightedMembership checks that a backend joining moves no other
// backend's points: each keeps exactly its points.
func TestNewWeightedMembership(t *testing.T) {
	before := mustWeightedRing(t, []maglev.Backend{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}}, 20, nil)
	after := mustWeightedRing(t, []maglev.Backend{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}, {Name: "c", Weight: 3}}, 20, nil)
	kept := map[uint64]string{}
	for _, p := range after.AppendPoints(nil) {
		kept[p.Pos] = after.Backends()[p.Backend]
	}
	for _, p := range before.AppendPoints(nil) {
		if name := before.Backends()[p.Backend]; kept[p.Pos] != name {
			t.Fatalf("point %#x of %s is %q's after c joins", p.Pos, name, kept[p.Pos])
		}
	}
	if after.NumPoints() != 120 {
		t.Fatalf("%d points, want 20·(1+2+3)", after.NumPoints())
	}
}

// TestNewWeightedDrained checks that weight-0 backends are left out, and
// that all of them drained is an empty ring.
func TestNewWeightedDrained(t *testing.T) {
	r := mustWeightedRing(t, []maglev.Backend{{Name: "a", Weight: 2}, {Name: "z", Weight: 0}}, 10, nil)
	if !slices.Equal(r.Backends(), []string{"a"}) || r.Lookup("k") != "a" {
		t.Fatalf("drained z: Backends %q, Lookup %q", r.Backends(), r.Lookup("k"))
	}
	r = mustWeightedRing(t, []maglev.Backend{{Name: "a"}, {Name: "b"}}, 10, nil)
	if r.Len() != 0 || r.NumPoints() != 0 || r.Lookup("k") != "" {
		t.Fatalf("all drained: %d backends, %d points, Lookup %q", r.Len(), r.NumPoints(), r.Lookup("k"))
	}
	for range r.Candidates("k") {
		t.Fatal("all drained: Candidates yielded")
	}
}

func TestNewWeightedErrors(t *testing.T) {
	for _, c := range []struct {
		backends []maglev.Backend
		vnodes   int
		want     error
	}{
		{[]maglev.Backend{{Name: "a", Weight: 1}}, 0, ErrVnodes},
		{[]maglev.Backend{{Name: "a", Weight: 1}}, MaxPoints + 1, ErrVnodes},
		{[]maglev.Backend{{Name: "a", Weight: 1}, {Name: "b", Weight: 1 << 31}}, 1 << 10, ErrTooManyPoints},
		{[]maglev.Backend{{Name: "a", Weight: 1 << 23}, {Name: "b", Weight: 1<<23 + 1}}, 1, ErrTooManyPoints},
		{[]maglev.Backend{{Name: "a", Weight: 1}, {Name: "", Weight: 1}}, 1, maglev.ErrEmptyName},
		{[]maglev.Backend{{Name: "a", Weight: 1}, {Name: "a", Weight: 2}}, 1, maglev.ErrDuplicateName},
		// Names of weight 0 are checked too, as maglev.NewWeighted checks them.
		{[]maglev.Backend{{Name: "a", Weight: 1}, {Name: "a", Weight: 0}}, 1, maglev.ErrDuplicateName},
		{[]maglev.Backend{{Name: "a", Weight: 1}, {Name: "", Weight: 0}}, 1, maglev.ErrEmptyName},
	} {
		r, err := NewWeighted(c.backends, c.vnodes, nil)
		if !errors.Is(err, c.want) || r != nil || err.Error()[:6] != "ring: " {
			t.Errorf("NewWeighted(%v, %d) = ring %t, %v; want %v", c.backends, c.vnodes, r != nil, err, c.want)
		}
	}
}
