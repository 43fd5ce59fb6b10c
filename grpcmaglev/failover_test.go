package grpcmaglev_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// failoverBound is the longest TestHardStop lets a client take to notice a
// server that stopped hard: from Stop() to the first RPC for one of its keys
// that succeeds at the key's new owner. On loopback a closed port refuses
// connections at once, so the client notices in milliseconds; the bound is
// loose for slow, loaded machines and the race detector.
const failoverBound = 5 * time.Second

// checkMoves fails the test unless going from table a to table b moved
// about the slots of the backend that joined or left, plus Maglev's usual
// small excess: at most 1% of the table beyond them. changed is the backend
// whose slots move.
func checkMoves(t *testing.T, a, b *maglev.Table, changed string) {
	t.Helper()
	own := 0
	if i := a.Index(changed); i >= 0 {
		own = a.Counts()[i]
	} else {
		own = b.Counts()[b.Index(changed)]
	}
	moved := a.Diff(b)
	if moved < own || moved-own > a.Size()/100 {
		t.Fatalf("%d slots moved; %s owns %d, so %d moved between other backends (more than 1%%)", moved, changed, own, moved-own)
	}
	t.Logf("%d slots moved: %d of %s's, %d more (Maglev's excess)", moved, own, changed, moved-own)
}

// checkFailMoves fails the test unless going from table a to table b, a
// with the backend failed out of service (maglev.Table.Without), moved
// exactly the failed backend's slots: a failure moves no other key.
func checkFailMoves(t *testing.T, a, b *maglev.Table, failed string) {
	t.Helper()
	own := a.Counts()[a.Index(failed)]
	if moved := a.Diff(b); moved != own {
		t.Fatalf("%d slots moved when %s failed; it owned %d: a failure must move its slots only", moved, failed, own)
	}
}

// TestHardStop: once the client has noticed a server's hard Stop (within
// failoverBound), every RPC succeeds and every key reaches its owner in the
// table without that server.
func TestHardStop(t *testing.T) {
	ss := startServers(t, 5, 0)
	es, names, toServer := named(ss)
	c := newClient(t, es, serviceConfig(`"requestHashHeader": "x-user"`, false))
	ks := keys(300)
	before := tableOfNames(t, names)
	checkRouting(t, c, before, ks, 1, viaWithKey, toServer)

	dead := ss[2]
	after, err := before.Without(names[2])
	if err != nil {
		t.Fatal(err)
	}
	probe := keyOwnedBy(t, before, ks, names[2])
	start := time.Now()
	dead.srv.Stop()
	waitRouted(t, c, probe, toServer[after.Lookup(probe)])
	took := time.Since(start)
	t.Logf("failover: %v from Stop() to a %s key served by its new owner", took, dead.addr)
	if took > failoverBound {
		t.Fatalf("the client took %v to notice a hard stop; bound %v", took, failoverBound)
	}
	checkRouting(t, c, after, ks, 2, viaWithKey, toServer)
	checkRouting(t, c, after, ks, 1, viaHeader, toServer)
	checkFailMoves(t, before, after, names[2])
	// The rebuild was logged with the slots it moved.
	if want := fmt.Sprintf("table rebuilt: 4 of 5 endpoints usable, %d of %d slots moved", before.Diff(after), after.Size()); !rebuildLog.contains(want) {
		t.Fatalf("no log line %q", want)
	}
}

