package httpmaglev

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"

	"github.com/maglevlb/maglev"
)

// retryBackends returns n backends on made-up addresses; nothing is sent
// to them.
func retryBackends(n int) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		bs[i] = Backend{URL: &url.URL{Scheme: "http", Host: fmt.Sprintf("10.%d.%d.%d:80", i/65536, i/256%256, i%256)}}
	}
	return bs
}

// TestRetryTargetIsWithout: for every backend of a snapshot, with one
// backend ejected already, the retry target of 2,000 random key hashes is
// the owner of the key's slot in the serving table without that backend
// (Table.Without), whether it owns the slot or a request spilled there;
// and once a backend's targets are filled, finding one does not allocate.
func TestRetryTargetIsWithout(t *testing.T) {
	tr, err := NewTransport(Config{Backends: retryBackends(12), TableSize: 4099})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close() }()
	// Eject one, as a passive ejection does, and publish.
	s0 := tr.cur.Load()
	gone := s0.ms.members[5]
	gone.life.phase.Store(&phase{ejected: ReasonConnect})
	tr.republish(rebuildEjection)
	s := tr.cur.Load()
	if s.healthy != 11 || s.serving[5] {
		t.Fatalf("%d serving after the ejection of %s", s.healthy, gone.b.Name)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, m := range s.ms.members {
		if !s.serving[i] {
			continue
		}
		want, err := s.table.Without(m.b.Name)
		if err != nil {
			t.Fatal(err)
		}
		for range 2000 {
			h := rng.Uint64()
			if got, w := s.retryTarget(h, i), want.LookupHashIndex(h); got != w {
				t.Fatalf("retry away from %s, hash %#x: backend %d, want %d", m.b.Name, h, got, w)
			}
		}
	}
	var h uint64
	for h = 0; s.table.LookupHashIndex(h) != 3; h++ {
	}
	allocs := testing.AllocsPerRun(1000, func() { _ = s.retryTarget(h, 3) })
	if allocs != 0 {
		t.Errorf("retryTarget allocates %v times a call once filled, want 0", allocs)
	}
}

var sinkIndex int

// BenchmarkRetryTarget measures where a retry away from a failed backend
// goes, at M = 65,537 over N equal backends, by each way there is to
// know: op=rebuild and op=kept are the way before issue 32, for the first
// retry away from a backend in a snapshot (one maglev.NewWeighted over the
// others) and for every later one (the slot's owner in that kept table);
// op=without is Table.Without on every retry (and the slot's owner in
// it); op=fill is the first retry now (one Without, and the owners of the
// failed backend's slots kept); op=cached is every later retry now (a
// binary search over them).
func BenchmarkRetryTarget(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 5000} {
		tr, err := NewTransport(Config{Backends: retryBackends(n)})
		if err != nil {
			b.Fatal(err)
		}
		s := tr.cur.Load()
		failed := n / 2
		name := s.table.Backend(failed)
		var rest []maglev.Backend
		for i, bk := range s.ms.backends {
			if i != failed {
				rest = append(rest, bk)
			}
		}
		// Hashes of keys on the failed backend's slots.
		rng := rand.New(rand.NewPCG(1, 2))
		var hashes []uint64
		for len(hashes) < 1024 {
			if h := rng.Uint64(); s.table.LookupHashIndex(h) == failed {
				hashes = append(hashes, h)
			}
		}
		b.Run(fmt.Sprintf("N=%d/op=rebuild", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t, err := maglev.NewWeighted(rest, maglev.DefaultSize, nil)
				if err != nil {
					b.Fatal(err)
				}
				sinkIndex = t.NumBackends()
			}
		})
		b.Run(fmt.Sprintf("N=%d/op=kept", n), func(b *testing.B) {
			kept, err := maglev.NewWeighted(rest, maglev.DefaultSize, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				// Backend j of kept is j of the table below failed, j+1 from it on.
				o := kept.LookupHashIndex(hashes[i%len(hashes)])
				if o >= failed {
					o++
				}
				sinkIndex = o
			}
		})
		b.Run(fmt.Sprintf("N=%d/op=without", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				w, err := s.table.Without(name)
				if err != nil {
					b.Fatal(err)
				}
				sinkIndex = w.LookupHashIndex(hashes[i%len(hashes)])
			}
		})
		b.Run(fmt.Sprintf("N=%d/op=fill", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rt := new(retryTargets)
				rt.fill(s.table, failed, s.counts[failed])
				sinkIndex = len(rt.slots)
			}
		})
		b.Run(fmt.Sprintf("N=%d/op=cached", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				sinkIndex = s.retryTarget(hashes[i%len(hashes)], failed)
			}
		})
		_ = tr.Close()
	}
}
