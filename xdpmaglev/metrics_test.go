package xdpmaglev

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestMetrics sends real packets through the program (BPF_PROG_TEST_RUN)
// and reads every instrument back through the OpenTelemetry SDK: the
// counts are exactly those of the packets sent, per backend as the Go side
// predicts, summed over CPUs.
func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) }) // nothing is pushed
	lb := newLB(t, Options{MeterProvider: provider})
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	empty := Service{VIP: vip(false, 81), Proto: TCP}
	bs := testBackends(1, 3, false)
	if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := lb.SetService(empty, nil, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}

	// 40 flows of two packets each: 40 misses and inserts, 40 hits.
	perBackend := map[string]int{}
	owner := map[uint16]string{}
	send := func(port uint16, dst netip.AddrPort, want uint32) int {
		in := packet(client(false, port), dst, 6, nil)
		if v, _ := run(t, lb, in); v != want {
			t.Fatalf("port %d to %v: verdict %d, want %d", port, dst, v, want)
		}
		return len(in)
	}
	predict := func(port uint16) string {
		return lb.Table(svc).LookupHash(FlowHash(0, client(false, port), svc.VIP, 6))
	}
	frame := 0
	for port := uint16(1000); port < 1040; port++ {
		owner[port] = predict(port)
		for range 2 {
			frame = send(port, svc.VIP, xdpTX)
			perBackend[owner[port]]++
		}
	}
	// One backend removed: each of its flows' next packet is a stale miss,
	// hashed again by the new table.
	gone := bs[0].Addr.String()
	if err := lb.SetService(svc, bs[1:], ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	goneCount := perBackend[gone] // its counters leave with it
	delete(perBackend, gone)
	stale := 0
	for port := uint16(1000); port < 1040; port++ {
		if owner[port] == gone {
			send(port, svc.VIP, xdpTX)
			perBackend[predict(port)]++
			stale++
		}
	}
	if stale == 0 {
		t.Fatal("no flow was on the removed backend: choose other ports")
	}
	for port := uint16(2000); port < 2003; port++ {
		send(port, netip.MustParseAddrPort("198.19.255.9:80"), xdpPass) // no service
	}
	for port := uint16(3000); port < 3004; port++ {
		send(port, empty.VIP, xdpDrop) // no backend
	}
	arp := append(append(append([]byte{}, lbMAC...), clientMAC...), 0x08, 0x06)
	for range 2 {
		if v, _ := run(t, lb, append(arp, make([]byte, 28)...)); v != xdpPass {
			t.Fatalf("ARP: verdict %d", v)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.ScopeMetrics) != 1 || rm.ScopeMetrics[0].Scope.Name != "github.com/maglevlb/maglev/xdpmaglev" {
		t.Fatalf("scopes %+v", rm.ScopeMetrics)
	}
	got := map[string]metricdata.Metrics{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		got[m.Name] = m
	}
	// points returns a metric's points by their attributes, as
	// "key=value,key=value", after checking its unit and kind.
	points := func(name, unit string) map[string]int64 {
		t.Helper()
		m, ok := got[name]
		if !ok {
			t.Fatalf("no metric %s; have %v", name, slices.Sorted(maps.Keys(got)))
		}
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok || !sum.IsMonotonic || sum.Temporality != metricdata.CumulativeTemporality || m.Unit != unit {
			t.Fatalf("%s: unit %q, data %T %+v: want a cumulative monotonic int64 sum in %q", name, m.Unit, m.Data, m.Data, unit)
		}
		out := map[string]int64{}
		for _, p := range sum.DataPoints {
			var kv []string
			for _, a := range p.Attributes.ToSlice() {
				kv = append(kv, string(a.Key)+"="+a.Value.String())
			}
			out[strings.Join(kv, ",")] = p.Value
		}
		return out
	}
	check := func(name, unit string, want map[string]int64) {
		t.Helper()
		if p := points(name, unit); !maps.Equal(p, want) {
			t.Errorf("%s = %v, want %v", name, p, want)
		}
	}
	s := "maglev.service=" + svc.String()
	wantPackets, wantBytes := map[string]int64{}, map[string]int64{}
	total := 0
	for b, n := range perBackend {
		wantPackets["maglev.backend="+b+","+s] = int64(n)
		wantBytes["maglev.backend="+b+","+s] = int64(n * frame)
		total += n
	}
	if total+goneCount != 80+stale {
		t.Fatalf("%d packets counted by the test, want %d", total+goneCount, 80+stale)
	}
	total = 80 + stale
	check("maglev.xdp.packets", "{packet}", wantPackets)
	check("maglev.xdp.bytes", "By", wantBytes)
	e := "maglev.service=" + empty.String()
	check("maglev.xdp.service.packets", "{packet}", map[string]int64{s: int64(total), e: 0})
	check("maglev.xdp.service.bytes", "By", map[string]int64{s: int64(total * frame), e: 0})
	// The 4 packets to the empty service miss too; those to no service
	// are not looked up.
	check("maglev.xdp.conntrack.lookups", "{lookup}", map[string]int64{"maglev.outcome=hit": 40, "maglev.outcome=miss": int64(40 + stale + 4)})
	check("maglev.xdp.conntrack.stale", "{lookup}", map[string]int64{"": int64(stale)})
	check("maglev.xdp.conntrack.inserts", "{entry}", map[string]int64{"": int64(40 + stale)})
	check("maglev.xdp.conntrack.reopened", "{lookup}", map[string]int64{"": 0})
	check("maglev.xdp.conntrack.closed", "{entry}", map[string]int64{"": 0})
	passed := map[string]int64{}
	for _, r := range []string{"not_ip", "vlan", "truncated", "malformed", "not_tcp_udp", "fragment", "ip_options", "ipv6_ext", "no_service"} {
		passed["maglev.reason="+r] = 0
	}
	passed["maglev.reason=no_service"], passed["maglev.reason=not_ip"] = 3, 2
	check("maglev.xdp.passed", "{packet}", passed)
	dropped := map[string]int64{}
	for _, r := range []string{"no_backend", "too_big", "no_route", "no_neighbor", "forwarding_off", "no_room", "vip_no_service", "vip_fragment", "vip_icmp", "vip_other"} {
		dropped["maglev.reason="+r] = 0
	}
	dropped["maglev.reason=no_backend"] = 4
	check("maglev.xdp.dropped", "{packet}", dropped)
	check("maglev.xdp.conntrack.flood", "{lookup}", map[string]int64{"": 0})
	check("maglev.xdp.icmp", "{packet}", map[string]int64{"maglev.kind=forwarded": 0, "maglev.kind=too_big": 0})
	check("maglev.xdp.stateless", "{packet}", map[string]int64{"": 0}) // TestMetricsSecondChance counts them
	check("maglev.xdp.second_hops", "{packet}", map[string]int64{"": 0})
	quic := map[string]int64{"maglev.route=cid": 0} // TestMetricsQUIC counts them
	for _, r := range []string{"initial", "long_other", "unroutable", "unknown_config", "unknown_server", "short"} {
		quic["maglev.reason="+r+",maglev.route=table"] = 0
	}
	check("maglev.xdp.quic", "{packet}", quic)
	check("maglev.xdp.quic.decrypted", "{packet}", map[string]int64{"": 0})
	if m, ok := got["maglev.xdp.flood.time"].Data.(metricdata.Sum[float64]); !ok || len(m.DataPoints) != 1 || m.DataPoints[0].Value != 0 || got["maglev.xdp.flood.time"].Unit != "s" {
		t.Errorf("maglev.xdp.flood.time = %+v, want one point of 0 s", got["maglev.xdp.flood.time"])
	}
	if len(got) != 18 { // and maglev.xdp.driver, which an LB without an interface has no points of
		t.Errorf("%d metrics, want 18: %v", len(got), slices.Sorted(maps.Keys(got)))
	}

	// After Close, the callback observes nothing, and is unregistered.
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	rm = metricdata.ResourceMetrics{}
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && len(sum.DataPoints) > 0 {
				t.Errorf("after Close: %s has %d points", m.Name, len(sum.DataPoints))
			}
		}
	}
}

