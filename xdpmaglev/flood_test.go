package xdpmaglev

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	"golang.org/x/sys/unix"
)

// flood sends n spoofed TCP packets to vip from random sources in
// 198.18.128.0/17 (a sequence of its own for each seed), as frames written
// on the router's link to the load balancer (AF_PACKET): SYNs, or with
// pairs, a SYN then an ACK from each tuple; at most rate tuples a second,
// or as fast as it can with rate 0. It stops after n packets or 20 s, and
// returns how many it sent and the rate.
func (r *routed) flood(t *testing.T, vip netip.AddrPort, n int, pairs bool, rate float64, seed uint32) (int, float64) {
	t.Helper()
	lbMAC := xdptest.Interface(t, r.lbNS, "eth0").HardwareAddr
	type result struct {
		sent int
		rate float64
	}
	res, err := xdptest.In(r.router, func() (result, error) {
		ifc, err := net.InterfaceByName("r-lb")
		if err != nil {
			return result{}, err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return result{}, err
		}
		defer func() { _ = unix.Close(fd) }()
		to := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
		copy(to.Addr[:], lbMAC)
		start := time.Now()
		sent := 0
		rng := seed
		for tuples := 0; sent < n && time.Since(start) < 20*time.Second; tuples++ {
			if rate > 0 {
				if ahead := time.Duration(float64(tuples)/rate*1e9) - time.Since(start); ahead > time.Millisecond {
					time.Sleep(ahead)
				}
			}
			rng = rng*1664525 + 1013904223
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 128 | byte(rng>>25), byte(rng >> 17)}), uint16(rng>>1)|1024)
			frame := packet(src, vip, 6, nil)
			copy(frame[0:6], lbMAC)
			copy(frame[6:12], ifc.HardwareAddr)
			flags := []byte{0x02} // SYN
			if pairs {
				flags = append(flags, 0x10) // then ACK
			}
			for _, f := range flags {
				frame[14+20+13] = f
				binary.BigEndian.PutUint32(frame[14+20+4:], rng)
				err := unix.Sendto(fd, frame, 0, to)
				for err == unix.ENOBUFS && time.Since(start) < 20*time.Second { // the queue is full: the sender's top speed
					time.Sleep(20 * time.Microsecond)
					err = unix.Sendto(fd, frame, 0, to)
				}
				if err != nil {
					return result{}, err
				}
				sent++
			}
		}
		return result{sent, float64(sent) / time.Since(start).Seconds()}, nil
	})
	if err != nil {
		t.Fatalf("flood: %v", err)
	}
	return res.sent, res.rate
}

// TestFlood: 100 active and 30 idle long-lived connections echo through
// the VIP while a flood of spoofed sources, ten times the conntrack size,
// hits it, once of SYNs and once of SYN-then-ACK pairs; then one backend
// is drained and another removed. With the default guard (ConntrackSize
// /130 entries a second), every connection on a backend that stayed, the
// draining one included, keeps working; without it, the flood evicts the
// idle connections' entries and the drain and removal break some of them.
func TestFlood(t *testing.T) {
	packetsOnly(t)
	if testing.Short() {
		t.Skip("a flood of 40,000 packets a case: not in -short")
	}
	const ctSize = 4096
	for _, c := range []struct {
		name   string
		guard  bool
		pairs  bool
		broken func(int) bool
	}{
		{"guard/syn", true, false, func(n int) bool { return n == 0 }},
		{"guard/syn-ack", true, true, func(n int) bool { return n == 0 }},
		{"no-guard/syn-ack", false, true, func(n int) bool { return n > 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			rate := 0 // the default: 31 entries a second, 315 at once, at this size
			if !c.guard {
				rate = -1
			}
			r := newRoutedOpts(t, Options{ConntrackSize: ctSize, FloodRate: rate})
			svc := Service{VIP: r.vip(false, 80), Proto: TCP}
			r.set(t, svc, ForwardIPIP)

			var conns []*conn
			for p := range 130 {
				cn, err := r.dial(svc.VIP, 40000+p)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = cn.Close() }()
				conns = append(conns, cn)
			}
			// The first 100 echo every 20 ms until the flood ends.
			var stop atomic.Bool
			var wg sync.WaitGroup
			var activeErrs atomic.Int64
			for _, cn := range conns[:100] {
				wg.Go(func() {
					for !stop.Load() {
						if err := cn.echo("active"); err != nil {
							activeErrs.Add(1)
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				})
			}
			sent, pps := r.flood(t, svc.VIP, 10*ctSize, c.pairs, 0, 12345)
			stop.Store(true)
			wg.Wait()
			if activeErrs.Load() != 0 {
				t.Errorf("%d active connections failed during the flood", activeErrs.Load())
			}

			// Drain backend 0, remove backend 1.
			var bs []Backend
			for i, a := range r.addrs4 {
				switch i {
				case 0:
					bs = append(bs, Backend{Addr: a, Weight: 0})
				case 1:
				default:
					bs = append(bs, Backend{Addr: a, Weight: 1})
				}
			}
			if err := r.lb.SetService(svc, bs, ServiceOptions{Forward: ForwardIPIP}); err != nil {
				t.Fatal(err)
			}
			broken, onRemoved := 0, 0
			for _, cn := range conns {
				if cn.backend == r.addrs4[1].String() {
					onRemoved++
					continue
				}
				if err := cn.echo("after"); err != nil {
					broken++
				}
			}
			st, err := r.lb.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d spoofed packets at %.0f/s; %d of %d connections on backends that stayed broke; %d routed without an entry, %.2f s flooded",
				sent, pps, broken, len(conns)-onRemoved, st.Conntrack.Flood, st.FloodSeconds)
			if !c.broken(broken) {
				t.Errorf("%d connections broke", broken)
			}
			if c.guard && st.Conntrack.Flood == 0 {
				t.Errorf("the guard routed no flow without an entry")
			}
			if sent < 10*ctSize {
				t.Errorf("sent %d of %d packets in 20 s", sent, 10*ctSize)
			}
		})
	}
}

