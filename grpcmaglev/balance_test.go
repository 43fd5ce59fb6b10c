package grpcmaglev_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

// hotLoad sends calls RPCs for key from g goroutines at once through c,
// and returns how many each server served and the first error.
func hotLoad(t *testing.T, c *client, ss []*server, key string, g, calls int) (map[string]int64, error) {
	t.Helper()
	before := map[string]int64{}
	for _, s := range ss {
		before[s.addr] = s.svc.served.Load()
		s.svc.peak.Store(0)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				if _, err := c.call(context.Background(), key, viaWithKey); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	served := map[string]int64{}
	for _, s := range ss {
		served[s.addr] = s.svc.served.Load() - before[s.addr]
	}
	return served, firstErr
}

// TestBalanceFactorHotKey: with balanceFactor 1.25, one hot key sent by 10
// goroutines at once to 5 servers that hold each RPC 5 ms never finds a
// server holding more than its capacity + 1 (counted at the servers), and
// spills from its owner to its next candidates in Candidates order; one
// RPC at a time goes to every key's owner, before the load and after it. Without the factor, the
// same load sends every RPC to the owner, above that bound.
func TestBalanceFactorHotKey(t *testing.T) {
	const (
		n, g, calls = 5, 10, 30
		factor      = 1.25
		hold        = 5 * time.Millisecond
	)
	ss := startServers(t, n, 0)
	tb := tableOf(t, ss)
	on := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user", "balanceFactor": 1.25`, false))
	// One RPC in flight: L = 1, and every owner has room.
	checkRouting(t, on, tb, keys(100), 1, viaWithKey, nil)

	for _, s := range ss {
		s.svc.delay.Store(int64(hold))
	}
	const key = "hot"
	var order []string
	for i := range tb.Candidates(key) {
		order = append(order, tb.Backends()[i])
	}
	// L is at most g, so a server's capacity is at most ceil(factor·g/n).
	bound := int64(math.Ceil(factor*g/n)) + 1
	served, err := hotLoad(t, on, ss, key, g, calls)
	if err != nil {
		t.Fatalf("hot key with balanceFactor: %v", err)
	}
	var counts, peaks []int64
	for _, name := range order {
		s := byAddr(ss, name)
		counts, peaks = append(counts, served[name]), append(peaks, s.svc.peak.Load())
	}
	t.Logf("factor %v: candidates of %q in order served %v RPCs, peak in flight %v (bound %d)", factor, key, counts, peaks, bound)
	for i, p := range peaks {
		if p > bound {
			t.Errorf("candidate %d (%s) held %d RPCs at once; capacity + 1 is at most %d", i, order[i], p, bound)
		}
	}
	// The servers that took the key are its first k candidates, k ≥ 2:
	// an RPC goes to a candidate only when every earlier one is full, and
	// so busy with the key.
	k := 0
	for k < len(counts) && counts[k] > 0 {
		k++
	}
	for i := k; i < len(counts); i++ {
		if counts[i] > 0 {
			t.Errorf("candidate %d took %d RPCs, but candidate %d took none: not a spill in Candidates order (%v)", i, counts[i], k, counts)
		}
	}
	if k < 2 {
		t.Errorf("the hot key did not spill: %v", counts)
	}
	// Every RPC's Done released its lease: one RPC at a time reaches every
	// key's owner again, the hot key's included.
	for _, s := range ss {
		s.svc.delay.Store(0)
	}
	checkRouting(t, on, tb, append(keys(50), key), 2, viaWithKey, nil)
	for _, s := range ss {
		s.svc.delay.Store(int64(hold))
	}

	// Without the factor: every RPC at the owner, which holds more than
	// the bound at once, so the check above can fail.
	off := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user"`, false))
	served, err = hotLoad(t, off, ss, key, g, calls/3)
	if err != nil {
		t.Fatalf("hot key without balanceFactor: %v", err)
	}
	if got := served[order[0]]; got != g*calls/3 {
		t.Errorf("without balanceFactor the owner served %d of %d RPCs: %v", got, g*calls/3, served)
	}
	if p := byAddr(ss, order[0]).svc.peak.Load(); p <= bound {
		t.Errorf("without balanceFactor the owner held at most %d RPCs at once: the load does not test the bound %d", p, bound)
	} else {
		t.Logf("factor off: the owner served all %d RPCs, peak in flight %d", g*calls/3, p)
	}
}

// TestBalanceFactorRebuild: a server that drains (GracefulStop) while a hot
// key spills onto it, with some of the key's RPCs in flight there, costs no
// RPC; the client rebuilds the table without it, and nothing is left
// counted: one RPC at a time reaches every key's owner in the new table.
func TestBalanceFactorRebuild(t *testing.T) {
	ss := startServers(t, 4, 5*time.Millisecond)
	tb := tableOf(t, ss)
	c := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user", "balanceFactor": 1.25`, false))
	const key = "hot"
	var order []string
	for i := range tb.Candidates(key) {
		order = append(order, tb.Backends()[i])
	}
	victim := byAddr(ss, order[1]) // the hot key's first spill target
	l := startLoad(c, []string{key}, 8, nil)
	deadline := time.Now().Add(settleTimeout)
	for victim.svc.inFlight.Load() == 0 {
		if time.Now().After(deadline) {
			l.finish()
			t.Fatal("the hot key never spilled to its second candidate")
		}
		time.Sleep(time.Millisecond)
	}
	victim.srv.GracefulStop()
	time.Sleep(100 * time.Millisecond) // the client notices under the load
	l.finish()
	if n := l.failures.Load(); n > 0 {
		t.Fatalf("%d of %d RPCs failed as a spill target drained; first: %v", n, l.calls.Load(), l.firstErr)
	}
	rest := without(ss, victim)
	for _, s := range rest {
		s.svc.delay.Store(0)
	}
	after := tableDown(t, ss, victim)
	probe := keyOwnedBy(t, tb, keys(300), victim.addr)
	waitRouted(t, c, probe, after.Lookup(probe))
	checkRouting(t, c, after, append(keys(100), key), 2, viaWithKey, nil)
	t.Logf("%d RPCs of the hot key, none failed, across the drain of its second candidate", l.calls.Load())
}

// byAddr returns the server at addr.
func byAddr(ss []*server, addr string) *server {
	for _, s := range ss {
		if s.addr == addr {
			return s
		}
	}
	panic("no server at " + addr)
}
