package envoymaglev

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/maglevlb/maglev"
)

// hostsOf returns hosts with the given keys and weights (1 if weights is
// nil).
func hostsOf(keys []string, weights []uint32) []Host {
	hosts := make([]Host, len(keys))
	for i, k := range keys {
		hosts[i] = Host{Key: k, Weight: 1}
		if weights != nil {
			hosts[i].Weight = weights[i]
		}
	}
	return hosts
}

// The expectations below are Envoy's, from
// test/extensions/load_balancing_policies/maglev/maglev_lb_test.cc in
// github.com/envoyproxy/envoy, test fixture MaglevLoadBalancerTest. Each
// lists, for slot i of the table, the index of its host in the test's host
// list; the tests route a request of hash i to slot i mod M.
var envoyCases = []struct {
	test     string   // Envoy's test name
	keys     []string // the keys Envoy hashes, in the test's host order
	weights  []uint32 // nil: all 1
	m        int
	expected []int // expected_assignments
	min, max int   // min_entries_per_host, max_entries_per_host
}{
	{
		test:     "Basic", // also BasicStability and BasicWithRetryHostPredicate
		keys:     []string{"127.0.0.1:90", "127.0.0.1:91", "127.0.0.1:92", "127.0.0.1:93", "127.0.0.1:94", "127.0.0.1:95"},
		m:        7,
		expected: []int{2, 4, 0, 1, 5, 0, 3},
		min:      1, max: 2,
	},
	{
		// Hosts with hostnames "90" .. "95" and use_hostname_for_hashing;
		// BasicWithMetadataHashKey expects the same with hash_key
		// metadata "90" .. "95".
		test:     "BasicWithHostName",
		keys:     []string{"90", "91", "92", "93", "94", "95"},
		m:        7,
		expected: []int{2, 5, 0, 3, 4, 1, 0},
		min:      1, max: 2,
	},
	{
		test:     "Weighted",
		keys:     []string{"127.0.0.1:90", "127.0.0.1:91"},
		weights:  []uint32{1, 2},
		m:        17,
		expected: []int{1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1},
		min:      6, max: 11,
	},
	{
		// Locality weights 1:1, one host per locality with host weights 1
		// and 2: both normalized weights are 1 × 0.5 / 1 and 2 × 0.5 / 2,
		// that is 0.5, so it is the table of two hosts of equal weight.
		test:     "LocalityWeightedSameLocalityWeights",
		keys:     []string{"127.0.0.1:90", "127.0.0.1:91"},
		m:        17,
		expected: []int{1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1},
		min:      8, max: 9,
	},
	{
		// Locality weights 8:0:2 over :90 (weight 1), :92 (weight 3) and
		// :91 (weight 2): :92's locality has weight 0 and is left out,
		// :90's normalized weight is 1 × (8/10) / 1 and :91's 2 × (2/10) / 2,
		// the doubles nearest 0.8 and 0.2, which are also 4/5 and 1/5:
		// hosts of weights 4 and 1.
		test:     "LocalityWeightedDifferentLocalityWeights",
		keys:     []string{"127.0.0.1:90", "127.0.0.1:91"},
		weights:  []uint32{4, 1},
		m:        17,
		expected: []int{1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0},
		min:      4, max: 13,
	},
}

// TestEnvoyExpectations checks New against Envoy's own test expectations,
// through every way to read the table.
func TestEnvoyExpectations(t *testing.T) {
	for _, c := range envoyCases {
		t.Run(c.test, func(t *testing.T) {
			tab, err := New(hostsOf(c.keys, c.weights), c.m)
			if err != nil {
				t.Fatal(err)
			}
			for s, want := range c.expected {
				if got := tab.LookupHash(uint64(s)); got != c.keys[want] {
					t.Errorf("slot %d: %s, Envoy %s", s, got, c.keys[want])
				}
			}
			// Envoy's tests pick with hashes 0 .. 3M-1.
			for h := range uint64(3 * c.m) {
				if got, want := tab.LookupHash(h), c.keys[c.expected[h%uint64(c.m)]]; got != want {
					t.Errorf("hash %d: %s, Envoy %s", h, got, want)
				}
			}
			counts := tab.Counts()
			if lo, hi := slices.Min(counts), slices.Max(counts); lo != c.min || hi != c.max {
				t.Errorf("entries per host %d .. %d, Envoy %d .. %d", lo, hi, c.min, c.max)
			}
			sorted := slices.Sorted(slices.Values(c.keys))
			if !slices.Equal(tab.Backends(), sorted) {
				t.Errorf("backends %v, want %v", tab.Backends(), sorted)
			}
		})
	}
}

