package maglev

import "fmt"

// A Permutation is one backend's preference sequence in a table of M slots:
//
//	Offset, Offset+Skip, Offset+2·Skip, ...   (mod M)
//
// With M prime and Skip in 1..M-1, the sequence visits every slot exactly
// once before it repeats. The zero value is not a valid Permutation (its
// Skip is 0).
type Permutation struct {
	Offset uint32 // first preferred slot, in 0..M-1
	Skip   uint32 // stride between preferences, in 1..M-1
}

// Next returns the preference that follows slot in p's sequence, in a table
// of m slots: (slot + Skip) mod m, computed by one addition and one
// subtraction, without division. slot must be below m.
func (p Permutation) Next(slot, m uint32) uint32 {
	slot += p.Skip
	if slot >= m {
		slot -= m
	}
	return slot
}

// A Generator computes backends' permutations for one table size and
// hasher. For a backend named name, with H the hasher and + concatenation:
//
//	Offset = H(name + "|offset") mod M
//	Skip   = H(name + "|skip") mod (M-1) + 1
//
// A Generator keeps one scratch buffer for the concatenations, so once it
// has seen a name at least as long as the next one, Permutation does not
// allocate. A Generator is not safe for concurrent use; use one per
// goroutine. The zero Generator has no table size: its Permutation panics
// with a message saying so.
type Generator struct {
	m   uint32
	h   Hasher
	buf []byte // scratch for name + suffix
}

// NewGenerator returns a Generator for tables of m slots hashed with h (nil
// means XXH3). It returns an error wrapping ErrSize if m
// is not a supported table size.
func NewGenerator(m int, h Hasher) (*Generator, error) {
	if err := CheckSize(m); err != nil {
		return nil, err
	}
	if h == nil {
		h = xxh3Hasher{}
	}
	return &Generator{m: uint32(m), h: h}, nil
}

// Permutation returns the preference sequence of the backend called name.
// It hashes name twice and, once the scratch buffer is large enough, does
// not allocate.
func (g *Generator) Permutation(name string) Permutation {
	const offset, skip = "|offset", "|skip"
	if g.h == nil {
		panic("maglev: Permutation of a zero Generator: make one with NewGenerator")
	}
	if need := len(name) + len(offset); cap(g.buf) < need {
		g.buf = make([]byte, 0, need)
	}
	m := uint64(g.m)
	b := append(append(g.buf[:0], name...), offset...)
	o := g.h.Hash(b) % m
	b = append(b[:len(name)], skip...)
	s := g.h.Hash(b)%(m-1) + 1
	return Permutation{Offset: uint32(o), Skip: uint32(s)}
}

// permutations appends the permutations of names, in order, to dst and
// returns the extended slice. It does not allocate when dst has room and
// the scratch buffer is large enough.
func (g *Generator) permutations(dst []Permutation, names []string) []Permutation {
	for _, name := range names {
		dst = append(dst, g.Permutation(name))
	}
	return dst
}

// checkPermutations reports whether every permutation is valid for a table
// of m slots.
func checkPermutations(perms []Permutation, m uint32) error {
	for i, p := range perms {
		if p.Offset >= m || p.Skip == 0 || p.Skip >= m {
			return fmt.Errorf("%w: permutation %d is {Offset: %d, Skip: %d}, table size %d",
				ErrPermutation, i, p.Offset, p.Skip, m)
		}
	}
	return nil
}
