package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/maglevlb/maglev"
)

// This file is the measurement: build every row, time its lookups, then
// route every request through it, with the base backends, with one added,
// with one removed and with that one failed, counting loads and moves.
//
// The keys are read once and every row sees each batch of them in turn,
// so a key file can be standard input and need not fit in memory: what is
// kept is the rows (four builds of each algorithm, alive at once), a
// counter per backend per row and the first timingKeys keys, on which
// lookups are timed.

// timingKeys is how many keys, from the start of the stream, lookups are
// timed on.
var timingKeys = 1_000_000

// batchSize is how many keys are hashed and routed at a time.
const batchSize = 1 << 14

// A row is one algorithm's routers and counts while the requests stream
// through.
type row struct {
	alg             algorithm
	res             result
	l               lookuper // built for the base backends, for timing
	base, add, rm   router
	fail            router     // the base with the removed backend failed (algorithm.fail)
	counts          []int64    // requests per base backend
	dst             [4][]int32 // one batch's backends: base, add, rm, fail
	addMoved, addEx int64
	rmMoved, rmEx   int64
	flMoved, flEx   int64
}

// compare runs the comparison c asks for with the rows algs (normally
// c.algorithms()) on the keys ks.
func compare(c *compareConfig, algs []algorithm, ks keyStream, p *progress) (*report, error) {
	// Backend i is c.backends[i]; the base set is the first n, the added
	// backend is n, and the removed one is c.removed.
	n := len(c.backends) - 1
	index := make(map[string]int32, n+1)
	for i, b := range c.backends {
		index[b.Name] = int32(i)
	}
	base := c.backends[:n]
	var total uint64
	for _, b := range base {
		total += uint64(b.Weight)
	}
	r := &report{
		N: n, Hash: c.hash, Seed: c.seed, KeySeed: c.keySeed, Weights: c.weights,
		BackendsFile: c.backendsFile, KeysFile: c.keysFile, Weighted: c.weighted, Zipf: c.zipf,
		Added:    c.backends[n].Name,
		Removed:  c.backends[c.removed].Name,
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:     runtime.NumCPU(),
		names:    names(base),
	}
	addW := uint64(c.backends[n].Weight)
	addIdeal := float64(addW) / float64(total+addW)
	removeIdeal := float64(c.backends[c.removed].Weight) / float64(total)

	var rows []*row
	for _, alg := range algs {
		rw, err := buildRow(c, alg, index, p)
		if err != nil {
			return nil, err
		}
		rows = append(rows, rw)
	}

	p.say("reading keys")
	sample, err := readSample(ks, timingKeys)
	if err != nil {
		return nil, err
	}
	if len(sample) == 0 {
		return nil, fmt.Errorf("%s: no keys", c.keysName)
	}
	for _, rw := range rows {
		p.say("%s: timing lookups", rw.alg.name)
		rw.res.LookupNs = timeLookups(rw.l, sample)
	}

	k, err := route(rows, c.h, sample, ks, int32(n), int32(c.removed), p)
	if err != nil {
		return nil, err
	}
	r.K = k
	r.NoiseFloor = math.Sqrt(float64(n) / float64(k))
	if c.zipf != 0 {
		r.HotKeyShare = 1 / zipfNorm(k, c.zipf)
	}
	for _, rw := range rows {
		r.Rows = append(r.Rows, rw.result(base, total, k, addIdeal, removeIdeal))
	}
	return r, nil
}

// buildRow builds the row of alg: its table of the base set, timed, and
// its routers of the base set, with a backend added, with one removed, and
// with one failed.
func buildRow(c *compareConfig, alg algorithm, index map[string]int32, p *progress) (*row, error) {
	n := len(c.backends) - 1
	base, added := c.backends[:n], c.backends
	removed := slices.Concat(base[:c.removed], base[c.removed+1:])
	rw := &row{alg: alg, counts: make([]int64, n)}
	rw.res = result{Name: alg.name, Algorithm: alg.kind, M: alg.m, Vnodes: alg.vnodes,
		BalanceFactor: alg.factor, InFlight: alg.inflight}
	p.say("%s: building", alg.name)
	l, err := measureBuild(&rw.res, alg, base)
	if err != nil {
		return nil, err
	}
	rw.l, rw.base = l, newRouter(alg, l, index)
	p.say("%s: building with a backend added and one removed", alg.name)
	if rw.add, err = buildRouter(alg, added, index); err != nil {
		return nil, err
	}
	if rw.rm, err = buildRouter(alg, removed, index); err != nil {
		return nil, err
	}
	if alg.fail == nil { // a failure is a removal, through a router of its own
		if rw.fail, err = buildRouter(alg, removed, index); err != nil {
			return nil, err
		}
		return rw, nil
	}
	f, err := alg.fail(l, c.backends[c.removed].Name)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", alg.name, err)
	}
	rw.fail = newRouter(alg, f, index)
	return rw, nil
}

