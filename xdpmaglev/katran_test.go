package xdpmaglev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/bits"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// BenchmarkKatran measures Katran's XDP program (balancer.bpf.c of
// github.com/facebookincubator/katran) through the harness of
// BenchmarkForward, for a comparison on the same packets and the same
// service: VIP vip(v6, 80) TCP over the 100 backends of encapBackends, its
// ring of Katran's size filled from a maglev table of those backends, the
// fixture's gateway MAC as Katran's default router, per-CPU LRU maps of
// katranLRUSize entries each (Katran's connection table: one map per CPU,
// as Katran's userspace makes them). Each case runs 100,000 repeats per
// call of bpf/katran_bench.c's wrapper, which does around Katran's program
// what bpf/bench.c's does around ours (the restore after each repeat, a
// new source for new_flow), and reports ns/packet as BenchmarkForward
// does. The cases are named as BenchmarkForward's: ipip and ipip6 (IPv4 in
// IPv4, IPv6 in IPv6), established (one flow, its LRU entry found),
// new_flow (a new flow each repeat: an LRU miss, the ring, an LRU write),
// and stateless, stateless_new_flow (the VIP's F_LRU_BYPASS flag: neither
// lookup nor write, every packet by the ring). Katran sends by XDP_TX to
// the fixed gateway MAC; ours looks the route up (bpf_fib_lookup) and sends
// by XDP_REDIRECT.
//
// The objects are not built here: bench/katran.sh builds them from a
// Katran checkout with Katran's own build flags and names them in
// XDPMAGLEV_KATRAN (the default flags) and XDPMAGLEV_KATRAN_UNGUARDED (the
// same, with Katran's new-connection rate limit, MAX_CONN_RATE, out of
// reach). With the default limit (125,000 new connections a second per
// CPU) Katran writes no LRU entry for most of the benchmark's new flows,
// while BenchmarkForward's new_flow runs ours with its flood guard off, so
// the new_flow cases run on the unguarded object and are skipped without
// it; the others run on the default one.
//
// Each case checks once that Katran's own program (balancer_ingress, not
// the wrapper) sends the packet as IPIP or IPv6-in-IPv6 to the backend
// that Katran's hash of the flow and the ring name, and, by Katran's
// counters and LRU maps, that its packets took the path it names.
func BenchmarkKatran(b *testing.B) {
	path := os.Getenv("XDPMAGLEV_KATRAN")
	if path == "" {
		b.Skip("XDPMAGLEV_KATRAN names no object: bench/katran.sh KATRAN_DIR builds bpf/katran_bench.c from a Katran checkout and runs this benchmark")
	}
	needBPF(b)
	f := newFixtureNet(b)
	guarded := loadKatran(b, f, path)
	var unguarded *katranLB
	if p := os.Getenv("XDPMAGLEV_KATRAN_UNGUARDED"); p != "" {
		unguarded = loadKatran(b, f, p)
		if !unguarded.c.unreachable() {
			b.Fatalf("%s: MAX_CONN_RATE is %d, which a CPU can reach in a second", p, unguarded.c.MaxConnRate)
		}
	}
	const repeat = 100_000
	type kcase struct {
		v6, newFlow, stateless, quic bool
	}
	bench := func(c kcase) func(*testing.B) {
		return func(b *testing.B) {
			k := guarded
			if c.newFlow && !c.stateless {
				if k = unguarded; k == nil {
					b.Skip("XDPMAGLEV_KATRAN_UNGUARDED names no object: Katran's default MAX_CONN_RATE writes no LRU entry for most new flows (bench/katran.sh builds both)")
				}
			}
			var flags uint32
			if c.stateless {
				flags = k.c.FLRUBypass
			}
			k.setVIPFlags(b, c.v6, flags)
			in := packet(client(c.v6, 1), vip(c.v6, 80), 6, nil)
			flow := katranFlowKey(client(c.v6, 1), vip(c.v6, 80))
			var quicBefore uint64
			if c.quic {
				in, flow = k.quicService(b, c.v6)
				quicBefore = k.cidRouted(b)
			}
			k.forget(b, flow)
			k.checkFrame(b, in, c.v6)
			if c.stateless {
				k.forget(b, flow) // the check wrote none; a later one would be the benchmark's
			}
			prog := k.bench
			if c.newFlow {
				prog = k.benchNew
			}
			type result struct {
				v uint32
				d time.Duration
			}
			seqBefore := k.seqs(b)
			before := k.counts(b)
			var total time.Duration
			for range b.N {
				r, err := xdptest.In(f.ns, func() (result, error) {
					v, d, err := prog.Benchmark(in, repeat, nil)
					return result{v, d}, err
				})
				if err != nil || r.v != xdpTX {
					b.Fatalf("verdict %d, want %d (XDP_TX): %v", r.v, xdpTX, err)
				}
				total += r.d
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
			got := k.counts(b).minus(before)
			// n packets at least: Program.Benchmark runs a call again
			// whole when a signal interrupts it (as in BenchmarkForward).
			n := uint64(b.N) * repeat
			if got.total < n || got.tx < n || got.fallback != 0 {
				b.Fatalf("of %d packets: %d reached Katran's LRU stage, %d XDP_TX, %d used the fallback LRU", n, got.total, got.tx, got.fallback)
			}
			switch {
			case c.quic: // routed by the server ID, no LRU miss
				if cid := k.cidRouted(b) - quicBefore; got.misses != 0 || cid < n {
					b.Fatalf("of %d QUIC packets: %d routed by their connection ID, %d LRU misses", n, cid, got.misses)
				}
			case !c.newFlow && !c.stateless: // one miss at most per CPU's LRU, its first packet
				if got.misses > uint64(k.cpus) {
					b.Fatalf("of %d packets of one flow: %d LRU misses, over one per CPU (%d)", n, got.misses, k.cpus)
				}
			case got.misses < n:
				b.Fatalf("of %d packets: %d LRU misses, want every packet routed by the ring", n, got.misses)
			}
			// Whether the LRU was written: the flow's entry, or each CPU's
			// last new flow's.
			wantEntry := !c.stateless
			if c.newFlow {
				after := k.seqs(b)
				ran := 0
				for cpu := range after {
					if after[cpu] == seqBefore[cpu] {
						continue
					}
					ran++
					last := katranFlowKey(benchSource(c.v6, cpu, after[cpu]), vip(c.v6, 80))
					if has := k.lruHas(b, cpu, last); has != wantEntry {
						b.Fatalf("CPU %d's last new flow: an LRU entry %v, want %v", cpu, has, wantEntry)
					}
				}
				if ran == 0 {
					b.Fatal("no CPU's new-flow sequence moved")
				}
			} else if c.stateless {
				for cpu := range k.cpus {
					if k.lruHas(b, cpu, flow) {
						b.Fatalf("CPU %d's LRU holds the flow of a VIP with F_LRU_BYPASS", cpu)
					}
				}
			}
		}
	}
	for _, c := range []struct {
		name string
		kcase
	}{
		{"ipip/established", kcase{}},
		{"ipip6/established", kcase{v6: true}},
		{"ipip/new_flow", kcase{newFlow: true}},
		{"ipip6/new_flow", kcase{v6: true, newFlow: true}},
		{"ipip/stateless", kcase{stateless: true}},
		{"ipip/stateless_new_flow", kcase{newFlow: true, stateless: true}},
		{"ipip6/stateless", kcase{v6: true, stateless: true}},
		{"ipip6/stateless_new_flow", kcase{v6: true, newFlow: true, stateless: true}},
		{"ipip/quic", kcase{quic: true}},
		{"ipip6/quic", kcase{v6: true, quic: true}},
	} {
		b.Run(c.name, bench(c.kcase))
	}
}

// katranLRUSize is the size of each CPU's LRU map of Katran: our
// benchmark's conntrack size, so that a CPU's new flows fill the same
// number of entries in either.
const katranLRUSize = 1 << 16

// katranConsts is struct katran_consts of bpf/katran_bench.c: Katran's
// build-time constants as the object has them.
type katranConsts struct {
	MaxConnRate                            uint64
	RingSize, MaxVIPs, HashSeed, HashSeed6 uint32
	FLRUBypass, FIPv6                      uint32
	LRUCntrs, LRUMissCntr, FallbackLRUCntr uint32
	XDPTXCntr                              uint32
	FQUICVIP, MaxQUICReals                 uint32
}

// unreachable reports whether no CPU can reach MAX_CONN_RATE new
// connections in a second: not at one packet a nanosecond.
func (c katranConsts) unreachable() bool { return c.MaxConnRate >= uint64(time.Second) }

// Katran's map values and keys, laid out as its balancer_structs.h lays
// them out (addresses and ports in network order).
type (
	katranVIPKey struct { // struct vip_definition
		Addr  [16]byte
		Port  [2]byte
		Proto uint8
		_     uint8
	}
	katranVIPMeta struct{ Flags, VIPNum uint32 } // struct vip_meta
	katranReal    struct {                       // struct real_definition
		Addr  [16]byte
		Flags uint8
		_     [3]byte
	}
	katranFlow struct { // struct flow_key
		Src, Dst [16]byte
		Ports    [4]byte
		Proto    uint8
		_        [3]byte
	}
	katranLRUEntry struct { // struct real_pos_lru
		Pos   uint32
		_     uint32
		ATime uint64
	}
	katranStat struct{ V1, V2 uint64 } // struct lb_stats
)

// A katranLB is one loaded Katran object configured for the benchmark's
// service in both families.
type katranLB struct {
	f                        *fixtureNet
	c                        katranConsts
	cpus                     int
	ingress, bench, benchNew *ebpf.Program
	vips, stats, seq         *ebpf.Map
	serverIDs, quicStats     *ebpf.Map // server_id_map, quic_stats_map
	realIDs                  map[netip.Addr]uint32
	lrus                     []*ebpf.Map // by CPU
	ring                     map[bool][]netip.Addr
	vipNum                   map[bool]uint32
}

func loadKatran(b *testing.B, f *fixtureNet, path string) *katranLB {
	b.Helper()
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		b.Fatalf("%s: %v", path, err)
	}
	k := &katranLB{f: f, ring: map[bool][]netip.Addr{}, vipNum: map[bool]uint32{}, realIDs: map[netip.Addr]uint32{}}
	v := spec.Variables["katran_consts"]
	if v == nil {
		b.Fatalf("%s has no katran_consts: not built from bpf/katran_bench.c", path)
	}
	if err := v.Get(&k.c); err != nil {
		b.Fatal(err)
	}
	if k.cpus, err = ebpf.PossibleCPU(); err != nil {
		b.Fatal(err)
	}
	outer := spec.Maps["lru_mapping"]
	if outer == nil || outer.InnerMap == nil || int(outer.MaxEntries) < k.cpus {
		b.Fatalf("%s: no lru_mapping for %d CPUs", path, k.cpus)
	}
	outer.InnerMap.MaxEntries = katranLRUSize
	coll, err := xdptest.In(f.ns, func() (*ebpf.Collection, error) { return ebpf.NewCollection(spec) })
	if err != nil {
		b.Fatalf("loading %s: %v", path, err)
	}
	b.Cleanup(coll.Close)
	for name, p := range map[string]**ebpf.Program{
		"balancer_ingress":     &k.ingress,
		"xdp_katran_bench":     &k.bench,
		"xdp_katran_bench_new": &k.benchNew,
	} {
		if *p = coll.Programs[name]; *p == nil {
			b.Fatalf("%s has no program %s", path, name)
		}
	}
	for name, m := range map[string]**ebpf.Map{"vip_map": &k.vips, "stats": &k.stats, "katran_bench_seq": &k.seq,
		"server_id_map": &k.serverIDs, "quic_stats_map": &k.quicStats} {
		if *m = coll.Maps[name]; *m == nil {
			b.Fatalf("%s has no map %s", path, name)
		}
	}
	// A connection table per CPU, as Katran's userspace gives each
	// forwarding CPU (flags 0: the LRU lists shared, as ours).
	for cpu := range k.cpus {
		m, err := ebpf.NewMap(outer.InnerMap)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = m.Close() })
		if err := coll.Maps["lru_mapping"].Put(uint32(cpu), m); err != nil {
			b.Fatal(err)
		}
		k.lrus = append(k.lrus, m)
	}
	// Katran's default router: position 0 of ctl_array.
	var mac [8]byte
	copy(mac[:], gwMAC)
	if err := coll.Maps["ctl_array"].Put(uint32(0), mac); err != nil {
		b.Fatal(err)
	}
	// The service in each family: its reals (ids from 1: Katran's id 0 is
	// no real) and its ring, from a maglev table of the same backends.
	id := uint32(1)
	for num, v6 := range []bool{false, true} {
		bs := encapBackends(100, v6)
		ids := map[string]uint32{}
		names := make([]string, len(bs))
		for i, be := range bs {
			var r katranReal
			copy(r.Addr[:], addrBytes(be.Addr))
			if v6 {
				r.Flags = uint8(k.c.FIPv6)
			}
			if err := coll.Maps["reals"].Put(id, r); err != nil {
				b.Fatal(err)
			}
			names[i] = be.Addr.String()
			ids[names[i]] = id
			k.realIDs[be.Addr] = id
			id++
		}
		t, err := maglev.New(names, int(k.c.RingSize), nil)
		if err != nil {
			b.Fatal(err)
		}
		keys := make([]uint32, 0, t.Size())
		vals := make([]uint32, 0, t.Size())
		for slot, owner := range t.AppendSlots(nil) {
			name := t.Backend(int(owner))
			keys = append(keys, uint32(num)*k.c.RingSize+uint32(slot))
			vals = append(vals, ids[name])
			k.ring[v6] = append(k.ring[v6], netip.MustParseAddr(name))
		}
		if _, err := coll.Maps["ch_rings"].BatchUpdate(keys, vals, nil); err != nil {
			b.Fatal(err)
		}
		k.vipNum[v6] = uint32(num)
		k.setVIPFlags(b, v6, 0)
	}
	return k
}

