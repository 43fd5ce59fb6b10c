package k8slb

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// TestPool: allocations in a row from one pool, each with what it gives
// or the error it returns.
func TestPool(t *testing.T) {
	type step struct {
		key       string
		fams      []Family
		requested []netip.Addr
		required  bool
		release   bool       // Release(key) instead
		assign    netip.Addr // Assign(key, assign) instead
		want      []netip.Addr
		err       error
	}
	v4, v6, dual := []Family{IPv4}, []Family{IPv6}, []Family{IPv4, IPv6}
	for _, tc := range []struct {
		name  string
		pool  []netip.Prefix
		steps []step
	}{
		{"first free, network and broadcast left", prefixes("198.19.0.0/30"), []step{
			{key: "a", fams: v4, required: true, want: addrs("198.19.0.1")},
			{key: "b", fams: v4, required: true, want: addrs("198.19.0.2")},
			{key: "c", fams: v4, required: true, err: ErrExhausted},
			{key: "a", release: true},
			{key: "c", fams: v4, required: true, want: addrs("198.19.0.1")},
		}},
		{"prefixes in order, /31 and /32 whole", prefixes("198.19.0.8/31", "198.19.0.20/32", "198.19.0.0/29"), []step{
			{key: "a", fams: v4, required: true, want: addrs("198.19.0.8")},
			{key: "b", fams: v4, required: true, want: addrs("198.19.0.9")},
			{key: "c", fams: v4, required: true, want: addrs("198.19.0.20")},
			{key: "d", fams: v4, required: true, want: addrs("198.19.0.1")},
		}},
		{"requested", prefixes("198.19.0.0/28"), []step{
			{key: "a", fams: v4, requested: addrs("198.19.0.7"), required: true, want: addrs("198.19.0.7")},
			{key: "b", fams: v4, requested: addrs("198.19.0.7"), required: true, err: ErrTaken},
			{key: "b", fams: v4, requested: addrs("198.19.1.7"), required: true, err: ErrNotInPool},
			{key: "b", fams: v4, requested: addrs("198.19.0.15"), required: true, err: ErrNotInPool},
			{key: "b", fams: v4, required: true, want: addrs("198.19.0.1")},
			{key: "a", fams: v4, requested: addrs("198.19.0.7"), required: true, want: addrs("198.19.0.7")},
		}},
		{"family", prefixes("198.19.0.0/30", "2001:db8::/126"), []step{
			{key: "a", fams: v6, required: true, want: addrs("2001:db8::")},
			{key: "b", fams: v4, required: true, want: addrs("198.19.0.1")},
			{key: "c", fams: v6, requested: addrs("198.19.0.2", "2001:db8::3"), required: true, want: addrs("2001:db8::3")},
		}},
		{"no prefix of the family", prefixes("198.19.0.0/30"), []step{
			{key: "a", fams: v6, required: true, err: ErrNoFamilyPool},
			{key: "a", fams: dual, required: false, want: addrs("198.19.0.1")},
		}},
		{"dual stack", prefixes("198.19.0.0/31", "2001:db8::/127"), []step{
			{key: "a", fams: dual, required: true, want: addrs("198.19.0.0", "2001:db8::")},
			{key: "b", fams: []Family{IPv6, IPv4}, required: true, want: addrs("2001:db8::1", "198.19.0.1")},
			{key: "c", fams: dual, required: true, err: ErrExhausted},
			{key: "c", fams: dual, required: false, err: ErrExhausted},
			{key: "a", release: true},
			{key: "c", fams: dual, required: true, want: addrs("198.19.0.0", "2001:db8::")},
		}},
		{"required dual stack gives nothing when one family is out", prefixes("198.19.0.0/31", "2001:db8::/128"), []step{
			{key: "a", fams: v6, required: true, want: addrs("2001:db8::")},
			{key: "b", fams: dual, required: true, err: ErrExhausted},
			{key: "c", fams: v4, required: true, want: addrs("198.19.0.0")},
			{key: "b", fams: dual, required: false, want: addrs("198.19.0.1")},
		}},
		{"status first: assigned addresses are kept and skipped", prefixes("198.19.0.0/29"), []step{
			{key: "old", assign: netip.MustParseAddr("198.19.0.1"), want: addrs("198.19.0.1")},
			{key: "other", assign: netip.MustParseAddr("198.19.0.1"), err: ErrTaken},
			{key: "other", assign: netip.MustParseAddr("198.19.0.7"), err: ErrNotInPool},
			{key: "other", assign: netip.MustParseAddr("10.0.0.1"), err: ErrNotInPool},
			{key: "new", fams: v4, required: true, want: addrs("198.19.0.2")},
			{key: "old", fams: v4, required: true, want: addrs("198.19.0.1")},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool(tc.pool)
			for i, s := range tc.steps {
				var got []netip.Addr
				var err error
				switch {
				case s.release:
					p.Release(s.key)
					if len(p.Addrs(s.key)) != 0 {
						t.Fatalf("step %d: %s still holds %v", i, s.key, p.Addrs(s.key))
					}
					continue
				case s.assign.IsValid():
					err = p.Assign(s.key, s.assign)
					got = p.Addrs(s.key)
				default:
					got, err = p.Allocate(s.key, s.fams, s.requested, s.required)
				}
				if s.err != nil {
					if !errors.Is(err, s.err) {
						t.Fatalf("step %d (%s): err %v, want %v", i, s.key, err, s.err)
					}
					continue
				}
				if err != nil || !slices.Equal(got, s.want) {
					t.Fatalf("step %d (%s): %v, %v; want %v", i, s.key, got, err, s.want)
				}
				for _, a := range got {
					if p.Owner(a) != s.key {
						t.Fatalf("step %d: Owner(%v) = %q, want %q", i, a, p.Owner(a), s.key)
					}
				}
			}
		})
	}
}

// TestPoolDeterministic: two pools given the same Services in the same
// order give the same addresses, and a pool rebuilt from the first's
// addresses (a new leader reading status) gives the next Service the
// address the first would.
func TestPoolDeterministic(t *testing.T) {
	pool := prefixes("198.19.0.0/26", "2001:db8::/120")
	a, b := NewPool(pool), NewPool(pool)
	keys := []string{"ns/a", "ns/b", "ns/c", "other/a", "ns/d"}
	for i, k := range keys {
		fams := []Family{IPv4}
		if i%2 == 1 {
			fams = []Family{IPv6, IPv4}
		}
		x, errx := a.Allocate(k, fams, nil, true)
		y, erry := b.Allocate(k, fams, nil, true)
		if errx != nil || erry != nil || !slices.Equal(x, y) {
			t.Fatalf("%s: %v %v and %v %v", k, x, errx, y, erry)
		}
	}
	a.Release("ns/b")
	re := NewPool(pool)
	for _, k := range keys {
		for _, addr := range a.Addrs(k) {
			if err := re.Assign(k, addr); err != nil {
				t.Fatal(err)
			}
		}
	}
	x, _ := a.Allocate("ns/e", []Family{IPv6, IPv4}, nil, true)
	y, _ := re.Allocate("ns/e", []Family{IPv6, IPv4}, nil, true)
	if !slices.Equal(x, y) || !slices.Equal(x, addrs("2001:db8::", "198.19.0.2")) {
		t.Fatalf("after a rebuild: %v, the first pool %v; want [2001:db8:: 198.19.0.2], b's", y, x)
	}
}
