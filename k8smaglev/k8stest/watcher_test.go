package k8stest_test

// The Watcher against a real kube-apiserver: Services and EndpointSlices
// written through client-go, real HTTP backends as their endpoints, and
// Transports fed by Watchers that hold only the rights docs/kubernetes.md
// lists (get, list and watch on endpointslices).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/k8smaglev"
	"github.com/maglevlb/maglev/k8smaglev/k8stest"
	"github.com/maglevlb/maglev/membership"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
)

// fleet starts a namespace with Service "web", the rights of user "lb"
// in it, and n proxies watching it as "lb", each with a client of its
// own.
func fleet(t *testing.T, c *k8stest.Cluster, n int, write func(cs kubernetes.Interface, ns string)) (kubernetes.Interface, string, []*proxy) {
	t.Helper()
	ns := c.Namespace(t)
	c.GrantEndpointSlices(t, ns)
	cs := c.Client(t)
	createService(t, cs, ns, "web")
	write(cs, ns)
	svc := k8smaglev.Service{Namespace: ns, Name: "web", Port: "http"}
	ps := make([]*proxy, n)
	for i := range ps {
		ps[i] = newProxy(t, c.LBClient(t), svc)
	}
	return cs, ns, ps
}

// TestFleet is the first claim: three Transports fed by Watchers
// route 1,000 keys alike, and a new ready endpoint is routed soon after
// the EndpointSlice update.
func TestFleet(t *testing.T) {
	c := k8stest.Start(t)
	bs := startBackends(t, 1, 6)
	cs, ns, ps := fleet(t, c, 3, func(cs kubernetes.Interface, ns string) {
		putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs[:5]...)...)
	})
	ks := keys(1000)
	checkRouting(t, ps, owners(t, addrsOf(bs[:5]...), ks))

	// A sixth endpoint becomes ready: measured from the Update's return
	// to every Transport routing to it. The figure is reported; the
	// bound asserted is 10 s, which no slow machine breaks falsely.
	want := owners(t, addrsOf(bs...), ks)
	var probe string
	for _, k := range ks {
		if want[k] == bs[5].addr {
			probe = k
			break
		}
	}
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs...)...)
	d := waitFor(t, 10*time.Second, "the new endpoint in every Transport", func() bool {
		for _, p := range ps {
			if b, ok := p.tr.Lookup(probe); !ok || b.Name != bs[5].addr {
				return false
			}
		}
		return true
	})
	t.Logf("a new ready endpoint: Update returned → routed by all 3 Transports in %v", d)
	checkRouting(t, ps, want)
	moved := 0
	before := owners(t, addrsOf(bs[:5]...), ks)
	for _, k := range ks {
		if before[k] != want[k] {
			moved++
		}
	}
	t.Logf("keys moved: %d of %d", moved, len(ks))
	for i, p := range ps {
		if got := names(p.w.Endpoints()); got != names(endpointsOf(bs...)) {
			t.Errorf("proxy %d: backends %s", i, got)
		}
	}
}