// katranQUICBackend is the backend of encapBackends whose server ID the
// QUIC cases' connection ID carries, in both programs.
const katranQUICBackend = 7

// quicService sets up Katran's QUIC VIP of the family: the VIP at port
// 443, UDP, with F_QUIC_VIP, on the family's ring; server ID 1000 + the
// backend's real id in server_id_map, naming backend katranQUICBackend;
// and returns a short header packet to it whose connection ID carries the
// server ID (Katran's connection ID version 1: the top two bits 01, then
// the 16-bit server ID, as parse_quic reads it), and the flow's LRU key.
func (k *katranLB) quicService(b *testing.B, v6 bool) ([]byte, katranFlow) {
	b.Helper()
	ap := vip(v6, 443)
	var key katranVIPKey
	copy(key.Addr[:], addrBytes(ap.Addr()))
	binary.BigEndian.PutUint16(key.Port[:], ap.Port())
	key.Proto = 17
	if err := k.vips.Put(key, katranVIPMeta{Flags: k.c.FQUICVIP, VIPNum: k.vipNum[v6]}); err != nil {
		b.Fatal(err)
	}
	real := k.realIDs[encapBackends(100, v6)[katranQUICBackend].Addr]
	sid := 1000 + real
	if err := k.serverIDs.Put(sid, real); err != nil {
		b.Fatal(err)
	}
	cid := make([]byte, 8)
	cid[0] = 0x40 | byte(sid>>10)&0x3f
	cid[1] = byte(sid >> 2)
	cid[2] = byte(sid&3) << 6
	in := packet(client(v6, 1), ap, 17, shortHeader(cid))
	f := katranFlowKey(client(v6, 1), ap)
	f.Proto = 17
	return in, f
}