// TestEnvoyLopsided is Envoy's LocalityWeightedLopsided: 1,024 hosts
// 127.0.0.1:0 .. :1023, the first alone in a locality of weight 127 and
// the rest in one of weight 1, at M = 65537. Envoy expects each light host
// to own one slot and the heavy one the rest. The normalized weights,
// 127/128 and (1/128)/1023, are exactly those of integer weights 127·1023
// and 1 (total 128·1023), since dividing by 128 is exact.
func TestEnvoyLopsided(t *testing.T) {
	hosts := make([]Host, 1024)
	for i := range hosts {
		hosts[i] = Host{Key: fmt.Sprintf("127.0.0.1:%d", i), Weight: 1}
	}
	hosts[0].Weight = 127 * 1023
	tab, err := New(hosts, 65537)
	if err != nil {
		t.Fatal(err)
	}
	counts := tab.Counts()
	for i, name := range tab.Backends() {
		want := 1
		if name == "127.0.0.1:0" {
			want = 65537 - 1023
		}
		if counts[i] != want {
			t.Errorf("%s owns %d slots, Envoy %d", name, counts[i], want)
		}
	}
}

// TestEnvoySingleAndNone checks Envoy's SingleHost (M = 7), WeightedSingleHost
// (weight 7, M = 17) and NoHost (M = 7): a single host gets every request,
// no host none.
func TestEnvoySingleAndNone(t *testing.T) {
	for _, c := range []struct {
		w uint32
		m int
	}{{1, 7}, {7, 17}} {
		tab, err := New([]Host{{Key: "127.0.0.1:90", Weight: c.w}}, c.m)
		if err != nil {
			t.Fatal(err)
		}
		for h := range uint64(3 * c.m) {
			if got := tab.LookupHash(h); got != "127.0.0.1:90" {
				t.Errorf("weight %d, M %d: hash %d picks %q", c.w, c.m, h, got)
			}
		}
		if got := tab.Lookup("any"); got != "127.0.0.1:90" {
			t.Errorf("weight %d, M %d: Lookup picks %q", c.w, c.m, got)
		}
	}
	for _, hosts := range [][]Host{nil, {}} {
		tab, err := New(hosts, 7)
		if err != nil {
			t.Fatal(err)
		}
		if tab.NumBackends() != 0 || tab.Size() != 7 || tab.Lookup("any") != "" || tab.LookupHash(3) != "" {
			t.Errorf("no hosts: Len %d, Size %d, Lookup %q", tab.NumBackends(), tab.Size(), tab.Lookup("any"))
		}
	}
}

// TestErrors checks every error New returns, including Envoy's
// NoPrimeNumber (table size 8).
func TestErrors(t *testing.T) {
	ab := []Host{{"a", 1}, {"b", 1}}
	cases := []struct {
		name  string
		hosts []Host
		m     int
		want  error
	}{
		{"NoPrimeNumber", ab, 8, maglev.ErrSize},
		{"size 0", ab, 0, maglev.ErrSize},
		{"size -7", ab, -7, maglev.ErrSize},
		{"size 1", nil, 1, maglev.ErrSize},
		{"too large", ab, maglev.MaxSize + 2, maglev.ErrSize},
		{"more hosts than slots", hostsOf([]string{"a", "b", "c", "d"}, nil), 3, maglev.ErrTooManyBackends},
		{"empty key", []Host{{"a", 1}, {"", 1}}, 7, maglev.ErrEmptyName},
		{"duplicate key", []Host{{"a", 1}, {"b", 1}, {"a", 2}}, 7, maglev.ErrDuplicateName},
		{"weight 0", []Host{{"a", 1}, {"b", 0}}, 7, ErrZeroWeight},
		{"single host of weight 0", []Host{{"a", 0}}, 7, ErrZeroWeight},
		{"total weight 2^32", []Host{{"a", 1 << 31}, {"b", 1 << 31}}, 7, ErrTotalWeight},
	}
	for _, c := range cases {
		tab, err := New(c.hosts, c.m)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			continue
		}
		if tab != nil {
			t.Errorf("%s: a table with the error", c.name)
		}
		if !strings.HasPrefix(err.Error(), "envoymaglev: ") {
			t.Errorf("%s: error %q lacks the package prefix", c.name, err)
		}
	}
	// The largest total Envoy accepts.
	if _, err := New([]Host{{"a", 1<<32 - 2}, {"b", 1}}, 7); err != nil {
		t.Errorf("total weight 2^32 - 1: %v", err)
	}
}

