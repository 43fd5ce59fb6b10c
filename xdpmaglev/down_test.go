package xdpmaglev

import (
	"bytes"
	"net"
	"testing"

	"github.com/maglevlb/maglev"
)

// TestDown: a backend set Down takes the service to the table of every
// backend less it (maglev.Table.Without), slot for slot, so that only its
// slots move; its tracked flows are hashed again, the others stay; cleared
// again, the table is the full one exactly; every backend Down empties the
// table.
func TestDown(t *testing.T) {
	lb := newLB(t, Options{M: 1021})
	svc := Service{VIP: vip(false, 443), Proto: TCP}
	bs := testBackends(1, 5, false)
	if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	full, err := maglev.NewWeighted(names(bs), 1021, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Table(svc).Digest() != full.Digest() {
		t.Fatal("the table in use is not the full table")
	}
	const n = 1000
	first := make([]net.HardwareAddr, n)
	for p := range n {
		c := client(false, uint16(20000+p))
		first[p] = predict(t, lb, svc, bs, c)
		wantForward(t, lb, packet(c, svc.VIP, 6, nil), first[p])
	}

	down := append([]Backend(nil), bs...)
	down[2].Down = true
	if err := lb.SetService(svc, down, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	want, err := full.Without(bs[2].Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	got := lb.Table(svc)
	if got.Digest() != want.Digest() || got.Diff(want) != 0 {
		t.Fatalf("the table with %v down differs from full.Without it in %d slots", bs[2].Addr, got.Diff(want))
	}
	before, after := full.AppendSlots(nil), got.AppendSlots(nil)
	moved := 0
	for s := range before {
		if before[s] != after[s] {
			moved++
			if before[s] != 2 {
				t.Fatalf("slot %d moved from %s, which is up", s, full.Backend(int(before[s])))
			}
		}
	}
	if moved != full.Counts()[2] || moved == 0 {
		t.Errorf("%d slots moved, want the %d of the down backend", moved, full.Counts()[2])
	}
	rehashed := 0
	for p := range n {
		c := client(false, uint16(20000+p))
		w := first[p]
		if bytes.Equal(w, bs[2].HW) {
			w = predict(t, lb, svc, bs, c)
			rehashed++
		}
		wantForward(t, lb, packet(c, svc.VIP, 6, nil), w)
	}
	if rehashed == 0 {
		t.Fatal("no flow went to the down backend: the test shows nothing")
	}
	st, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Services[0].Backends {
		if b.Addr == bs[2].Addr {
			t.Errorf("the down backend %v is still in the data plane: %+v", b.Addr, b)
		}
	}

	if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	if lb.Table(svc).Diff(full) != 0 {
		t.Errorf("back up, the table differs from the full table in %d slots", lb.Table(svc).Diff(full))
	}

	all := append([]Backend(nil), bs...)
	for i := range all {
		all[i].Down = true
	}
	if err := lb.SetService(svc, all, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, _ := run(t, lb, packet(client(false, 9), svc.VIP, 6, nil)); v != xdpDrop || lb.Table(svc).NumBackends() != 5 {
		t.Errorf("every backend down: verdict %d, want XDP_DROP (%d), and the base's 5 backends", v, xdpDrop)
	}
}
