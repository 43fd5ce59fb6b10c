package xdpmaglev

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// longLived keeps each connection echoing a line every 100 ms until stop,
// and records which broke.
type longLived struct {
	stop   atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	broken map[int]error // by client port
}

func keepEchoing(conns map[int]*conn) *longLived {
	l := &longLived{broken: map[int]error{}}
	for port, c := range conns {
		l.wg.Go(func() {
			for seq := 0; !l.stop.Load(); seq++ {
				if err := c.echo(fmt.Sprintf("%d %d", port, seq)); err != nil {
					l.mu.Lock()
					l.broken[port] = err
					l.mu.Unlock()
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	return l
}

// end stops the echoes and returns the ports of the connections that
// broke, sorted.
func (l *longLived) end() []int {
	l.stop.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for p := range l.broken {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// secondStats sums the backends' decapsulators' second-chance counters.
func (r *routed) secondStats(t *testing.T) (passedOn []uint64, local uint64) {
	t.Helper()
	for _, d := range r.decaps {
		st, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		passedOn = append(passedOn, st.SecondHop)
		local += st.SecondLocal
	}
	return passedOn, local
}

// movedPorts returns the client ports, of 50 from from, whose slot of
// svc's table moves from old to now, by FlowHash.
func movedPorts(svc Service, old, now interface{ LookupHash(uint64) string }, from int) []int {
	var out []int
	for p := from; p < from+50; p++ {
		h := FlowHash(e2eSeed, netip.AddrPortFrom(routedClient4, uint16(p)), svc.VIP, 6)
		if old.LookupHash(h) != now.LookupHash(h) {
			out = append(out, p)
		}
	}
	return out
}

// TestSecondChanceStateless: a stateless GUE service on three backends in
// other subnets, 50 long-lived connections exchanging a line every 100
// ms; a fourth backend joins. With second chance, none breaks: each
// packet of a flow whose slot moved reaches the new owner, which has no
// connection of it and passes it on to the previous owner, and the
// backends that did count them. Without, exactly the flows whose slots
// moved break, as the tables and FlowHash predict.
func TestSecondChanceStateless(t *testing.T) {
	packetsOnly(t)
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"second-chance", time.Minute}, {"none", 0}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRouted(t)
			svc := Service{VIP: r.vip(false, 80), Proto: TCP}
			opts := ServiceOptions{Forward: ForwardGUE, Conntrack: ConntrackOff, SecondChance: c.window}
			var bs []Backend
			for _, a := range r.addrs4 {
				bs = append(bs, Backend{Addr: a, Weight: 1})
			}
			if err := r.lb.SetService(svc, bs[:3], opts); err != nil {
				t.Fatal(err)
			}
			old := r.lb.Table(svc)
			conns := r.dialPorts(t, svc.VIP, 45000, 50)
			l := keepEchoing(conns)
			time.Sleep(300 * time.Millisecond)
			if err := r.lb.SetService(svc, bs, opts); err != nil {
				t.Fatal(err)
			}
			moved := movedPorts(svc, old, r.lb.Table(svc), 45000)
			time.Sleep(2 * time.Second)
			broken := l.end()
			passedOn, local := r.secondStats(t)
			for _, p := range broken {
				h := FlowHash(e2eSeed, netip.AddrPortFrom(routedClient4, uint16(p)), svc.VIP, 6)
				t.Logf("port %d: %v (from %s to %s)", p, l.broken[p], old.LookupHash(h), r.lb.Table(svc).LookupHash(h))
			}
			t.Logf("second hops taken locally: %d", local)
			st, err := r.lb.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d of 50 connections on moved slots; broken %v; passed on by backend %v; %d packets with a second hop, %d stateless", len(moved), broken, passedOn, st.SecondHops, st.Stateless)
			if len(moved) == 0 {
				t.Fatal("no connection's slot moved: the test shows nothing")
			}
			if c.window > 0 {
				if len(broken) != 0 || passedOn[3] == 0 || st.SecondHops == 0 {
					t.Errorf("with second chance: broken %v, passed on %v, second hops %d; want none broken, and the new backend passing packets on", broken, passedOn, st.SecondHops)
				}
			} else if !slices.Equal(broken, moved) {
				t.Errorf("without second chance: broken %v, want exactly the moved %v", broken, moved)
			}
			if st.Stateless == 0 || st.Conntrack.Hits+st.Conntrack.Misses != 0 {
				t.Errorf("stateless service: %d stateless packets, %d conntrack lookups", st.Stateless, st.Conntrack.Hits+st.Conntrack.Misses)
			}
		})
	}
}

// TestSecondChanceTwoLBs: two load balancers with conntrack, the router
// sending the VIP to the first, where 50 long-lived connections are
// tracked; a fourth backend joins both; then the router sends the VIP to
// the second, which has never seen the connections. With second chance
// none breaks: the second load balancer's table sends each moved flow to
// its new owner, with its previous owner as the second hop. Without,
// exactly the moved flows break.
func TestSecondChanceTwoLBs(t *testing.T) {
	packetsOnly(t)
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"second-chance", time.Minute}, {"none", 0}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRouted(t)
			lb2 := r.addLB2(t, Options{ConntrackSize: 1 << 14, FloodRate: -1})
			svc := Service{VIP: r.vip(false, 80), Proto: TCP}
			opts := ServiceOptions{Forward: ForwardGUE, SecondChance: c.window}
			var bs []Backend
			for _, a := range r.addrs4 {
				bs = append(bs, Backend{Addr: a, Weight: 1})
			}
			for _, lb := range []*LB{r.lb, lb2} {
				if err := lb.SetService(svc, bs[:3], opts); err != nil {
					t.Fatal(err)
				}
			}
			old := r.lb.Table(svc)
			conns := r.dialPorts(t, svc.VIP, 46000, 50)
			l := keepEchoing(conns)
			time.Sleep(300 * time.Millisecond)
			for _, lb := range []*LB{r.lb, lb2} {
				if err := lb.SetService(svc, bs, opts); err != nil {
					t.Fatal(err)
				}
			}
			moved := movedPorts(svc, old, r.lb.Table(svc), 46000)
			time.Sleep(300 * time.Millisecond)
			xdptest.IP(r.t, "-n", r.router, "route", "replace", r.vip4.String()+"/32", "via", "198.18.5.2")
			time.Sleep(2 * time.Second)
			broken := l.end()
			st2, err := lb2.Stats()
			if err != nil {
				t.Fatal(err)
			}
			passedOn, _ := r.secondStats(t)
			t.Logf("%d of 50 connections on moved slots; after the move to the second load balancer, broken %v; it forwarded %d packets, %d with a second hop; passed on by backend %v", len(moved), broken, st2.Forwarded, st2.SecondHops, passedOn)
			if len(moved) == 0 || st2.Forwarded == 0 {
				t.Fatal("no connection's slot moved, or none reached the second load balancer: the test shows nothing")
			}
			if c.window > 0 {
				if len(broken) != 0 || st2.SecondHops == 0 {
					t.Errorf("with second chance: broken %v, %d packets with a second hop; want none broken", broken, st2.SecondHops)
				}
			} else if !slices.Equal(broken, moved) {
				t.Errorf("without second chance: broken %v, want exactly the moved %v", broken, moved)
			}
		})
	}
}

