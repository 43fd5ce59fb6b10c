package envoymaglev

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/maglevlb/maglev"
)

// A Host is one endpoint of an Envoy cluster as Envoy's Maglev sees it.
//
// Key is the string Envoy hashes for the host: its address as Envoy prints
// it, "ip:port" ("[ip6]:port" for IPv6), or its hostname when the cluster
// sets use_hostname_for_hashing, or the endpoint's hash_key metadata
// (filter "envoy.lb") when it has one. Weight is its load_balancing_weight,
// 1 when the endpoint sets none; Envoy accepts only weights of 1 or more.
type Host struct {
	Key    string
	Weight uint32
}

var (
	// ErrZeroWeight means a host's weight is 0, which Envoy does not
	// accept (load_balancing_weight must be at least 1), so no Envoy table
	// has one. Elsewhere in the project weight 0 means drained (see
	// maglev.NewWeighted); here Envoy's rule decides, and a drained host is
	// left out of the list, as Envoy leaves out a host it does not balance
	// over.
	ErrZeroWeight = errors.New("envoymaglev: host weight is 0")

	// ErrTotalWeight means the hosts' weights add up to more than
	// 2^32 − 1, which Envoy rejects.
	ErrTotalWeight = errors.New("envoymaglev: total host weight exceeds 2^32 - 1")
)

// XXH64 returns the Hasher Envoy hashes with: 64-bit xxHash (XXH64) with
// seed 0, as github.com/cespare/xxhash/v2's Sum64 and Sum64String compute
// it. A request routed by a single header hash policy hashes to
// XXH64(value); a table built by New uses it for Lookup.
func XXH64() maglev.Hasher { return xxh64{} }

type xxh64 struct{}

func (xxh64) Hash(b []byte) uint64       { return xxhash.Sum64(b) }
func (xxh64) HashString(s string) uint64 { return xxhash.Sum64String(s) }

var _ maglev.Hasher = xxh64{}