// cidRouted returns Katran's count of QUIC packets routed by their
// connection ID (struct lb_quic_packets_stats's cid_routed), over the CPUs.
func (k *katranLB) cidRouted(b *testing.B) uint64 {
	b.Helper()
	var per [][13]uint64
	if err := k.quicStats.Lookup(uint32(0), &per); err != nil {
		b.Fatal(err)
	}
	var n uint64
	for _, p := range per {
		n += p[4]
	}
	return n
}

// setVIPFlags writes the family's VIP with vip_meta flags.
func (k *katranLB) setVIPFlags(b *testing.B, v6 bool, flags uint32) {
	b.Helper()
	ap := vip(v6, 80)
	var key katranVIPKey
	copy(key.Addr[:], addrBytes(ap.Addr()))
	binary.BigEndian.PutUint16(key.Port[:], ap.Port())
	key.Proto = 6
	if err := k.vips.Put(key, katranVIPMeta{Flags: flags, VIPNum: k.vipNum[v6]}); err != nil {
		b.Fatal(err)
	}
}

// checkFrame runs Katran's program once on in (a TCP packet of packet's)
// and checks the frame it sends: XDP_TX to the gateway's MAC from the
// address the packet was sent to, an outer IPv4 header (protocol 4) or
// IPv6 header (next header 41) whose destination is the backend that
// Katran's hash of the flow (katranHash) and the ring name, around the
// packet unchanged.
func (k *katranLB) checkFrame(b *testing.B, in []byte, v6 bool) {
	b.Helper()
	v, out := k.f.run(b, k.ingress, in)
	if v != xdpTX {
		b.Fatalf("balancer_ingress: verdict %d, want %d (XDP_TX)", v, xdpTX)
	}
	src := netip.AddrPortFrom(addrAt(in, v6, false), binary.BigEndian.Uint16(in[l4Off(v6):]))
	dst := netip.AddrPortFrom(addrAt(in, v6, true), binary.BigEndian.Uint16(in[l4Off(v6)+2:]))
	h := katranHash(src, dst.Port(), k.c)
	want := k.ring[v6][h%k.c.RingSize]
	if dst.Port() == 443 { // the QUIC VIP: the backend its connection ID names
		want = encapBackends(100, v6)[katranQUICBackend].Addr
	}
	outer := 20
	if v6 {
		outer = 40
	}
	if len(out) != len(in)+outer {
		b.Fatalf("balancer_ingress sent %d bytes for %d, want %d more", len(out), len(in), outer)
	}
	if !bytes.Equal(out[0:6], gwMAC) || !bytes.Equal(out[6:12], in[0:6]) || !bytes.Equal(out[12:14], in[12:14]) {
		b.Fatalf("balancer_ingress's Ethernet header % x, want to %v from % x, type % x", out[:14], gwMAC, in[0:6], in[12:14])
	}
	ip := out[14 : 14+outer]
	var got netip.Addr
	if v6 {
		got = netip.AddrFrom16([16]byte(ip[24:40]))
		if ip[0]>>4 != 6 || ip[6] != 41 || ip[7] == 0 || int(binary.BigEndian.Uint16(ip[4:])) != len(in)-14 {
			b.Fatalf("balancer_ingress's outer IPv6 header % x: want version 6, next header 41, payload %d", ip, len(in)-14)
		}
	} else {
		got = netip.AddrFrom4([4]byte(ip[16:20]))
		if ip[0] != 0x45 || ip[9] != 4 || ip[8] == 0 || int(binary.BigEndian.Uint16(ip[2:])) != len(in)-14+20 || xdptest.Checksum(ip) != 0 {
			b.Fatalf("balancer_ingress's outer IPv4 header % x: want IPIP of %d bytes with a valid checksum", ip, len(in)-14+20)
		}
	}
	if got != want {
		b.Fatalf("balancer_ingress sent the flow %v -> %v to %v; the ring names %v", src, dst, got, want)
	}
	if !bytes.Equal(out[14+outer:], in[14:]) {
		b.Fatal("balancer_ingress changed the packet it encapsulated")
	}
}