// TestHasher checks XXH64 against the published XXH64 values and checks
// that every lookup path of an Envoy table hashes with it: the table's
// hasher is not one of the root package's built-in ones, so lookups take
// the general path.
func TestHasher(t *testing.T) {
	// XXH64 with seed 0 of "" and of "a", from the xxHash reference
	// (its sanity tests) and github.com/cespare/xxhash/v2's tests.
	for _, v := range []struct {
		in   string
		want uint64
	}{{"", 0xef46db3751d8e999}, {"a", 0xd24ec4f1a98c6e5b}} {
		h := XXH64()
		if got := h.HashString(v.in); got != v.want {
			t.Errorf("XXH64 HashString(%q) = %#x, want %#x", v.in, got, v.want)
		}
		if got := h.Hash([]byte(v.in)); got != v.want {
			t.Errorf("XXH64 Hash(%q) = %#x, want %#x", v.in, got, v.want)
		}
	}
	tab, err := New(hostsOf([]string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"}, []uint32{1, 2, 3, 4}), 65537)
	if err != nil {
		t.Fatal(err)
	}
	if got := tab.Hasher().HashString("x"); got != xxhash.Sum64String("x") {
		t.Errorf("the table's hasher is not XXH64: %#x", got)
	}
	for k := range 2000 {
		v := fmt.Sprintf("user-%d", k)
		h := xxhash.Sum64String(v)
		want := tab.LookupHash(uint64(int(h % 65537)))
		if got := tab.Lookup(v); got != want {
			t.Fatalf("Lookup(%q) = %s, slot XXH64 mod M holds %s", v, got, want)
		}
		if got := tab.LookupBytes([]byte(v)); got != want {
			t.Fatalf("LookupBytes(%q) = %s, want %s", v, got, want)
		}
		if got := tab.LookupIndex(v); tab.Backends()[got] != want {
			t.Fatalf("LookupIndex(%q) = %d, want %s", v, got, want)
		}
		if k%50 == 0 {
			got := slices.Collect(tab.Candidates(v))
			if wantC := slices.Collect(tab.CandidatesHash(h)); !slices.Equal(got, wantC) || tab.Backends()[got[0]] != want {
				t.Fatalf("Candidates(%q) = %v, CandidatesHash(XXH64) = %v, Lookup %s", v, got, wantC, want)
			}
			if gotB := slices.Collect(tab.CandidatesBytes([]byte(v))); !slices.Equal(gotB, got) {
				t.Fatalf("CandidatesBytes(%q) = %v, Candidates %v", v, gotB, got)
			}
		}
	}
}

// TestOrder checks that the order of the hosts does not matter.
func TestOrder(t *testing.T) {
	hosts := hostsOf([]string{"c:1", "a:1", "b:1", "e:1", "d:1"}, []uint32{3, 1, 2, 1, 5})
	want, err := New(hosts, 1009)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		slices.Reverse(hosts)
		hosts = append(hosts[1:], hosts[0])
		got, err := New(hosts, 1009)
		if err != nil {
			t.Fatal(err)
		}
		if d := got.Diff(want); d != 0 || !slices.Equal(got.Weights(), want.Weights()) {
			t.Fatalf("order %v: %d slots differ", hosts, d)
		}
	}
}

// TestLookupAllocs checks that a lookup does not allocate.
func TestLookupAllocs(t *testing.T) {
	tab, err := New(hostsOf([]string{"a", "b", "c"}, []uint32{1, 2, 3}), 65537)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("some-key")
	if n := testing.AllocsPerRun(100, func() { _ = tab.Lookup("some-key"); _ = tab.LookupBytes(key) }); n != 0 {
		t.Errorf("Lookup allocates %.1f times", n)
	}
}