// TestHardStopInFlight: RPCs in flight on a server that stops hard fail
// with Unavailable; with a retry policy in the service config, gRPC retries
// them and they succeed at the keys' new owners.
func TestHardStopInFlight(t *testing.T) {
	const retry = `, "methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
		"maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "0.5s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	for _, withRetry := range []bool{false, true} {
		t.Run(map[bool]string{false: "no retry", true: "retry policy"}[withRetry], func(t *testing.T) {
			ss := startServers(t, 3, 0)
			ss[0].svc.delay.Store(int64(time.Minute)) // its RPCs stay in flight until the stop
			sc := serviceConfig(`"requestHashHeader": "x-user"`, false)
			if withRetry {
				sc = sc[:len(sc)-1] + retry
			}
			c := newClient(t, endpoints(ss), sc)
			victim := ss[0]
			before, after := tableOf(t, ss), tableDown(t, ss, victim)
			var mine []string // keys the victim owns
			for _, k := range keys(100) {
				if before.Lookup(k) == victim.addr {
					mine = append(mine, k)
				}
				if len(mine) == 4 {
					break
				}
			}
			type result struct {
				key, host string
				err       error
			}
			results := make(chan result, len(mine))
			for _, k := range mine {
				go func() {
					h, err := c.call(context.Background(), k, viaWithKey)
					results <- result{k, h, err}
				}()
			}
			deadline := time.Now().Add(settleTimeout)
			for victim.svc.inFlight.Load() < int64(len(mine)) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d RPCs reached the server", victim.svc.inFlight.Load(), len(mine))
				}
				time.Sleep(time.Millisecond)
			}
			victim.srv.Stop()
			for range mine {
				r := <-results
				switch {
				case !withRetry && status.Code(r.err) != codes.Unavailable:
					t.Errorf("key %q in flight at a hard stop: got %q, %v; want Unavailable", r.key, r.host, r.err)
				case withRetry && (r.err != nil || r.host != after.Lookup(r.key)):
					t.Errorf("key %q in flight at a hard stop, retried: got %q, %v; want %q", r.key, r.host, r.err, after.Lookup(r.key))
				}
			}
		})
	}
}

// load runs fail-fast keyed RPCs from g goroutines until stop is closed,
// counting calls and failures and checking each answer against the owner
// want gives (nil: don't check).
type load struct {
	calls, failures, astray atomic.Int64
	mu                      sync.Mutex
	firstErr                error
	stop                    chan struct{}
	wg                      sync.WaitGroup
}

func startLoad(c *client, ks []string, g int, want func(key string) []string) *load {
	l := &load{stop: make(chan struct{})}
	for w := range g {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := w; ; i += g {
				select {
				case <-l.stop:
					return
				default:
				}
				k := ks[i%len(ks)]
				got, err := c.call(context.Background(), k, viaWithKey)
				l.calls.Add(1)
				if err != nil {
					l.failures.Add(1)
					l.mu.Lock()
					if l.firstErr == nil {
						l.firstErr = err
					}
					l.mu.Unlock()
					continue
				}
				if want != nil {
					if owners := want(k); !contains(owners, got) {
						l.astray.Add(1)
					}
				}
			}
		}()
	}
	return l
}

func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestGracefulStopUnderLoad: a server drained with GracefulStop while 8
// goroutines send it and the others keyed RPCs costs zero failed RPCs: its
// in-flight RPCs finish, and the ones made meanwhile wait for the client to
// notice, then go to the new owners.
func TestGracefulStopUnderLoad(t *testing.T) {
	ss := startServers(t, 4, 5*time.Millisecond)
	victim := ss[1]
	victim.svc.delay.Store(int64(50 * time.Millisecond)) // so that RPCs are in flight when it drains
	c := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user"`, false))
	ks := keys(200)
	before := tableOf(t, ss)
	checkRouting(t, c, before, ks[:20], 1, viaWithKey, nil)

	after := tableDown(t, ss, victim)
	// Until the client notices, a key may reach its owner in either table.
	l := startLoad(c, ks, 8, func(k string) []string { return []string{before.Lookup(k), after.Lookup(k)} })
	time.Sleep(200 * time.Millisecond) // steady load first
	deadline := time.Now().Add(settleTimeout)
	var servedBefore, inFlight int64
	for {
		servedBefore = victim.svc.served.Load()
		if inFlight = victim.svc.inFlight.Load(); inFlight > 0 {
			break
		}
		if time.Now().After(deadline) {
			l.finish()
			t.Fatal("no RPC in flight at the server to drain")
		}
		time.Sleep(time.Millisecond)
	}
	drained := make(chan struct{})
	go func() { victim.srv.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(settleTimeout):
		l.finish()
		t.Fatal("GracefulStop did not return")
	}
	// The RPCs in flight just before the drain finish on the server or, if
	// the client saw the drain refuse them, are retried transparently.
	servedDuring := victim.svc.served.Load() - servedBefore
	probe := keyOwnedBy(t, before, ks, victim.addr)
	waitRouted(t, c, probe, after.Lookup(probe))
	time.Sleep(100 * time.Millisecond) // more load on the new table
	l.finish()

	if n := l.failures.Load(); n > 0 {
		t.Fatalf("%d of %d RPCs failed during a graceful drain; first: %v", n, l.calls.Load(), l.firstErr)
	}
	if n := l.astray.Load(); n > 0 {
		t.Fatalf("%d of %d RPCs reached neither the old nor the new owner", n, l.calls.Load())
	}
	t.Logf("%d RPCs, none failed; %d in flight at the server as it began draining, %d finished there", l.calls.Load(), inFlight, servedDuring)
	checkRouting(t, c, after, ks[:20], 1, viaWithKey, nil)
}

