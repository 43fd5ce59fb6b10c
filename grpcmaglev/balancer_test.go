package grpcmaglev

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/maglevlb/maglev"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/ringhash"
)

func endpointAt(addrs ...string) resolver.Endpoint {
	var e resolver.Endpoint
	for _, a := range addrs {
		e.Addresses = append(e.Addresses, resolver.Address{Addr: a})
	}
	return e
}

// TestCheckEndpoints: a resolver update is rejected for an endpoint with no
// address, and, with maglev.NewWeighted's errors, for names that cannot
// name a table; exact duplicate endpoints are one endpoint, as
// endpointsharding makes them.
func TestCheckEndpoints(t *testing.T) {
	a, b, c := endpointAt("10.0.0.1:80"), endpointAt("10.0.0.2:80"), endpointAt("10.0.0.3:80")
	for _, tc := range []struct {
		name string
		es   []resolver.Endpoint
		size int
		is   error // nil: accepted
		text string
	}{
		{"none", nil, 65537, nil, ""},
		{"distinct", []resolver.Endpoint{a, b, c}, 65537, nil, ""},
		{"exact duplicates", []resolver.Endpoint{a, b, endpointAt("10.0.0.1:80")}, 2, nil, ""},
		{"as many as slots", []resolver.Endpoint{a, b}, 2, nil, ""},
		{"no address", []resolver.Endpoint{a, {}}, 65537, errNoAddress, "endpoint 1: endpoint has no address"},
		{"empty name", []resolver.Endpoint{a, endpointAt("")}, 65537, maglev.ErrEmptyName, "empty backend name"},
		{"one hash key", []resolver.Endpoint{ringhash.SetHashKey(a, "k"), ringhash.SetHashKey(b, "k")}, 65537, maglev.ErrDuplicateName, `duplicate backend name: "k"`},
		{"hash key as an address", []resolver.Endpoint{a, ringhash.SetHashKey(b, "10.0.0.1:80")}, 65537, maglev.ErrDuplicateName, `"10.0.0.1:80"`},
		{"first address twice", []resolver.Endpoint{endpointAt("10.0.0.1:80", "10.0.0.9:80"), a}, 65537, maglev.ErrDuplicateName, `"10.0.0.1:80"`},
		{"more than slots", []resolver.Endpoint{a, b, c}, 2, maglev.ErrTooManyBackends, "3 backends, 2 slots"},
	} {
		err := checkEndpoints(tc.es, tc.size)
		switch {
		case tc.is == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.is != nil && (!errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.text)):
			t.Errorf("%s: err %v; want one wrapping %v that says %q", tc.name, err, tc.is, tc.text)
		}
	}
}

// TestCheckEndpointsFillsNoSlot: checking a resolver update at the largest
// table size allocates far less than the table's 32 MiB of slots: the
// names are checked, and no table is filled.
func TestCheckEndpointsFillsNoSlot(t *testing.T) {
	es := []resolver.Endpoint{endpointAt("10.0.0.1:80"), endpointAt("10.0.0.2:80")}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := checkEndpoints(es, maglev.MaxSize)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("checkEndpoints at M = %d allocated %d bytes; want no table's slots", maglev.MaxSize, n)
	}
}

// TestRecordFailuresAllocs: updating the records for children that all
// have one allocates only the map's lookups of them (grpc's EndpointMap
// encodes an endpoint's addresses on each lookup) and the list of usable
// endpoints it returns, nothing per endpoint; records of removed endpoints
// are still dropped.
func TestRecordFailuresAllocs(t *testing.T) {
	b, kids := testBalancer(t, 100, defaultConfig())
	update(t, b, kids)
	lookups := testing.AllocsPerRun(100, func() {
		for _, cs := range b.children {
			b.records.Get(cs.Endpoint)
		}
	})
	if got := testing.AllocsPerRun(100, func() { b.recordFailuresLocked() }); got != lookups+1 {
		t.Errorf("recordFailuresLocked over %d children: %v allocations; want the %v of their lookups and 1 for the usable list", len(b.children), got, lookups)
	}
	update(t, b, kids[:60])
	if n := b.records.Len(); n != 60 {
		t.Fatalf("%d records for 60 endpoints", n)
	}
}
