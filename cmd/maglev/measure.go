package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"runtime"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/ring"
)

// A lookuper is a built Maglev table or ring.
type lookuper interface {
	Lookup(key string) string
	LookupHash(h uint64) string
}

// An algorithm is one row of the comparison.
type algorithm struct {
	name   string
	kind   string // "maglev" or "ring"
	m      int
	vnodes int
	build  func(backends []maglev.Backend) (lookuper, error)
}

// algorithms returns the rows to compare.
func (c *compareConfig) algorithms() []algorithm {
	weighted := c.weights != nil
	var algs []algorithm
	for _, m := range []int{c.m, nextPrime(10 * c.m)} {
		if m > maglev.MaxSize {
			continue
		}
		algs = append(algs, algorithm{
			name: fmt.Sprintf("maglev M=%d", m), kind: "maglev", m: m,
			build: func(backends []maglev.Backend) (lookuper, error) {
				if weighted {
					return maglev.NewWeighted(backends, m, c.h)
				}
				return maglev.New(names(backends), m, c.h)
			},
		})
	}
	g := uint32(0)
	for _, w := range c.weights {
		g = gcd(g, w)
	}
	for _, v := range c.vnodes {
		algs = append(algs, algorithm{
			name: fmt.Sprintf("ring vnodes=%d", v), kind: "ring", vnodes: v,
			build: func(backends []maglev.Backend) (lookuper, error) {
				if weighted {
					return weightedRing(backends, v, g, c.h)
				}
				return ring.New(names(backends), v, c.h)
			},
		})
	}
	return algs
}

// weightedRing builds a ring where each backend has vnodes·w/g points,
// placed where ring.New places them: point j of backend name at
// H(le64(j) + name). Drained backends have no points.
func weightedRing(backends []maglev.Backend, vnodes int, g uint32, h maglev.Hasher) (lookuper, error) {
	positions := make(map[string][]uint64, len(backends))
	total := 0
	for _, b := range backends {
		if b.Weight == 0 {
			continue
		}
		n := uint64(vnodes) * uint64(b.Weight/g)
		if total += int(min(n, ring.MaxPoints+1)); total > ring.MaxPoints {
			return nil, fmt.Errorf("%w: vnodes %d times the weights", ring.ErrTooManyPoints, vnodes)
		}
		pos := make([]uint64, n)
		buf := append(make([]byte, 8, 8+len(b.Name)), b.Name...)
		for j := range pos {
			binary.LittleEndian.PutUint64(buf, uint64(j))
			pos[j] = h.Hash(buf)
		}
		positions[b.Name] = pos
	}
	return ring.NewWithPositions(positions, h)
}

func names(backends []maglev.Backend) []string {
	s := make([]string, len(backends))
	for i, b := range backends {
		s[i] = b.Name
	}
	return s
}

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// nextPrime returns the smallest prime at or above n.
func nextPrime(n int) int {
	for !big.NewInt(int64(n)).ProbablyPrime(0) { // exact below 2^64
		n++
	}
	return n
}

