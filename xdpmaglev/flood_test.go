package xdpmaglev

import (
	"encoding/binary"

	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// flood sends n spoofed TCP packets to vip from random sources in
// 198.18.128.0/17, as frames written on the router's link to the load
// balancer (AF_PACKET): SYNs, or with pairs, a SYN then an ACK from each
// tuple. It stops after n packets or 20 s, and returns how many it sent
// and the rate.
func (r *routed) flood(t *testing.T, vip netip.AddrPort, n int, pairs bool) (int, float64) {
	t.Helper()
	lbMAC, err := in(r.lbNS, func() (net.HardwareAddr, error) {
		ifc, err := net.InterfaceByName("eth0")
		if err != nil {
			return nil, err
		}
		return ifc.HardwareAddr, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		sent int
		rate float64
	}
	res, err := in(r.router, func() (result, error) {
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
		rng := uint32(12345)
		for sent < n && time.Since(start) < 20*time.Second {
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
// is drained and another removed. With the guard, every connection on a
// backend that stayed, the draining one included, keeps working; without
// it, the flood evicts the idle connections' entries and the drain and
// removal break some of them.
func TestFlood(t *testing.T) {
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
			rate := 8000 // a second a CPU: 1,000 a window, well below what the sender reaches
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
			sent, pps := r.flood(t, svc.VIP, 10*ctSize, c.pairs)
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
			if err := r.lb.SetServiceOptions(svc, bs, ServiceOptions{Forward: ForwardIPIP}); err != nil {
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