// New builds the Maglev table Envoy builds for the given hosts and a table
// of tableSize slots (Envoy's table_size, 65537 by default), slot for slot.
// The table's Backends are the hosts' keys, sorted by byte order as Envoy
// sorts them; its Weights are the hosts' weights; its Hasher is XXH64, so
// that Lookup(v) is the host Envoy picks for a request whose hash is
// XXH64(v), as with a single header hash policy and header value v.
//
// Envoy's build, which New reproduces: each host's offset is
// XXH64(key, seed 0) mod M and its skip XXH64(key, seed 1) mod (M − 1) + 1;
// weights are normalized to w_i / Σw in double precision, and in rounds
// k = 1, 2, ... each host in key order takes a turn unless k·w_i (a double)
// is below its target, which starts at 0 and grows by the largest
// normalized weight at each turn. A turn claims the host's next empty slot,
// as in maglev.New. New computes every comparison in the same IEEE-754
// double arithmetic, so it agrees with Envoy even where rounding differs
// from exact arithmetic (see maglev.NewWeighted, whose rule is the exact
// one). Locality weighting is not modeled: New is Envoy's table for a
// cluster without locality_weighted_lb_config, built from the hosts Envoy
// balances over (the healthy ones, unless Envoy is in panic mode).
//
// A single host owns every slot, as Envoy routes every request to it; an
// empty list gives an empty table whose Lookup returns "", as Envoy picks
// no host.
//
// New returns an error wrapping maglev.ErrSize
// for a bad tableSize, maglev.ErrTooManyBackends if there are more hosts
// than slots, maglev.ErrEmptyName or maglev.ErrDuplicateName for an empty
// or repeated key, ErrZeroWeight for a weight of 0 and ErrTotalWeight if
// the weights add up to more than 2^32 − 1. Envoy also caps table_size at
// 5,000,011; New accepts sizes up to maglev.MaxSize.
//
// New takes O(M log M + n log n) time in expectation with equal weights,
// and O(M log n) more with unequal ones; it allocates O(M + n): 4 bytes a
// slot while building, and the table's 2 (up to 65,535 hosts) or 4 bytes a
// slot.
//
// New takes Envoy's own words for a host (its hash Key and its
// load_balancing_weight); NewTable is the same build for the root
// package's Backend, with the signature httpmaglev.Config.NewTable and
// grpcmaglev take. Both exist so that neither caller converts.
func New(hosts []Host, tableSize int) (*maglev.Table, error) {
	m := tableSize
	if err := maglev.CheckSize(m); err != nil {
		return nil, fmt.Errorf("envoymaglev: %w", err)
	}
	n := len(hosts)
	if n == 0 {
		return maglev.New(nil, m, xxh64{}) // with no hosts, maglev's table is Envoy's
	}
	if n > m {
		return nil, fmt.Errorf("envoymaglev: %w: %d hosts, %d slots", maglev.ErrTooManyBackends, n, m)
	}
	// The names are checked here, before the fill, although NewFromSlots
	// checks them again: the fill must not run on a duplicate or an empty
	// name, nor on a weight of 0, which NewFromSlots would take as drained.
	sorted := slices.Clone(hosts)
	slices.SortFunc(sorted, func(a, b Host) int { return strings.Compare(a.Key, b.Key) })
	if sorted[0].Key == "" {
		return nil, fmt.Errorf("envoymaglev: %w", maglev.ErrEmptyName)
	}
	for i := 1; i < n; i++ {
		if sorted[i].Key == sorted[i-1].Key {
			return nil, fmt.Errorf("envoymaglev: %w: %q", maglev.ErrDuplicateName, sorted[i].Key)
		}
	}
	var total uint64
	equal := true
	for _, h := range sorted {
		if h.Weight == 0 {
			return nil, fmt.Errorf("%w: host %q", ErrZeroWeight, h.Key)
		}
		total += uint64(h.Weight)
		equal = equal && h.Weight == sorted[0].Weight
	}
	if total > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d", ErrTotalWeight, total)
	}

	perms := make([]maglev.Permutation, n)
	d := xxhash.NewWithSeed(1)
	for i, h := range sorted {
		d.ResetWithSeed(1)
		_, _ = d.WriteString(h.Key) // a Digest's writes never fail
		perms[i] = maglev.Permutation{
			Offset: uint32(xxhash.Sum64String(h.Key) % uint64(m)),
			Skip:   uint32(d.Sum64()%uint64(m-1) + 1),
		}
	}
	slots := make([]uint32, m)
	if equal {
		// Equal weights are equal doubles, and every host is due in every
		// round: Envoy's loop is then plain round-robin, which is Fill.
		if err := maglev.Fill(slots, perms, make([]uint32, n)); err != nil {
			return nil, fmt.Errorf("envoymaglev: %w", err)
		}
	} else {
		fillWeighted(slots, perms, sorted, total)
	}
	backends := make([]maglev.Backend, n)
	for i, h := range sorted {
		backends[i] = maglev.Backend{Name: h.Key, Weight: h.Weight}
	}
	t, err := maglev.NewFromSlots(backends, slots, xxh64{})
	if err != nil {
		return nil, fmt.Errorf("envoymaglev: %w", err)
	}
	return t, nil
}

// fillWeighted fills slots by Envoy's weighted turns for the sorted hosts,
// whose weights add up to total, with permutations perms.
//
// Envoy visits every host in every round, which costs n checks a round
// for about M·W/Σw rounds (W the largest weight): cheap unless W is many
// times the mean weight. fillWeighted does the same where it is cheap
// (scanRounds), and otherwise keeps the hosts in a min-heap keyed by the
// round each is next due in, then index, which gives the same turns in the
// same order in O(log n) a turn (heapRounds).
func fillWeighted(slots []uint32, perms []maglev.Permutation, hosts []Host, total uint64) {
	f := newEnvoyFill(slots, perms, hosts, total)
	var hi uint32
	for _, h := range hosts {
		hi = max(hi, h.Weight)
	}
	if uint64(hi)*uint64(len(hosts)) <= scanSkew*total {
		f.scanRounds()
	} else {
		f.heapRounds()
	}
}

// newEnvoyFill returns the state of Envoy's fill before round 1, with every
// slot of slots empty.
func newEnvoyFill(slots []uint32, perms []maglev.Permutation, hosts []Host, total uint64) *envoyFill {
	n := len(hosts)
	f := &envoyFill{
		slots:  slots,
		perms:  perms,
		w:      make([]float64, n),
		target: make([]float64, n),
		cursor: make([]uint32, n),
	}
	for i, h := range hosts {
		// Envoy: weight * normalized_locality_weight (1.0) / sum, where the
		// product is exact.
		f.w[i] = float64(h.Weight) / float64(total)
		f.hi = max(f.hi, f.w[i])
		f.cursor[i] = perms[i].Offset
	}
	for s := range slots {
		slots[s] = math.MaxUint32
	}
	return f
}

