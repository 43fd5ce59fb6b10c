package xdpmaglev

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
)

// TestResize changes the size M of a service back and forth, 251 and
// 65,537, while packets of 64 flows go through the program, stateless and
// with connection tracking: every packet leaves to its flow's backend in
// the table of either size, never to a slot one size's index names in the
// other's table (the program indexes the table by the service's size,
// and reads it from the table's slot 0 while it changes). After each
// change the service's value holds the new size for packets.
func TestResize(t *testing.T) {
	for _, ct := range []ConntrackMode{ConntrackOff, ConntrackOn} {
		t.Run(fmt.Sprint(ct), func(t *testing.T) {
			lb := newLB(t, Options{})
			svc := Service{VIP: vip(false, 80), Proto: TCP}
			bs := testBackends(1, 40, false)
			sizes := []int{251, 65537}
			const flows = 64
			ok := make([]map[string]bool, flows) // each flow's backend in either table
			for i := range ok {
				ok[i] = map[string]bool{}
			}
			for _, m := range sizes {
				if err := lb.SetService(svc, bs, ServiceOptions{M: m, Conntrack: ct}); err != nil {
					t.Fatal(err)
				}
				for i := range flows {
					ok[i][predict(t, lb, svc, bs, client(false, uint16(1000+i))).String()] = true
				}
			}
			ins := make([][]byte, flows)
			for i := range ins {
				ins[i] = packet(client(false, uint16(1000+i)), svc.VIP, 6, nil)
			}
			var stop atomic.Bool
			done := make(chan error, 1)
			var sent atomic.Int64
			go func() {
				defer close(done)
				for n := 0; !stop.Load(); n++ {
					i := n % flows
					v, out, err := lb.objs.XdpMaglev.Test(ins[i])
					if err != nil {
						done <- err
						return
					}
					// With connection tracking, a flow keeps the backend its
					// entry names: of either table too.
					if to := net.HardwareAddr(out[:6]).String(); v != xdpTX || !ok[i][to] {
						var sv maglevService
						mp, k := lb.key(svc)
						_ = mp.Lookup(k, &sv)
						done <- fmt.Errorf("flow %d: verdict %d to %v, want XDP_TX to one of %v; %+v", i, v, to, ok[i], sv)
						return
					}
					sent.Add(1)
				}
			}()
			for r := range 20 {
				m := sizes[r%2]
				if err := lb.SetService(svc, bs, ServiceOptions{M: m, Conntrack: ct}); err != nil {
					t.Fatal(err)
				}
				var v maglevService
				mp, k := lb.key(svc)
				if err := mp.Lookup(k, &v); err != nil {
					t.Fatal(err)
				}
				if v.M != uint32(m) || v.LookupM != uint32(m) {
					t.Fatalf("after the change to %d: the service's value has m %d, lookup_m %d", m, v.M, v.LookupM)
				}
			}
			stop.Store(true)
			if err := <-done; err != nil {
				t.Fatal(err, counters(t, lb))
			}
			if sent.Load() < 100 {
				t.Fatalf("%d packets in 20 changes: the test shows nothing", sent.Load())
			}
		})
	}
}