// TestSecondChanceLeave: with second chance, a backend that leaves the
// service (its drain over) takes its flows with it, as without (there is
// nowhere to send them), and no other flow breaks.
func TestSecondChanceLeave(t *testing.T) {
	packetsOnly(t)
	r := newRouted(t)
	svc := Service{VIP: r.vip(false, 80), Proto: TCP}
	opts := ServiceOptions{Forward: ForwardGUE, Conntrack: ConntrackOff, SecondChance: time.Minute}
	var bs []Backend
	for _, a := range r.addrs4 {
		bs = append(bs, Backend{Addr: a, Weight: 1})
	}
	if err := r.lb.SetService(svc, bs, opts); err != nil {
		t.Fatal(err)
	}
	conns := map[int]*conn{}
	var on []int // on the backend that leaves
	for p := 47000; p < 47050; p++ {
		cn, err := r.dial(svc.VIP, p)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cn.Close() }()
		conns[p] = cn
		if cn.backend == r.addrs4[1].String() {
			on = append(on, p)
		}
	}
	if len(on) == 0 {
		t.Fatal("no connection on the backend that leaves")
	}
	l := keepEchoing(conns)
	time.Sleep(300 * time.Millisecond)
	if err := r.lb.SetService(svc, slices.Delete(slices.Clone(bs), 1, 2), opts); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if broken := l.end(); !slices.Equal(broken, on) {
		t.Errorf("broken %v, want exactly those on the backend that left, %v", broken, on)
	}
}