// katranCounts are Katran's counters the benchmark reads, summed over the
// CPUs: packets that reached its LRU stage, LRU misses, lookups that found
// no per-CPU LRU (the fallback), and XDP_TX verdicts.
type katranCounts struct{ total, misses, fallback, tx uint64 }

func (c katranCounts) minus(o katranCounts) katranCounts {
	return katranCounts{c.total - o.total, c.misses - o.misses, c.fallback - o.fallback, c.tx - o.tx}
}

func (k *katranLB) counts(b *testing.B) katranCounts {
	b.Helper()
	read := func(index uint32) katranStat {
		var per []katranStat
		if err := k.stats.Lookup(k.c.MaxVIPs+index, &per); err != nil {
			b.Fatal(err)
		}
		var s katranStat
		for _, p := range per {
			s.V1 += p.V1
			s.V2 += p.V2
		}
		return s
	}
	lru := read(k.c.LRUCntrs)
	return katranCounts{lru.V1, lru.V2, read(k.c.FallbackLRUCntr).V1, read(k.c.XDPTXCntr).V1}
}

// seqs returns the wrapper's new-flow sequence of each CPU.
func (k *katranLB) seqs(b *testing.B) []uint64 {
	b.Helper()
	var per []uint64
	if err := k.seq.Lookup(uint32(0), &per); err != nil {
		b.Fatal(err)
	}
	return per
}