// scanSkew is the largest ratio of the largest weight to the mean for
// which fillWeighted checks every host every round, as Envoy does: then
// the checks cost at most about scanSkew·M in all.
const scanSkew = 16

// envoyFill is the state of Envoy's weighted fill.
type envoyFill struct {
	slots  []uint32 // owner per slot, NoBackend while empty
	perms  []maglev.Permutation
	w      []float64 // normalized weights
	hi     float64   // the largest of w
	target []float64 // per host: the target Envoy compares k·w with
	cursor []uint32  // per host: the next slot of its sequence to try
}

// take lets host i take its turn: it claims the first empty slot of its
// sequence from its cursor on, and its target grows by the largest
// normalized weight.
func (f *envoyFill) take(i int) {
	m := uint32(len(f.slots))
	c, skip := f.cursor[i], f.perms[i].Skip
	for f.slots[c] != math.MaxUint32 {
		if c += skip; c >= m {
			c -= m
		}
	}
	f.slots[c] = uint32(i)
	if c += skip; c >= m {
		c -= m
	}
	f.cursor[i] = c
	f.target[i] += f.hi
}

// scanRounds runs Envoy's rounds as Envoy does: in round k every host is
// checked, and takes a turn if it is due.
func (f *envoyFill) scanRounds() {
	left := len(f.slots)
	for k := uint64(1); ; k++ {
		for i := range f.w {
			if !due(k, f.w[i], f.target[i]) {
				continue
			}
			f.take(i)
			if left--; left == 0 {
				return
			}
		}
	}
}

// heapRounds runs Envoy's rounds with a min-heap of the hosts by the round
// each is next due in, then index.
func (f *envoyFill) heapRounds() {
	q := make(turnQueue, len(f.w))
	for i := range q {
		q[i] = turn{round: 1, host: int32(i)} // every target starts at 0
	}
	for left := len(f.slots); left > 0; left-- {
		k, i := q[0].round, int(q[0].host)
		f.take(i)
		q[0].round = nextDue(k+1, f.w[i], f.target[i])
		q.down()
	}
}

// due reports whether a host of normalized weight w and target t takes a
// turn in round k: Envoy skips it while k·w < t. The conversion rounds the
// product to a double before the comparison, as C++ does.
func due(k uint64, w, t float64) bool { return !(float64(float64(k)*w) < t) }

// nextDue returns the first round k ≥ from in which a host of normalized
// weight w and target t is due. k·w rounded is nondecreasing in k, so the
// rounds it is due in are every round from the first on; the first is
// within a step or two of t/w.
func nextDue(from uint64, w, t float64) uint64 {
	if due(from, w, t) {
		return from
	}
	k := uint64(math.Ceil(t / w))
	if k <= from {
		k = from + 1
	}
	for !due(k, w, t) {
		k++
	}
	for k-1 > from && due(k-1, w, t) {
		k--
	}
	return k
}

// A turn is a host's place in fillWeighted's queue: the round it is next
// due in.
type turn struct {
	round uint64
	host  int32
}

// turnQueue is a binary min-heap of turns by round, then host index.
type turnQueue []turn

func (q turnQueue) less(a, b int) bool {
	return q[a].round < q[b].round || q[a].round == q[b].round && q[a].host < q[b].host
}

// down restores the heap after q[0] grew.
func (q turnQueue) down() {
	i := 0
	for {
		l := 2*i + 1
		if l >= len(q) {
			return
		}
		j := l
		if r := l + 1; r < len(q) && q.less(r, l) {
			j = r
		}
		if !q.less(j, i) {
			return
		}
		q[i], q[j] = q[j], q[i]
		i = j
	}
}

// NewTable is New for the root package's Backend type, with each backend's
// Name as a host Key: it has the signature of httpmaglev.Config.NewTable,
// so that an HTTP client or proxy builds Envoy's table, and, since the table
// hashes with XXH64, routes each request key as Envoy's header hash policy
// does:
//
//	httpmaglev.Config{NewTable: envoymaglev.NewTable, Key: httpmaglev.HeaderKey("x-user"), ...}
//
// Errors and costs are New's.
func NewTable(backends []maglev.Backend, tableSize int) (*maglev.Table, error) {
	hosts := make([]Host, len(backends))
	for i, b := range backends {
		hosts[i] = Host{Key: b.Name, Weight: b.Weight}
	}
	return New(hosts, tableSize)
}