// TestSecondChanceHostile: a second-hop packet cannot make packets loop.
// One sent to a backend, as the load balancer would, naming another as
// the second hop with a forged hop count of 255, for a connection neither
// has: the first passes it on once, as GUE variant 1, and the second
// takes it (its TCP resets it); one naming the backend itself as the
// second hop is taken there. From an untrusted source it is dropped.
func TestSecondChanceHostile(t *testing.T) {
	r := newRouted(t)
	svc := Service{VIP: r.vip(false, 80), Proto: TCP}
	r.set(t, svc, ForwardGUE)
	before := make([]DecapStats, len(r.decaps))
	for i, d := range r.decaps {
		var err error
		if before[i], err = d.Stats(); err != nil {
			t.Fatal(err)
		}
	}
	inner := packet(netip.AddrPortFrom(routedClient4, 48000), svc.VIP, 6, []byte("data"))[14:]
	inner = withIPv4Checksum(append(make([]byte, 14), inner...))[14:]
	// Written on the backend's link as the router would forward it.
	send := func(src netip.Addr, be int, second netip.Addr) {
		t.Helper()
		f := encapsulated(ForwardGUE, lbMAC, src, r.addrs4[be], append(secondHeader(second, 255), inner...), 0x5eed)
		r.injectOn(t, fmt.Sprintf("r-be%d", be), r.backends[be], [][]byte{withIPv4Checksum(f)})
	}
	lbAddr := netip.MustParseAddr("198.18.2.2")
	send(lbAddr, 0, r.addrs4[2])
	send(lbAddr, 1, r.addrs4[1])
	send(netip.MustParseAddr("198.18.1.2"), 0, r.addrs4[2])
	time.Sleep(300 * time.Millisecond)
	after := make([]DecapStats, len(r.decaps))
	for i, d := range r.decaps {
		var err error
		if after[i], err = d.Stats(); err != nil {
			t.Fatal(err)
		}
	}
	d := func(i int) DecapStats {
		a, b := after[i], before[i]
		return DecapStats{Decapsulated: a.Decapsulated - b.Decapsulated, Untrusted: a.Untrusted - b.Untrusted,
			SecondHop: a.SecondHop - b.SecondHop, SecondLocal: a.SecondLocal - b.SecondLocal, SecondNoRoute: a.SecondNoRoute - b.SecondNoRoute}
	}
	if got := d(0); got.SecondHop != 1 || got.Untrusted != 1 {
		t.Errorf("backend 0: %+v, want one passed on and one untrusted dropped", got)
	}
	if got := d(2); got.Decapsulated != 1 || got.SecondHop != 0 {
		t.Errorf("backend 2, the second hop: %+v, want the packet taken, none passed on", got)
	}
	if got := d(1); got.Decapsulated != 1 || got.SecondHop != 0 || got.SecondNoRoute != 1 {
		t.Errorf("backend 1, its own second hop: %+v, want the packet taken here", got)
	}
}

// dialPorts opens n connections to vip from the client's ports first,
// first+1, ..., closed at the end of the test, by port.
func (r *routed) dialPorts(t *testing.T, vip netip.AddrPort, first, n int) map[int]*conn {
	t.Helper()
	conns := map[int]*conn{}
	for p := first; p < first+n; p++ {
		cn, err := r.dial(vip, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cn.Close() })
		conns[p] = cn
	}
	return conns
}