func endpointsOf(bs ...*backend) []membership.Endpoint {
	eps := make([]membership.Endpoint, len(bs))
	for i, b := range bs {
		eps[i] = membership.Endpoint{Name: b.addr, Weight: 1}
	}
	slices.SortFunc(eps, func(a, b membership.Endpoint) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return eps
}

// TestDrain is the second claim: an endpoint turned not-ready leaves the
// table; one turned terminating-but-serving gets no new key while every
// request already routed to it (held 2 s by the backend) completes.
func TestDrain(t *testing.T) {
	c := k8stest.Start(t)
	bs := startBackends(t, 2, 4)
	a, b, cc, d := bs[0], bs[1], bs[2], bs[3]
	cs, ns, ps := fleet(t, c, 2, func(cs kubernetes.Interface, ns string) {
		putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs...)...)
	})
	ks := keys(1000)
	checkRouting(t, ps, owners(t, addrsOf(bs...), ks))

	// d fails its readiness probe: out of every table.
	putSlice(t, cs, ns, "web", "web-a", 0, ep{a.ip, ready}, ep{b.ip, ready}, ep{cc.ip, ready}, ep{d.ip, notReady})
	waitFor(t, 10*time.Second, "the not-ready endpoint out", func() bool {
		for _, p := range ps {
			if len(p.w.Endpoints()) != 3 {
				return false
			}
		}
		return true
	})
	before := d.requests.Load()
	checkRouting(t, ps, owners(t, addrsOf(a, b, cc), ks))
	if n := d.requests.Load() - before; n != 0 {
		t.Errorf("the not-ready backend got %d requests", n)
	}

	// Back to ready; then cc's pod is deleted: terminating, still serving.
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs...)...)
	waitFor(t, 10*time.Second, "the endpoint ready again", func() bool { return len(ps[0].w.Endpoints()) == 4 && len(ps[1].w.Endpoints()) == 4 })
	all := owners(t, addrsOf(bs...), ks)
	var held []string
	for _, k := range ks {
		if all[k] == cc.addr && len(held) < 20 {
			held = append(held, k)
		}
	}
	type result struct {
		got  string
		err  error
		done time.Time
	}
	results := make([]result, len(held))
	var wg sync.WaitGroup
	for i, k := range held {
		wg.Go(func() {
			got, err := ps[i%2].get(k, "/slow")
			results[i] = result{got, err, time.Now()}
		})
	}
	waitFor(t, 10*time.Second, "the held requests at the backend", func() bool { return cc.inflight.Load() == int64(len(held)) })
	putSlice(t, cs, ns, "web", "web-a", 0, ep{a.ip, ready}, ep{b.ip, ready}, ep{cc.ip, draining}, ep{d.ip, ready})
	drainIn := waitFor(t, 10*time.Second, "the terminating endpoint drained", func() bool {
		for _, p := range ps {
			if names(p.w.Endpoints()) != fmt.Sprintf("%s %s %s(drained) %s", a.addr, b.addr, cc.addr, d.addr) {
				return false
			}
		}
		return true
	})
	drained := time.Now()
	if n := cc.inflight.Load(); n != int64(len(held)) {
		t.Fatalf("only %d of %d held requests were in flight when the drain applied", n, len(held))
	}
	t.Logf("terminating endpoint: Update returned → drained in both Transports in %v, %d requests in flight at it", drainIn, len(held))
	before = cc.requests.Load()
	checkRouting(t, ps, owners(t, addrsOf(a, b, d), ks))
	if n := cc.requests.Load() - before; n != 0 {
		t.Errorf("the draining backend got %d new requests", n)
	}
	wg.Wait()
	for i, r := range results {
		if r.err != nil || r.got != cc.addr {
			t.Errorf("held request %d: %q %v, want an answer from %s", i, r.got, r.err, cc.addr)
		} else if !r.done.After(drained) {
			t.Errorf("held request %d completed before the drain applied", i)
		}
	}
	// The drained backend stays configured: httpmaglev still knows it.
	st := ps[0].tr.State()
	found := false
	for _, sb := range st.Backends {
		if sb.Name == cc.addr {
			found = true
		}
	}
	if !found {
		t.Errorf("the drained backend is not in the Transport's state")
	}
}

// TestAPIServerRestart is the third claim: with the API server stopped,
// routing goes on over the last set; after it restarts, the Watchers
// follow the changes made since. The Watchers reach the API server
// through a forwarder that the test cuts before the stop and restores
// after two changes made after the restart: the watch cache the API
// server rebuilt at its start no longer holds the Watchers' revision, so
// they list again, and the two changes reach set as one call.
func TestAPIServerRestart(t *testing.T) {
	c := k8stest.Start(t)
	bs := startBackends(t, 3, 5)
	ns := c.Namespace(t)
	c.GrantEndpointSlices(t, ns)
	cs := c.Client(t)
	createService(t, cs, ns, "web")
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs[:4]...)...)
	fw := startForwarder(t, 6444)
	svc := k8smaglev.Service{Namespace: ns, Name: "web", Port: "http"}
	ps := make([]*proxy, 3)
	for i := range ps {
		cfg := c.Config(true)
		cfg.Host = "https://" + fw.addr
		wc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = newProxy(t, wc, svc)
	}
	ks := keys(1000)
	want := owners(t, addrsOf(bs[:4]...), ks)
	checkRouting(t, ps, want)
	sets := make([]int, len(ps))
	for i, p := range ps {
		sets[i] = p.w.Sets()
	}

	fw.setCut(true)
	c.StopAPIServer(t)
	down := time.Now()
	time.Sleep(time.Second) // the Watchers try, and fail, to watch again
	checkRouting(t, ps, want)
	checkRouting(t, ps, want)
	c.StartAPIServer(t)
	t.Logf("API server down for %v; 2 rounds of 1,000 keys through 3 Transports on the last set", time.Since(down).Round(time.Millisecond))
	for i, p := range ps {
		if p.w.Sets() != sets[i] {
			t.Errorf("proxy %d: set called while the API server was down", i)
		}
	}

	// Two changes the Watchers cannot see: bs[0] leaves, bs[4] joins.
	cs = c.Client(t)
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs[1:4]...)...)
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs[1:]...)...)
	restored := time.Now()
	fw.setCut(false)
	want = owners(t, addrsOf(bs[1:]...), ks)
	d := waitFor(t, 30*time.Second, "the changes after the restart in every Watcher", func() bool {
		for _, p := range ps {
			if names(p.w.Endpoints()) != names(endpointsOf(bs[1:]...)) {
				return false
			}
		}
		return true
	})
	t.Logf("after the restart: connection restored → both changes applied in all 3 Watchers in %v", d)
	_ = restored
	checkRouting(t, ps, want)
	for i, p := range ps {
		if n := p.w.Sets() - sets[i]; n != 1 {
			t.Errorf("proxy %d: %d calls of set for the two changes, want 1", i, n)
		}
	}

	// And the watch goes on: one more change, one more call.
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs...)...)
	waitFor(t, 10*time.Second, "a change after the relist", func() bool {
		for _, p := range ps {
			if len(p.w.Endpoints()) != 5 {
				return false
			}
		}
		return true
	})
	checkRouting(t, ps, owners(t, addrsOf(bs...), ks))
}