// TestDrainReconnect: servers that drain every connection (GOAWAY) after
// about 150 ms and take the client's reconnection: every key keeps going to
// its owner, waiting while the owner reconnects, and no RPC fails.
func TestDrainReconnect(t *testing.T) {
	ss := startServers(t, 3, time.Millisecond, drainAge(150*time.Millisecond))
	c := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user"`, false))
	ks := keys(200)
	tb := tableOf(t, ss)
	l := startLoad(c, ks, 6, func(k string) []string { return []string{tb.Lookup(k)} })
	time.Sleep(time.Second)
	l.finish()
	if n := l.failures.Load(); n > 0 {
		t.Fatalf("%d of %d RPCs failed across drains; first: %v", n, l.calls.Load(), l.firstErr)
	}
	if n := l.astray.Load(); n > 0 {
		t.Fatalf("%d of %d RPCs left their owner while it reconnected", n, l.calls.Load())
	}
	reconnects := int64(0)
	for _, s := range ss {
		reconnects += s.accepts.Load() - 1
	}
	if reconnects == 0 {
		t.Fatal("no server drained a connection: the test saw no reconnection")
	}
	t.Logf("%d RPCs, all at their owners, across %d reconnections", l.calls.Load(), reconnects)
}

// TestHealth: a server that reports NOT_SERVING loses its keys, and only
// its keys, to their owners in the table with it out of service
// (maglev.Table.Without); SERVING brings it and exactly its keys back.
func TestHealth(t *testing.T) {
	ss := startServers(t, 4, 0)
	c := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user"`, true))
	ks := keys(300)
	all := tableOf(t, ss)
	checkRouting(t, c, all, ks, 1, viaHeader, nil)

	sick := ss[3]
	rest := tableDown(t, ss, sick)
	probe := keyOwnedBy(t, all, ks, sick.addr)
	sick.setServing(false)
	waitRouted(t, c, probe, rest.Lookup(probe))
	checkRouting(t, c, rest, ks, 2, viaHeader, nil)

	sick.setServing(true)
	waitRouted(t, c, probe, sick.addr)
	checkRouting(t, c, all, ks, 2, viaHeader, nil)
}

// TestResolverAddsServer: a resolver update that adds a server sends each
// key to its owner in the new table from the first RPC after the update
// (keys of the new server wait for it to connect), and moves only the new
// server's slots, plus Maglev's usual small excess.
func TestResolverAddsServer(t *testing.T) {
	ss := startServers(t, 5, 0)
	es, names, toServer := named(ss)
	c := newClient(t, es[:4], serviceConfig(`"requestHashHeader": "x-user"`, false))
	ks := keys(400)
	t4, t5 := tableOfNames(t, names[:4]), tableOfNames(t, names)
	checkRouting(t, c, t4, ks, 1, viaHeader, toServer)

	c.res.UpdateState(resolver.State{Endpoints: es})
	checkRouting(t, c, t5, ks, 2, viaHeader, toServer)
	checkMoves(t, t4, t5, names[4])
	if ss[4].svc.served.Load() == 0 {
		t.Fatal("the added server served no RPC")
	}
}

// TestAllDown: with every server stopped, fail-fast RPCs fail with
// Unavailable carrying the connection error; WaitForReady RPCs made
// meanwhile complete once a server comes back.
func TestAllDown(t *testing.T) {
	ss := startServers(t, 3, 0)
	c := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user"`, false))
	ks := keys(50)
	checkRouting(t, c, tableOf(t, ss), ks, 1, viaWithKey, nil)
	for _, s := range ss {
		s.srv.Stop()
	}

	// Once the client has seen every server fail, every fail-fast RPC fails
	// with the policy's error.
	noUsable := func(err error) bool {
		return status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "grpcmaglev: no usable endpoint")
	}
	deadline := time.Now().Add(settleTimeout)
	for {
		_, err := c.call(context.Background(), ks[0], viaWithKey)
		if noUsable(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v with every server down, a fail-fast RPC got %v", settleTimeout, err)
		}
		time.Sleep(pollInterval)
	}
	for i, k := range ks {
		v := []via{viaWithKey, viaHeader, viaNone}[i%3]
		_, err := c.call(context.Background(), k, v)
		if !noUsable(err) || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("key %q, every server down: got %v; want Unavailable, no usable endpoint, connection refused", k, err)
		}
	}

	type result struct {
		host string
		err  error
	}
	results := make(chan result, 10)
	for i := range cap(results) {
		go func() {
			h, err := c.call(context.Background(), ks[i], viaWithKey, grpc.WaitForReady(true))
			results <- result{h, err}
		}()
	}
	// The RPCs cannot complete while every server is down. (If one had, it
	// would show here or below as an error.)
	time.Sleep(200 * time.Millisecond)
	select {
	case r := <-results:
		t.Fatalf("a WaitForReady RPC returned with every server down: %+v", r)
	default:
	}
	back := startServer(t, ss[1].addr, 0)
	for range cap(results) {
		r := <-results // each within rpcTimeout
		if r.err != nil || r.host != back.addr {
			t.Fatalf("WaitForReady RPC after %s came back: got %q, %v", back.addr, r.host, r.err)
		}
	}
}
