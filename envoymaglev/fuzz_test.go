package envoymaglev

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/maglevlb/maglev"
)

// FuzzNew checks New against the plain port of Envoy's loop on arbitrary
// keys and weights: keys are the NUL-separated parts of keys, weights come
// from weights (1 past its end), and the table size is one of the test
// primes. Bad input must give the documented error, never a table.
func FuzzNew(f *testing.F) {
	// Seeds: Envoy's Basic hosts; hostnames with the inexact 1:3; one host;
	// keys that sort differently as signed and unsigned bytes; a duplicate;
	// an empty key; a zero weight; as many hosts as slots.
	f.Add([]byte("127.0.0.1:90\x00127.0.0.1:91\x00127.0.0.1:92\x00127.0.0.1:93\x00127.0.0.1:94\x00127.0.0.1:95"), []byte{}, uint8(0))
	f.Add([]byte("a.example\x00b.example"), []byte{1, 3}, uint8(5))
	f.Add([]byte("only"), []byte{7}, uint8(3))
	f.Add([]byte("\x7f\x00\x80\x00\xff"), []byte{3, 7, 2}, uint8(1))
	f.Add([]byte("x\x00y\x00x"), []byte{}, uint8(2))
	f.Add([]byte("x\x00\x00y"), []byte{}, uint8(2))
	f.Add([]byte("x\x00y"), []byte{1, 0}, uint8(2))
	f.Add([]byte("a\x00b\x00c\x00d\x00e\x00f\x00g"), []byte{1, 2, 3, 4, 5, 6, 7}, uint8(0))
	f.Fuzz(func(t *testing.T, keys, weights []byte, size uint8) {
		m := testPrimes[int(size)%10] // up to 2003 slots, to keep runs fast
		var hosts []Host
		if len(keys) > 0 {
			for i, k := range bytes.Split(keys, []byte{0}) {
				w := uint32(1)
				if i < len(weights) {
					w = uint32(weights[i])
				}
				hosts = append(hosts, Host{Key: string(k), Weight: w})
			}
		}
		tab, err := New(hosts, m)
		var want error
		sorted := slices.Clone(hosts)
		slices.SortFunc(sorted, func(a, b Host) int { return bytes.Compare([]byte(a.Key), []byte(b.Key)) })
		dup := false
		for i := 1; i < len(sorted); i++ {
			dup = dup || sorted[i].Key == sorted[i-1].Key
		}
		switch {
		case len(hosts) > m:
			want = maglev.ErrTooManyBackends
		case len(sorted) > 0 && sorted[0].Key == "":
			want = maglev.ErrEmptyName
		case dup:
			want = maglev.ErrDuplicateName
		case slices.ContainsFunc(hosts, func(h Host) bool { return h.Weight == 0 }):
			want = ErrZeroWeight
		}
		if want != nil {
			if !errors.Is(err, want) || tab != nil {
				t.Fatalf("%d hosts: New = %v, %v; want %v", len(hosts), tab, err, want)
			}
			return
		}
		if err != nil {
			t.Fatalf("%d hosts, M %d: %v", len(hosts), m, err)
		}
		if got, want := owners(tab), envoyPort(hosts, m); !slices.Equal(got, want) {
			t.Fatalf("%d hosts, M %d: New differs from the port", len(hosts), m)
		}
	})
}
