package maglev

// This file is part of the compatibility surface. A table depends on the
// hasher's exact output: changing how any built-in hasher computes its value,
// or which hasher a nil Hasher means, changes every table built with it.
// TestGolden in maglev_test.go pins each built-in hasher's tables byte for
// byte; if it fails, the change is a breaking change.

import (
	"unsafe"

	farm "github.com/dgryski/go-farm"
	"github.com/zeebo/xxh3"
)

// A Hasher hashes bytes to 64 bits. Tables use it for backend names (to place
// each backend's preference sequence) and for keys (to pick a slot).
//
// Hash and HashString must return the same value for the same bytes, must
// not retain or modify their argument, and must be deterministic: the same
// bytes give the same value in every process, on every platform. A Hasher
// must be safe for concurrent use.
type Hasher interface {
	Hash(b []byte) uint64
	HashString(s string) uint64
}

// hasherKind names the built-in hashers so that lookups can call them
// directly instead of through the interface.
type hasherKind uint8

const (
	kindOther hasherKind = iota
	kindXXH3
	kindXXH3Seed
)

// XXH3 returns the default Hasher: 64-bit XXH3 with seed 0, as
// github.com/zeebo/xxh3's Hash and HashString compute it. A nil Hasher
// passed to New means XXH3.
func XXH3() Hasher { return xxh3Hasher{} }

// XXH3Seed returns 64-bit XXH3 with the given seed. A fleet that shares a
// secret seed gets tables that outsiders who know the backend names cannot
// reproduce, so they cannot aim keys at one backend. XXH3Seed(0) is XXH3.
func XXH3Seed(seed uint64) Hasher {
	if seed == 0 {
		return xxh3Hasher{}
	}
	return xxh3SeedHasher{seed}
}

// Farm returns FarmHash's Fingerprint64, as github.com/dgryski/go-farm
// computes it. Fingerprint64 is specified never to change; farm.Hash64 is
// not, and is deliberately not offered.
func Farm() Hasher { return farmHasher{} }

// FNV1a returns 64-bit FNV-1a, the same function as [hash/fnv.New64a],
// computed without allocating.
func FNV1a() Hasher { return fnv1aHasher{} }

// HashFunc adapts a function to the Hasher interface. HashString passes the
// string's bytes to the function without copying them, so the function must
// not modify or retain its argument.
type HashFunc func(b []byte) uint64

// Hash returns f(b).
func (f HashFunc) Hash(b []byte) uint64 { return f(b) }

// HashString returns f applied to the bytes of s, without allocating.
func (f HashFunc) HashString(s string) uint64 { return f(stringBytes(s)) }

type xxh3Hasher struct{}

func (xxh3Hasher) Hash(b []byte) uint64       { return xxh3.Hash(b) }
func (xxh3Hasher) HashString(s string) uint64 { return xxh3.HashString(s) }

type xxh3SeedHasher struct{ seed uint64 }

func (h xxh3SeedHasher) Hash(b []byte) uint64       { return xxh3.HashSeed(b, h.seed) }
func (h xxh3SeedHasher) HashString(s string) uint64 { return xxh3.HashStringSeed(s, h.seed) }

type farmHasher struct{}

func (farmHasher) Hash(b []byte) uint64       { return farm.Fingerprint64(b) }
func (farmHasher) HashString(s string) uint64 { return farm.Fingerprint64(stringBytes(s)) }

type fnv1aHasher struct{}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func (fnv1aHasher) Hash(b []byte) uint64 {
	h := uint64(fnvOffset64)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

func (fnv1aHasher) HashString(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// classify reports which built-in hasher h is, with its seed, so that the
// lookup path can skip the interface call for the common ones.
func classify(h Hasher) (hasherKind, uint64) {
	switch h := h.(type) {
	case xxh3Hasher:
		return kindXXH3, 0
	case xxh3SeedHasher:
		return kindXXH3Seed, h.seed
	}
	return kindOther, 0
}

// stringBytes returns the bytes of s without copying. The result must not be
// modified.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

var (
	_ Hasher = xxh3Hasher{}
	_ Hasher = xxh3SeedHasher{}
	_ Hasher = farmHasher{}
	_ Hasher = fnv1aHasher{}
	_ Hasher = HashFunc(nil)
)
