package memcachemaglev_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/memcachemaglev"
)

// keys returns n distinct memcache keys.
func keys(prefix string, n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("%s:%06d", prefix, i)
	}
	return k
}

// TestPickServerIsLookup checks that PickServer returns the address of the
// key's owner in maglev.New(servers, maglev.DefaultSize, nil), for TCP
// addresses and Unix socket paths, whatever the order of the list.
func TestPickServerIsLookup(t *testing.T) {
	servers := []string{"10.0.0.1:11211", "10.0.0.2:11211", "/var/run/memcached.sock", "[::1]:11212", "10.0.0.3:11211"}
	want, err := maglev.New(servers, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantNet := map[string]string{
		"10.0.0.1:11211": "tcp", "10.0.0.2:11211": "tcp", "/var/run/memcached.sock": "unix",
		"[::1]:11212": "tcp", "10.0.0.3:11211": "tcp",
	}
	reversed := []string{servers[4], servers[3], servers[2], servers[1], servers[0]}
	for _, list := range [][]string{servers, reversed} {
		s, err := memcachemaglev.New(list...)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, key := range keys("k", 5000) {
			addr, err := s.PickServer(key)
			if err != nil {
				t.Fatalf("PickServer(%q): %v", key, err)
			}
			owner := want.Lookup(key)
			if addr.String() != owner || addr.Network() != wantNet[owner] {
				t.Fatalf("PickServer(%q) = %s %s, want %s %s", key, addr.Network(), addr, wantNet[owner], owner)
			}
			seen[owner]++
		}
		if len(seen) != len(servers) {
			t.Errorf("5000 keys went to %d servers of %d: %v", len(seen), len(servers), seen)
		}
		if s.Table().Diff(want) != 0 {
			t.Errorf("Table differs from maglev.New's in %d slots", s.Table().Diff(want))
		}
	}
}

// TestEach checks that Each visits every server once, in table order, and
// stops at the first error.
func TestEach(t *testing.T) {
	servers := []string{"10.0.0.3:11211", "10.0.0.1:11211", "/tmp/mc.sock"}
	s, err := memcachemaglev.New(servers...)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := s.Each(func(a net.Addr) error { got = append(got, a.String()); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := s.Table().Backends(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Each visited %q, want the table's order %q", got, want)
	}
	stop := errors.New("stop")
	n := 0
	if err := s.Each(func(net.Addr) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("Each with an error: returned %v after %d calls, want %v after 1", err, n, stop)
	}
}

// TestNoServers checks the zero Selector and an empty list: PickServer
// returns memcache.ErrNoServers and Each calls nothing.
func TestNoServers(t *testing.T) {
	empty, err := memcachemaglev.New()
	if err != nil {
		t.Fatalf("New(): %v", err)
	}
	emptied, err := memcachemaglev.New("10.0.0.1:11211")
	if err != nil {
		t.Fatal(err)
	}
	if err := emptied.SetServers(); err != nil {
		t.Fatalf("SetServers(): %v", err)
	}
	for name, s := range map[string]*memcachemaglev.Selector{"zero": {}, "New()": empty, "SetServers()": emptied} {
		if a, err := s.PickServer("k"); !errors.Is(err, memcache.ErrNoServers) || a != nil {
			t.Errorf("%s: PickServer = %v, %v; want nil, memcache.ErrNoServers", name, a, err)
		}
		if err := s.Each(func(net.Addr) error { return errors.New("called") }); err != nil {
			t.Errorf("%s: Each called its function: %v", name, err)
		}
	}
	if (&memcachemaglev.Selector{}).Table() != nil {
		t.Error("the zero Selector's Table is not nil")
	}
	if n := emptied.Table().NumBackends(); n != 0 {
		t.Errorf("after SetServers(), Table has %d backends", n)
	}
	var zero memcachemaglev.Selector
	if err := zero.SetServers("10.0.0.1:11211"); err != nil {
		t.Fatal(err)
	}
	if a, err := zero.PickServer("k"); err != nil || a.String() != "10.0.0.1:11211" {
		t.Errorf("zero Selector after SetServers: PickServer = %v, %v", a, err)
	}
}

// TestBadServers checks each kind of bad list: the error's prefix, what
// errors.Is matches, and that the previous servers stay. (A server listed
// twice is not bad: it weighs 2, see TestRepeatsAddWeight.)
func TestBadServers(t *testing.T) {
	good := []string{"10.0.0.1:11211", "10.0.0.2:11211"}
	many := make([]string, maglev.DefaultSize+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.%d.%d:11211", i>>16, i>>8&255, i&255)
	}
	for _, tc := range []struct {
		name    string
		servers []string
		want    []error
	}{
		{"empty name", []string{"10.0.0.1:11211", ""}, []error{maglev.ErrEmptyName}},
		{"no port", []string{"10.0.0.1:11211", "127.0.0.1"}, []error{memcachemaglev.ErrResolve, new(net.AddrError)}},
		{"bad port", []string{"127.0.0.1:99999"}, []error{memcachemaglev.ErrResolve}},
		{"too many", many, []error{maglev.ErrTooManyBackends}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := memcachemaglev.New(tc.servers...); err == nil || s != nil {
				t.Errorf("New = %v, %v; want nil and an error", s, err)
			}
			s, err := memcachemaglev.New(good...)
			if err != nil {
				t.Fatal(err)
			}
			before := s.Table()
			err = s.SetServers(tc.servers...)
			if err == nil {
				t.Fatal("SetServers succeeded")
			}
			if !strings.HasPrefix(err.Error(), "memcachemaglev: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			for _, w := range tc.want {
				var match bool
				if ae, ok := w.(*net.AddrError); ok {
					match = errors.As(err, &ae)
				} else {
					match = errors.Is(err, w)
				}
				if !match {
					t.Errorf("error %q does not match %v", err, w)
				}
			}
			if s.Table() != before {
				t.Error("a failed SetServers changed the table")
			}
			for _, key := range keys("k", 100) {
				if a, err := s.PickServer(key); err != nil || a.String() != before.Lookup(key) {
					t.Fatalf("after a failed SetServers, PickServer(%q) = %v, %v; want %s", key, a, err, before.Lookup(key))
				}
			}
		})
	}
}

// TestAllocs checks that PickServer and Each do not allocate: with the
// default Options, and with weights (repeats and explicit, a drained
// server), a seed (which takes Lookup's path for other hashers) and a
// table size other than the default.
func TestAllocs(t *testing.T) {
	plain, err := memcachemaglev.New("10.0.0.1:11211", "10.0.0.2:11211", "/var/run/memcached.sock")
	if err != nil {
		t.Fatal(err)
	}
	repeats, err := memcachemaglev.New("10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.1:11211")
	if err != nil {
		t.Fatal(err)
	}
	weighted, err := memcachemaglev.NewWeighted([]memcachemaglev.Server{
		{Addr: "10.0.0.1:11211", Weight: 3}, {Addr: "10.0.0.2:11211", Weight: 0}, {Addr: "/var/run/memcached.sock", Weight: 1},
	}, memcachemaglev.Options{TableSize: 10007, Seed: 0x5eed})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*memcachemaglev.Selector{"New": plain, "repeats": repeats, "NewWeighted": weighted} {
		ks := keys("user", 64)
		i := 0
		var sink net.Addr
		if n := testing.AllocsPerRun(1000, func() {
			sink, _ = s.PickServer(ks[i%len(ks)])
			i++
		}); n != 0 {
			t.Errorf("%s: PickServer: %v allocations, want 0", name, n)
		}
		count := 0
		f := func(a net.Addr) error { count++; sink = a; return nil }
		if n := testing.AllocsPerRun(1000, func() { _ = s.Each(f) }); n != 0 {
			t.Errorf("%s: Each: %v allocations, want 0", name, n)
		}
		if count == 0 || sink == nil {
			t.Errorf("%s: Each called nothing", name)
		}
		// The client calls String and Network on every operation.
		a, _ := s.PickServer("k")
		var str string
		if n := testing.AllocsPerRun(1000, func() { str = a.String(); str = a.Network() }); n != 0 || (str != "tcp" && str != "unix") {
			t.Errorf("%s: the address's String and Network: %v allocations, want 0", name, n)
		}
	}
}

// TestConcurrentSetServers checks, under the race detector, that picks
// made while SetServers swaps between two lists return the key's server in
// one of the two tables.
func TestConcurrentSetServers(t *testing.T) {
	a := []string{"10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211"}
	b := []string{"10.0.0.1:11211", "10.0.0.3:11211", "10.0.0.4:11211", "/var/run/memcached.sock"}
	ta, err := maglev.New(a, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := maglev.New(b, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := memcachemaglev.New(a...)
	if err != nil {
		t.Fatal(err)
	}
	ks := keys("c", 2000)
	done := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				k := ks[i%len(ks)]
				addr, err := s.PickServer(k)
				if err != nil || (addr.String() != ta.Lookup(k) && addr.String() != tb.Lookup(k)) {
					errs <- fmt.Errorf("PickServer(%q) = %v, %v; want %s or %s", k, addr, err, ta.Lookup(k), tb.Lookup(k))
					return
				}
				n := 0
				_ = s.Each(func(net.Addr) error { n++; return nil })
				if n != len(a) && n != len(b) {
					errs <- fmt.Errorf("Each visited %d servers", n)
					return
				}
			}
		})
	}
	for i := range 20 {
		list := a
		if i%2 == 0 {
			list = b
		}
		if err := s.SetServers(list...); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