func (k *katranLB) lruHas(b *testing.B, cpu int, key katranFlow) bool {
	b.Helper()
	var e katranLRUEntry
	err := k.lrus[cpu].Lookup(key, &e)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false
	}
	if err != nil {
		b.Fatal(err)
	}
	return true
}

// forget deletes the flow from every CPU's LRU.
func (k *katranLB) forget(b *testing.B, key katranFlow) {
	b.Helper()
	for _, m := range k.lrus {
		if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			b.Fatal(err)
		}
	}
}

// katranFlowKey is Katran's LRU key of a TCP flow to a VIP that has its
// port (so that the destination port is kept).
func katranFlowKey(src, dst netip.AddrPort) katranFlow {
	var f katranFlow
	copy(f.Src[:], addrBytes(src.Addr()))
	copy(f.Dst[:], addrBytes(dst.Addr()))
	binary.BigEndian.PutUint16(f.Ports[0:], src.Port())
	binary.BigEndian.PutUint16(f.Ports[2:], dst.Port())
	f.Proto = 6
	return f
}

// benchSource is the source that the wrappers' new_flow gives the n-th
// packet of a CPU (bpf/katran_bench.c, as bpf/bench.c): 10.CPU.0.0/16 for
// IPv4, the client's address with its last 32 bits CPU.0.0/16 for IPv6,
// and the port n's low 16 bits.
func benchSource(v6 bool, cpu int, n uint64) netip.AddrPort {
	low := uint32(cpu&0xff)<<16 | uint32(n>>16)&0xffff
	if !v6 {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], 0x0a000000|low)
		return netip.AddrPortFrom(netip.AddrFrom4(a), uint16(n))
	}
	a := client(true, 0).Addr().As16()
	binary.BigEndian.PutUint32(a[12:], low)
	return netip.AddrPortFrom(netip.AddrFrom16(a), uint16(n))
}