// TestMetricsSecondChance reads maglev.xdp.stateless and
// maglev.xdp.second_hops back: a stateless GUE service with second
// chance, whose table changes, sends 200 flows' packets, each counted
// stateless, and those of the moved slots with a second hop, as the
// tables predict.
func TestMetricsSecondChance(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) }) // nothing is pushed
	f := newFixtureNet(t)
	lb := fixtureLB(t, f, Options{MeterProvider: provider})
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	opts := ServiceOptions{Forward: ForwardGUE, Source: source(false), SecondChance: time.Hour, Conntrack: ConntrackOff}
	if err := lb.SetService(svc, encapBackends(3, false), opts); err != nil {
		t.Fatal(err)
	}
	old := lb.Table(svc)
	if err := lb.SetService(svc, encapBackends(4, false), opts); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for port := range uint16(200) {
		c := client(false, 2000+port)
		h := FlowHash(lb.opts.Seed, c, svc.VIP, 6)
		if old.LookupHash(h) != lb.Table(svc).LookupHash(h) {
			moved++
		}
		if v, _ := f.run(t, lb.objs.XdpMaglev, packet(c, svc.VIP, 6, nil)); v != xdpTX {
			t.Fatalf("port %d: verdict %d", 2000+port, v)
		}
	}
	if moved == 0 {
		t.Fatal("no flow's slot moved: the test shows nothing")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"maglev.xdp.stateless": 200, "maglev.xdp.second_hops": int64(moved)}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		w, ok := want[m.Name]
		if !ok {
			continue
		}
		delete(want, m.Name)
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok || m.Unit != "{packet}" || len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != w {
			t.Errorf("%s: unit %q, %+v; want one point of %d {packet}", m.Name, m.Unit, m.Data, w)
		}
	}
	if len(want) > 0 {
		t.Errorf("no metrics %v", slices.Sorted(maps.Keys(want)))
	}
}

