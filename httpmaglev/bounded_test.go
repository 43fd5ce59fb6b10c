package httpmaglev_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
)

// TestBoundedZipf sends keys drawn Zipf(1.1) from 16 concurrent clients
// to 4 weighted backends with BalanceFactor 1.25, and checks at the
// servers that no backend ever held more than its capacity
// ceil(F × L × w/Σw), L at most the requests in flight at the clients,
// plus the placements Stats counts as forced; that hot keys spilled; and
// that no lease is left once every response body is closed.
func TestBoundedZipf(t *testing.T) {
	const factor, clients, requests = 1.25, 16, 800
	weights := []uint32{1, 1, 2, 4}
	servers := startServers(t, len(weights))
	for _, s := range servers {
		s.hold = time.Millisecond
	}
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), BalanceFactor: factor}, servers, weights...)
	client := &http.Client{Transport: tr}

	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, 999)
	ks := make([]string, requests)
	for i := range ks {
		ks[i] = fmt.Sprintf("user-%d", z.Uint64())
	}
	var next, inClients, clientPeak atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ks) {
					return
				}
				// The count rises before RoundTrip takes a lease and falls
				// after the body's Close releases it: at least L.
				n := inClients.Add(1)
				for p := clientPeak.Load(); n > p && !clientPeak.CompareAndSwap(p, n); p = clientPeak.Load() {
				}
				status, _, err := get(t, client, "http://x", http.MethodGet, ks[i])
				inClients.Add(-1)
				if err != nil || status != http.StatusOK {
					failed.Store(fmt.Sprintf("key %s: %d %v", ks[i], status, err))
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
	st := tr.State()
	if st.InFlight != 0 {
		t.Errorf("%d leases left after every body was closed, want 0", st.InFlight)
	}
	for _, b := range st.Backends {
		if b.InFlight != 0 {
			t.Errorf("backend %s: %d in flight after the run, want 0", b.Name, b.InFlight)
		}
	}
	if st.Spilled == 0 {
		t.Error("no request spilled under Zipf(1.1) keys")
	}
	if st.Requests != requests {
		t.Errorf("%d requests routed, want %d", st.Requests, requests)
	}
	var sum uint32
	for _, w := range weights {
		sum += w
	}
	L := float64(clientPeak.Load())
	for i, s := range servers {
		bound := int64(math.Ceil(factor*L*float64(weights[i])/float64(sum))) + int64(st.Forced)
		if p := s.peak.Load(); p > bound {
			t.Errorf("backend %s (weight %d) held %d at once, bound ceil(%v × %v × %d/%d) + %d forced = %d",
				s.name, weights[i], p, factor, L, weights[i], sum, st.Forced, bound)
		}
	}
}

// TestBoundedOff checks that without a balance factor every key goes to
// its owner under concurrent load, and nothing is counted.
func TestBoundedOff(t *testing.T) {
	servers := startServers(t, 3)
	for _, s := range servers {
		s.hold = time.Millisecond
	}
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)}, servers)
	want := table(t, "s0", "s1", "s2")
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for i := range 30 {
				k := fmt.Sprintf("user-%d", (c*7+i)%5) // five hot keys
				if _, got, err := get(t, client, "http://x", http.MethodGet, k); err != nil || got != want.Lookup(k) {
					t.Errorf("key %q reached %s, %v; want %s", k, got, err, want.Lookup(k))
					return
				}
			}
		})
	}
	wg.Wait()
	if st := tr.State(); st.Spilled != 0 || st.InFlight != 0 || st.BalanceFactor != 0 {
		t.Errorf("state %+v, want nothing counted", st)
	}
}

// TestLeaseRelease checks when a lease ends: when the body is closed, when
// the request fails, and when the client cancels, before or after the
// response headers.
func TestLeaseRelease(t *testing.T) {
	servers := startServers(t, 2)
	gate := make(chan struct{})
	servers[0].gate = gate
	servers[1].gate = gate
	dead := startServers(t, 1)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), BalanceFactor: 1, EjectAfter: -1}, servers)
	inFlight := func() int64 { return tr.State().InFlight }
	client := &http.Client{Transport: tr}

	// Canceled while the backend holds it.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/", nil)
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "request held", func() bool { return servers[0].inflight.Load()+servers[1].inflight.Load() == 1 })
	if n := inFlight(); n != 1 {
		t.Errorf("%d in flight while the backend holds the request, want 1", n)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Error("canceled request succeeded")
	}
	if n := inFlight(); n != 0 {
		t.Errorf("%d in flight after a canceled request returned, want 0", n)
	}
	close(gate)

	// Answered: held until the body is closed, or the context ends.
	resp, err := client.Get("http://x/")
	if err != nil {
		t.Fatal(err)
	}
	if n := inFlight(); n != 1 {
		t.Errorf("%d in flight before the body is closed, want 1", n)
	}
	_ = resp.Body.Close()
	_ = resp.Body.Close() // a second Close releases nothing more
	if n := inFlight(); n != 0 {
		t.Errorf("%d in flight after the body is closed, want 0", n)
	}
	ctx, cancel = context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/", nil)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitFor(t, "lease released on cancellation", func() bool { return inFlight() == 0 })
	_ = resp.Body.Close()
	if n := inFlight(); n != 0 {
		t.Errorf("%d in flight after cancel and Close, want 0", n)
	}

	// Failed, with nowhere to retry.
	dead[0].srv.Close()
	if err := tr.SetBackends(backendsOf(dead)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get("http://x/"); err == nil {
		t.Error("GET to a dead backend succeeded")
	}
	if n := inFlight(); n != 0 {
		t.Errorf("%d in flight after a failed request, want 0", n)
	}
}

// TestBoundedTable checks that with bounded loads and no contention keys
// still go where the table says, with a weighted table.
func TestBoundedTable(t *testing.T) {
	servers := startServers(t, 3)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), BalanceFactor: 1.25}, servers, 1, 2, 3)
	want, err := maglev.NewWeighted([]maglev.Backend{{Name: "s0", Weight: 1}, {Name: "s1", Weight: 2}, {Name: "s2", Weight: 3}}, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	for _, k := range keys(200) {
		if _, got, err := get(t, client, "http://x", http.MethodGet, k); err != nil || got != want.Lookup(k) {
			t.Fatalf("key %q reached %s, %v; want %s", k, got, err, want.Lookup(k))
		}
	}
}