// compare runs the comparison c asks for.
func compare(c *compareConfig, p *progress) (*report, error) {
	// Backend i is backends[i]; the base set is the first n, the added
	// backend is n, and the removed one is 0.
	backends := make([]maglev.Backend, c.n+1)
	index := make(map[string]int32, c.n+1)
	for i := range backends {
		backends[i] = maglev.Backend{Name: backendName(i), Weight: c.weight(i)}
		index[backends[i].Name] = int32(i)
	}
	base, added, removed := backends[:c.n], backends, backends[1:c.n]
	var total uint64
	for _, b := range base {
		total += uint64(b.Weight)
	}
	r := &report{
		N: c.n, K: c.k, Hash: c.hash, Seed: c.seed, KeySeed: c.keySeed, Weights: c.weights,
		Added:      backends[c.n].Name,
		Removed:    backends[0].Name,
		NoiseFloor: math.Sqrt(float64(c.n) / float64(c.k)),
		Go:         runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:       runtime.NumCPU(),
	}
	addIdeal := float64(backends[c.n].Weight) / float64(total+uint64(backends[c.n].Weight))
	removeIdeal := float64(backends[0].Weight) / float64(total)
	if c.weights == nil {
		addIdeal, removeIdeal = 1/float64(c.n+1), 1/float64(c.n)
	}

	p.say("generating %d keys", c.k)
	ks := keys(c.k, c.keySeed)
	hashes := make([]uint64, len(ks))
	for i, k := range ks {
		hashes[i] = c.h.HashString(k)
	}
	before := make([]int32, len(ks))
	after := make([]int32, len(ks))
	for _, alg := range c.algorithms() {
		res := result{Name: alg.name, Algorithm: alg.kind, M: alg.m, Vnodes: alg.vnodes}

		p.say("%s: building", alg.name)
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		var l lookuper
		for i := range 3 {
			start := time.Now()
			li, err := alg.build(base)
			d := time.Since(start)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", alg.name, err)
			}
			if i == 0 {
				runtime.ReadMemStats(&ms1)
				res.AllocBytes = ms1.TotalAlloc - ms0.TotalAlloc
				res.BuildNs = d.Nanoseconds()
				l = li
			}
			res.BuildNs = min(res.BuildNs, d.Nanoseconds())
		}
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		res.MemoryBytes = int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc)

		p.say("%s: timing lookups", alg.name)
		res.LookupNs = timeLookups(l, ks)
		runtime.KeepAlive(l)

		p.say("%s: measuring load", alg.name)
		owners(before, l, hashes, index)
		res.loads = loads(before, backends[:c.n], total, c.k)
		res.LoadMax, res.LoadMin, res.LoadStddev = loadStats(res.loads)

		p.say("%s: adding a backend", alg.name)
		res.Add.Ideal = addIdeal
		if err := diff(&res.Add, alg, added, before, after, hashes, index, int32(c.n)); err != nil {
			return nil, err
		}
		p.say("%s: removing a backend", alg.name)
		res.Remove.Ideal = removeIdeal
		if err := diff(&res.Remove, alg, removed, before, after, hashes, index, 0); err != nil {
			return nil, err
		}
		r.Rows = append(r.Rows, res)
	}
	return r, nil
}

// timeLookups returns the average time of l.Lookup over ks, in
// nanoseconds, from passes over ks that take at least 100ms in all (or 10
// passes).
func timeLookups(l lookuper, ks []string) float64 {
	n := 0
	start := time.Now()
	for passes := 1; ; passes++ {
		for _, k := range ks {
			n += len(l.Lookup(k))
		}
		if d := time.Since(start); d >= 100*time.Millisecond || passes == 10 {
			runtime.KeepAlive(n) // the lookups' results are used
			return float64(d.Nanoseconds()) / float64(passes*len(ks))
		}
	}
}

// owners sets dst[i] to the index of the backend that owns hashes[i] in l.
func owners(dst []int32, l lookuper, hashes []uint64, index map[string]int32) {
	for i, h := range hashes {
		dst[i] = index[l.LookupHash(h)]
	}
}

// loads returns each backend's count of keys in owners over its fair share
// of k keys, K·w/total; NaN for a drained backend.
func loads(owners []int32, backends []maglev.Backend, total uint64, k int) []float64 {
	counts := make([]int, len(backends))
	for _, o := range owners {
		counts[o]++
	}
	ls := make([]float64, len(backends))
	for i, b := range backends {
		ls[i] = math.NaN()
		if b.Weight > 0 {
			ls[i] = float64(counts[i]) / (float64(k) * float64(b.Weight) / float64(total))
		}
	}
	return ls
}

// loadStats returns the largest and smallest of loads and their standard
// deviation, ignoring NaNs.
func loadStats(loads []float64) (hi, lo, sd float64) {
	hi, lo = math.Inf(-1), math.Inf(1)
	var sum, sum2 float64
	n := 0
	for _, x := range loads {
		if math.IsNaN(x) {
			continue
		}
		hi, lo = max(hi, x), min(lo, x)
		sum += x
		sum2 += x * x
		n++
	}
	mean := sum / float64(n)
	return hi, lo, math.Sqrt(max(0, sum2/float64(n)-mean*mean))
}

// diff builds alg for backends and sets mv's Moved and Excess from the keys
// whose owner differs from before: every one that moved, and those that
// neither left nor joined backend changed.
func diff(mv *moves, alg algorithm, backends []maglev.Backend, before, after []int32, hashes []uint64, index map[string]int32, changed int32) error {
	l, err := alg.build(backends)
	if err != nil {
		return fmt.Errorf("%s: %v", alg.name, err)
	}
	owners(after, l, hashes, index)
	moved, excess := 0, 0
	for i, b := range before {
		if a := after[i]; a != b {
			moved++
			if a != changed && b != changed {
				excess++
			}
		}
	}
	mv.Moved = float64(moved) / float64(len(hashes))
	mv.Excess = float64(excess) / float64(len(hashes))
	return nil
}