// TestMetricsQUIC reads maglev.xdp.quic and maglev.xdp.quic.decrypted
// back: a QUIC-LB service's packets by connection ID, by the table for
// each reason, and the encrypted IDs decrypted.
func TestMetricsQUIC(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) }) // nothing is pushed
	lb := newLB(t, Options{MeterProvider: provider, M: 251})
	svc := Service{VIP: vip(false, 443), Proto: UDP}
	bs := testBackends(1, 3, false)
	cs := quicService(t, lb, svc, bs, ServiceOptions{}, quicModes[1].c)
	for i, b := range bs {
		cid := newCID(t, cs[0], b.Addr)
		for port := range uint16(10) {
			sendTo(t, lb, bs, client(false, port), svc, shortHeader(cid))
		}
		sendTo(t, lb, bs, client(false, uint16(100+i)), svc, longHeader(quicV1, 0, cid))
	}
	sendTo(t, lb, bs, client(false, 200), svc, nil)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int64{
		"maglev.xdp.quic": {"maglev.route=cid": 30, "maglev.reason=initial,maglev.route=table": 3, "maglev.reason=short,maglev.route=table": 1,
			"maglev.reason=long_other,maglev.route=table": 0, "maglev.reason=unroutable,maglev.route=table": 0,
			"maglev.reason=unknown_config,maglev.route=table": 0, "maglev.reason=unknown_server,maglev.route=table": 0},
		"maglev.xdp.quic.decrypted": {"": 3},
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		w, ok := want[m.Name]
		if !ok {
			continue
		}
		delete(want, m.Name)
		sum, ok := m.Data.(metricdata.Sum[int64])
		got := map[string]int64{}
		for _, p := range sum.DataPoints {
			var kv []string
			for _, a := range p.Attributes.ToSlice() {
				kv = append(kv, string(a.Key)+"="+a.Value.String())
			}
			got[strings.Join(kv, ",")] = p.Value
		}
		if !ok || m.Unit != "{packet}" || !maps.Equal(got, w) {
			t.Errorf("%s: unit %q, %v; want %v", m.Name, m.Unit, got, w)
		}
	}
	if len(want) > 0 {
		t.Errorf("no metrics %v", slices.Sorted(maps.Keys(want)))
	}
}