// TestFloodDefaults: with the default ConntrackSize and FloodRate, floods
// of spoofed SYN-then-ACK tuples at several rates, up to the most this
// sender reaches, together more tuples than connection tracking holds,
// evict no entry of 50 idle connections: after the table changes (a
// fourth backend joins), every one of them still works, and the floods
// wrote no more entries than the guard's bound. The same floods scaled to
// a conntrack of 8,192 entries without the guard evict them: exactly the
// idle connections whose slot moved break, as the tables predict.
func TestFloodDefaults(t *testing.T) {
	packetsOnly(t)
	if testing.Short() {
		t.Skip("floods of 300,000 tuples: not in -short")
	}
	for _, c := range []struct {
		name  string
		opts  Options
		scale int // the floods' tuples are divided by it
	}{
		{"defaults", Options{}, 1},
		{"no-guard", Options{ConntrackSize: 1 << 13, FloodRate: -1}, 4}, // 75,000 tuples, 9 times the entries: the kernel's LRU evicts by approximation, and a turnover of once or twice left some idle entries
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRoutedOpts(t, c.opts)
			svc := Service{VIP: r.vip(false, 80), Proto: TCP}
			var bs []Backend
			for _, a := range r.addrs4[:3] {
				bs = append(bs, Backend{Addr: a, Weight: 1})
			}
			if err := r.lb.SetService(svc, bs, ServiceOptions{Forward: ForwardGUE}); err != nil {
				t.Fatal(err)
			}
			const idle = 50
			var conns []*conn
			before := map[int]string{}
			for p := range idle {
				cn, err := r.dial(svc.VIP, 41000+p)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = cn.Close() }()
				conns = append(conns, cn)
				before[p] = r.predict(svc.VIP, 41000+p)
			}
			st0, err := r.lb.Stats()
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			total := 0
			var rates []string
			for i, round := range []struct {
				tuples int
				rate   float64 // tuples a second; 0: the sender's most
			}{{60000, 20000}, {100000, 50000}, {140000, 0}} {
				n := round.tuples / c.scale
				sent, pps := r.flood(t, svc.VIP, 2*n, true, round.rate, uint32(1000+i))
				if sent != 2*n {
					t.Fatalf("round %d: sent %d of %d packets in 20 s", i, sent, 2*n)
				}
				total += n
				rates = append(rates, fmt.Sprintf("%.0f", pps/2))
			}
			took := time.Since(start)
			st1, err := r.lb.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if total <= r.lb.opts.ConntrackSize {
				t.Fatalf("%d tuples, no more than the %d entries of connection tracking: the floods show nothing", total, r.lb.opts.ConntrackSize)
			}
			inserts := st1.Conntrack.Inserts - st0.Conntrack.Inserts
			if r.lb.opts.FloodRate > 0 {
				if bound := float64(r.lb.opts.FloodRate) * (took.Seconds() + 10); float64(inserts) > bound {
					t.Errorf("the floods wrote %d entries in %v, more than the guard's bound %.0f", inserts, took, bound)
				}
			}

			// The fourth backend joins: the idle connections on the slots
			// that moved keep their backend only through their entries.
			if err := r.lb.SetService(svc, append(bs, Backend{Addr: r.addrs4[3], Weight: 1}), ServiceOptions{Forward: ForwardGUE}); err != nil {
				t.Fatal(err)
			}
			var moved, broken []int
			for p, cn := range conns {
				if r.predict(svc.VIP, 41000+p) != before[p] {
					moved = append(moved, p)
				}
				if err := cn.echo("after"); err != nil {
					broken = append(broken, p)
				}
			}
			t.Logf("%d tuples at %s tuples/s in %v (%d entries written); %d of %d idle connections on moved slots; broken: %v",
				total, strings.Join(rates, ", "), took.Round(time.Millisecond), inserts, len(moved), idle, broken)
			if len(moved) == 0 {
				t.Fatal("no idle connection's slot moved: the table change shows nothing")
			}
			want := []int(nil)
			if r.lb.opts.FloodRate < 0 {
				want = moved
			}
			if !slices.Equal(broken, want) {
				t.Errorf("broken idle connections %v, want %v", broken, want)
			}
		})
	}
}