// katranHash is the hash by which Katran picks a new flow's ring slot
// (get_packet_hash): Jenkins' lookup3 hash as the Linux kernel's jhash
// computes it, over the source address's word (IPv4) or over the hash of
// its 16 bytes (IPv6), and the ports as the packet carries them, both read
// as the little-endian BPF machine reads them.
func katranHash(src netip.AddrPort, dport uint16, c katranConsts) uint32 {
	var p [4]byte
	binary.BigEndian.PutUint16(p[0:], src.Port())
	binary.BigEndian.PutUint16(p[2:], dport)
	ports := binary.LittleEndian.Uint32(p[:])
	if src.Addr().Is4() {
		a := src.Addr().As4()
		return jhash2Words(binary.LittleEndian.Uint32(a[:]), ports, c.HashSeed)
	}
	a := src.Addr().As16()
	return jhash2Words(jhash16(a, c.HashSeed6), ports, c.HashSeed)
}

const jhashInit = 0xdeadbeef

// jhashMix and jhashFinal are lookup3's mix and final steps.
func jhashMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func jhashFinal(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// jhash16 hashes 16 bytes: one block of three words, then the last word.
func jhash16(k [16]byte, seed uint32) uint32 {
	a := uint32(jhashInit + 16 + seed)
	b, c := a, a
	a += binary.LittleEndian.Uint32(k[0:])
	b += binary.LittleEndian.Uint32(k[4:])
	c += binary.LittleEndian.Uint32(k[8:])
	a, b, c = jhashMix(a, b, c)
	a += binary.LittleEndian.Uint32(k[12:])
	return jhashFinal(a, b, c)
}

// jhash2Words hashes two words.
func jhash2Words(a, b, seed uint32) uint32 {
	s := seed + jhashInit + 2<<2
	return jhashFinal(a+s, b+s, s)
}

func addrBytes(a netip.Addr) []byte { return a.AsSlice() }

// l4Off is the offset of the TCP header in a frame of packet's.
func l4Off(v6 bool) int {
	if v6 {
		return 14 + 40
	}
	return 14 + 20
}

// addrAt returns the source or destination address of a frame of packet's.
func addrAt(frame []byte, v6, dst bool) netip.Addr {
	if v6 {
		off := 14 + 8
		if dst {
			off += 16
		}
		return netip.AddrFrom16([16]byte(frame[off : off+16]))
	}
	off := 14 + 12
	if dst {
		off += 4
	}
	return netip.AddrFrom4([4]byte(frame[off : off+4]))
}