// TestTwoSlices is the fourth claim: a Service whose endpoints are split
// over two EndpointSlices, one endpoint in both, counts it once.
func TestTwoSlices(t *testing.T) {
	c := k8stest.Start(t)
	bs := startBackends(t, 4, 5)
	_, _, ps := fleet(t, c, 2, func(cs kubernetes.Interface, ns string) {
		putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs[:3]...)...)
		putSlice(t, cs, ns, "web", "web-b", 0, readyEPs(bs[2:]...)...)
		// A slice of another Service, not to be read.
		putSlice(t, cs, ns, "other", "other-a", 0, ep{"198.18.4.99", ready})
	})
	for i, p := range ps {
		if got, want := names(p.w.Endpoints()), names(endpointsOf(bs...)); got != want {
			t.Errorf("proxy %d: backends %s, want %s", i, got, want)
		}
	}
	checkRouting(t, ps, owners(t, addrsOf(bs...), keys(1000)))
}

// TestWatchErrors: a Watcher with no rights in a namespace returns, when
// its context ends, an error wrapping ErrList and the API server's
// Forbidden; a set that fails on the first list fails Watch with its
// error; one that fails later is called again until it accepts.
func TestWatchErrors(t *testing.T) {
	c := k8stest.Start(t)
	ns := c.Namespace(t) // no Role for "lb" here
	svc := k8smaglev.Service{Namespace: ns, Name: "web", Port: "http"}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := k8smaglev.Watch(ctx, c.LBClient(t), svc, func([]membership.Endpoint) error { return nil }, k8smaglev.WatchOptions{})
	if !errors.Is(err, k8smaglev.ErrList) || !errors.Is(err, context.DeadlineExceeded) || !apierrors.IsForbidden(err) ||
		!strings.HasPrefix(err.Error(), "k8smaglev: ") {
		t.Errorf("Watch without rights: %v, want ErrList, the deadline and Forbidden", err)
	}

	cs := c.Client(t)
	createService(t, cs, ns, "web")
	bs := startBackends(t, 5, 2)
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs[0])...)
	errNo := errors.New("no")
	_, err = k8smaglev.Watch(t.Context(), cs, svc, func([]membership.Endpoint) error { return errNo }, k8smaglev.WatchOptions{})
	if !errors.Is(err, errNo) || !strings.HasPrefix(err.Error(), "k8smaglev: ") {
		t.Errorf("set failing on the first list: %v", err)
	}

	var mu sync.Mutex
	fails, calls := 0, 0
	w, err := k8smaglev.Watch(t.Context(), cs, svc, func(l []membership.Endpoint) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if len(l) == 2 && fails < 3 {
			fails++
			return errNo
		}
		return nil
	}, k8smaglev.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs...)...)
	waitFor(t, 10*time.Second, "the list accepted after 3 failures", func() bool { return len(w.Endpoints()) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if fails != 3 || calls != 5 {
		t.Errorf("%d failures in %d calls, want 3 in 5", fails, calls)
	}
}