// result returns the row's result once k keys were routed: the loads of
// the base set (of total weight) and the keys each change moved, against
// the ideal shares of the added and the removed backend.
func (rw *row) result(base []maglev.Backend, total uint64, k int, addIdeal, removeIdeal float64) result {
	res := rw.res
	res.loads = loads(rw.counts, base, total, k)
	res.LoadMax, res.LoadMin, res.LoadStddev = loadStats(res.loads)
	res.Add = moves{Moved: frac(rw.addMoved, k), Ideal: addIdeal, Excess: frac(rw.addEx, k)}
	res.Remove = moves{Moved: frac(rw.rmMoved, k), Ideal: removeIdeal, Excess: frac(rw.rmEx, k)}
	res.Fail = moves{Moved: frac(rw.flMoved, k), Ideal: removeIdeal, Excess: frac(rw.flEx, k)}
	if s, ok := rw.base.(interface{ spilled() int64 }); ok {
		f := frac(s.spilled(), k)
		res.Spilled = &f
	}
	return res
}

// frac returns n over k.
func frac(n int64, k int) float64 { return float64(n) / float64(k) }

// measureBuild builds alg for backends three times and sets res's build
// time (the fastest), the bytes the first build allocated and the heap
// what it built keeps. It returns what the first build built.
func measureBuild(res *result, alg algorithm, backends []maglev.Backend) (lookuper, error) {
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	var l lookuper
	for i := range 3 {
		start := time.Now()
		li, err := alg.build(backends)
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
	return l, nil
}

// buildRouter builds alg for backends and returns its router.
func buildRouter(alg algorithm, backends []maglev.Backend, index map[string]int32) (router, error) {
	l, err := alg.build(backends)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", alg.name, err)
	}
	return newRouter(alg, l, index), nil
}

// readSample returns up to n keys from the start of ks, copied.
func readSample(ks keyStream, n int) ([]string, error) {
	var sample []string
	for len(sample) < n {
		key, err := ks.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		sample = append(sample, string(key))
	}
	return sample, nil
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

// route sends every request, the sample's keys and then the rest of ks,
// through every row's four routers, in batches, and counts each row's
// load and moves; added and removed are the indices of the backend added
// and the one removed. It returns the number of requests.
func route(rows []*row, h maglev.Hasher, sample []string, ks keyStream, added, removed int32, p *progress) (int, error) {
	hashes := make([]uint64, 0, batchSize)
	for _, rw := range rows {
		for i := range rw.dst {
			rw.dst[i] = make([]int32, batchSize)
		}
	}
	k := 0
	last := time.Now()
	flush := func() {
		// The routers are independent: route the batch through all of them
		// side by side, then count.
		var wg sync.WaitGroup
		for _, rw := range rows {
			for i, rt := range [...]router{rw.base, rw.add, rw.rm, rw.fail} {
				wg.Go(func() { rt.route(rw.dst[i][:len(hashes)], hashes) })
			}
		}
		wg.Wait()
		for _, rw := range rows {
			rw.tally(len(hashes), added, removed)
		}
		k += len(hashes)
		hashes = hashes[:0]
		if time.Since(last) >= 100*time.Millisecond {
			last = time.Now()
			if f := ks.fraction(); f >= 0 {
				p.say("routing keys: %s (%.0f%% of the file read)", thousands(k), 100*f)
			} else {
				p.say("routing keys: %s", thousands(k))
			}
		}
	}
	for _, key := range sample {
		if hashes = append(hashes, h.HashString(key)); len(hashes) == batchSize {
			flush()
		}
	}
	for {
		key, err := ks.next() // io.EOF again if the sample took every key
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
		if hashes = append(hashes, h.Hash(key)); len(hashes) == batchSize {
			flush()
		}
	}
	flush()
	return k, nil
}

// tally adds the batch of n requests that rw's routers routed to its
// counts.
func (rw *row) tally(n int, added, removed int32) {
	before, afterAdd, afterRm, afterFail := rw.dst[0][:n], rw.dst[1][:n], rw.dst[2][:n], rw.dst[3][:n]
	for _, o := range before {
		rw.counts[o]++
	}
	moved, excess := countMoves(before, afterAdd, added)
	rw.addMoved += moved
	rw.addEx += excess
	moved, excess = countMoves(before, afterRm, removed)
	rw.rmMoved += moved
	rw.rmEx += excess
	moved, excess = countMoves(before, afterFail, removed)
	rw.flMoved += moved
	rw.flEx += excess
}

// countMoves returns how many requests go to a different backend after
// than before, and how many of those moved between two backends other than
// changed, the one that joined or left.
func countMoves(before, after []int32, changed int32) (moved, excess int64) {
	for i, b := range before {
		if a := after[i]; a != b {
			moved++
			if a != changed && b != changed {
				excess++
			}
		}
	}
	return moved, excess
}

// loads returns each backend's count of requests over its fair share of k
// requests, k·w/total; NaN for a drained backend.
func loads(counts []int64, backends []maglev.Backend, total uint64, k int) []float64 {
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

// zipfNorm returns the sum of 1/i^s for i from 1 to k: the most popular of
// k keys under Zipf(s) draws 1/zipfNorm(k, s) of the requests.
func zipfNorm(k int, s float64) float64 {
	sum := 0.0
	for i := k; i >= 1; i-- { // smallest terms first
		sum += math.Pow(float64(i), -s)
	}
	return sum
}
