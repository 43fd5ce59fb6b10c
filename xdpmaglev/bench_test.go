package xdpmaglev

import (
	"bytes"
	"crypto/aes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// BenchmarkPacket measures the program per packet through
// BPF_PROG_TEST_RUN, in the kernel's own timing (the syscall is not
// counted), next to xdp_pass, a program that only returns XDP_PASS: the
// harness's floor, measured the same way in the same run.
//
// established and non-VIP run one packet 10^6 times per call (Repeat);
// their floor is floor_repeat. A repeated packet is one flow, so new_flow
// runs a packet of a new source port per call, Repeat 1, over as many
// calls as -benchtime gives (use -benchtime 1000000x); its floor is
// floor_once, which pays the same per-call cost. Each reports ns/packet.
func BenchmarkPacket(b *testing.B) {
	lb := newLB(b, Options{})
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	if err := lb.SetService(svc, testBackends(1, 100, false), ServiceOptions{}); err != nil {
		b.Fatal(err)
	}
	flow := packet(client(false, 1), svc.VIP, 6, nil)
	other := packet(client(false, 1), netip.MustParseAddrPort("198.19.255.2:80"), 6, nil)
	if v, _ := run(b, lb, flow); v != xdpTX {
		b.Fatalf("verdict %d", v)
	}
	repeated := func(prog *ebpf.Program, in []byte, want uint32) func(*testing.B) {
		return func(b *testing.B) {
			const repeat = 1_000_000
			var total time.Duration
			for range b.N {
				v, d, err := prog.Benchmark(in, repeat, nil)
				if err != nil || v != want {
					b.Fatalf("verdict %d, %v", v, err)
				}
				total += d
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
		}
	}
	once := func(prog *ebpf.Program, want uint32) func(*testing.B) {
		return func(b *testing.B) {
			in := packet(client(false, 1), svc.VIP, 6, nil)
			var total time.Duration
			for i := range b.N {
				// A new flow each call: the source address and port.
				binary.BigEndian.PutUint32(in[14+12:], 0xc6120000|uint32(i>>16)&0xffff)
				binary.BigEndian.PutUint16(in[14+20:], uint16(i))
				v, d, err := prog.Benchmark(in, 1, nil)
				if err != nil || v != want {
					b.Fatalf("verdict %d, %v", v, err)
				}
				total += d
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
		}
	}
	b.Run("floor_repeat", repeated(passProg(b), flow, xdpPass))
	b.Run("established", repeated(lb.objs.XdpMaglev, flow, xdpTX))
	b.Run("non-VIP", repeated(lb.objs.XdpMaglev, other, xdpPass))
	b.Run("floor_once", once(passProg(b), xdpPass))
	b.Run("new_flow", once(lb.objs.XdpMaglev, xdpTX))
}

// BenchmarkSetService measures an update of a service of N backends: the
// table build alone (maglev.NewWeighted), and SetService whole (the build,
// a new table map written with one batch update, and the swap). Each
// update alternates between two backend sets that differ in one backend.
func BenchmarkSetService(b *testing.B) {
	for _, n := range []int{10, 1000} {
		const m = maglev.DefaultSize
		sets := [2][]Backend{testBackendsN(0, n), testBackendsN(1, n)}
		b.Run(fmt.Sprintf("N=%d/M=%d/build", n, m), func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if _, err := maglev.NewWeighted(names(sets[i%2]), m, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("N=%d/M=%d/SetService", n, m), func(b *testing.B) {
			lb := newLB(b, Options{MaxBackends: 2 * n})
			svc := Service{VIP: vip(false, 80), Proto: TCP}
			b.ReportAllocs()
			for i := range b.N {
				if err := lb.SetService(svc, sets[i%2], ServiceOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// quicBench are the QUIC-LB configurations of BenchmarkForward's quic
// cases: a 3-octet server ID in the clear (a 10-octet connection ID), in
// one AES block, and in the four-pass network (three passes to decrypt).
var quicBench = map[string]quiclb.Config{
	"plaintext": {ServerIDLen: 3, NonceLen: 6},
	"single":    {ServerIDLen: 3, NonceLen: 13, Key: quicKey},
	"four":      {ServerIDLen: 3, NonceLen: 6, Key: quicKey},
}

// testBackendsN returns n backends in 198.18.0.0/15 from the offset-th on.
func testBackendsN(offset, n int) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		j := offset + i
		bs[i] = Backend{Addr: netip.AddrFrom4([4]byte{198, 18, byte(j >> 8), byte(j)}), Weight: 1, HW: backendMAC(j)}
	}
	return bs
}

// BenchmarkForward measures the program per packet for each forwarding
// mode, through BPF_PROG_TEST_RUN in the kernel's own timing, next to
// xdp_pass in the same run, inside the fixture network of the
// encapsulation tests (bpf_fib_lookup needs its routes; with no context
// given, the kernel runs the program as received on lo, so an
// encapsulated packet leaves by XDP_REDIRECT to eth0). Every case runs
// 100,000 repeats per call of a benchmark-only wrapper of the program
// (xdp_bench) that restores the input after each repeat, since an
// encapsulated packet is not its input; the restore is counted in the
// program's cost. new_flow gives each repeat a new source address and
// port (xdp_bench_new), so its figure is the program's cost for a new flow
// into a full conntrack at the same repeat count as the others, with the
// flood guard off (at the benchmark's millions of new flows a second the
// default guard would be on, and the figure that of new_flow_flood);
// new_flow_flood is the same with the flood guard on (no entry written).
// The _syn cases send a SYN: on an established flow's entry, whose
// backend is in service, it follows the entry after one more test of the
// flags and the backend's weight (conntrack.h); on a new flow it is a new
// flow's path.
//
// The stateless cases are a service with Conntrack ConntrackOff (every
// packet by the table: established and new flows take the same path, the
// new flow's figure adds only the source's rewrite). Their GUE service has
// second chance, and a backend has just joined (100 to 101), so the
// previous table is in the map and looked up: stateless is a flow whose
// slot did not move, stateless_second_hop one whose slot moved, which
// leaves with its second hop in the GUE header.
//
// The quic cases are a QUIC-LB service (UDP, port 443) and a short header
// packet whose connection ID names backend katranQUICBackend: plaintext,
// or encrypted (quic_single: one AES block; quic_four: the four-pass
// network), whose server ID the cache holds after the first packet; the
// _decrypt cases carry an encrypted ID of no server, which the cache
// never keeps, so that every packet is decrypted (and then routed by the
// table, whose conntrack entry it finds): the cost of a connection ID's
// first packet, or of a flood of made-up ones.
//
// Each case checks by the counters that its packets took the path it
// names. Each reports ns/packet.
func BenchmarkForward(b *testing.B) {
	f := newFixtureNet(b)
	lbs := map[bool]*LB{
		false: fixtureLB(b, f, Options{ConntrackSize: 1 << 16, FloodRate: -1}),
		true:  fixtureLB(b, f, Options{ConntrackSize: 1 << 16, FloodRate: 1}),
	}
	const repeat = 100_000
	// path reads, from the counters' change over a benchmark's calls, how
	// many of its packets hit conntrack, wrote an entry, were routed
	// without one by the flood guard, went by a stateless service's table,
	// or left with a second hop.
	type path struct{ hits, inserts, flood, stateless, second, cid, decrypted uint64 }
	counts := func(lb *LB) path {
		st, err := lb.Stats()
		if err != nil {
			b.Fatal(err)
		}
		return path{st.Conntrack.Hits, st.Conntrack.Inserts, st.Conntrack.Flood, st.Stateless, st.SecondHops, st.QUIC.CID, st.QUIC.Decrypted}
	}
	type kind int
	const (
		floor kind = iota
		established
		newFlow
	)
	type fwdCase struct {
		kind    kind
		flood   bool // the flood guard on (FloodRate 1)
		mode    Forward
		v6      bool
		flags   byte
		ct      ConntrackMode
		second  bool   // a flow whose slot moved, with second chance
		quic    string // a QUIC-LB service: a quicBench configuration
		decrypt bool   // with quic: an encrypted ID of no server, decrypted every packet
		want    uint32
	}
	pp := passProg(b)
	bench := func(c fwdCase) func(*testing.B) {
		return func(b *testing.B) {
			lb := lbs[c.flood]
			svc := Service{VIP: vip(c.v6, 80), Proto: TCP}
			bs := encapBackends(100, c.v6)
			if c.mode == ForwardL2 {
				bs = testBackends(1, 100, c.v6)
			}
			opts := ServiceOptions{Forward: c.mode, Source: source(c.v6), Conntrack: c.ct}
			var quicPayload []byte
			if c.quic != "" {
				svc = Service{VIP: vip(c.v6, 443), Proto: UDP}
				qc := QUICConfig{Config: quicBench[c.quic], ServerIDs: quicSIDs(b, bs, quicBench[c.quic].ServerIDLen)}
				opts.QUIC = &QUIC{Configs: []QUICConfig{qc}}
				target := bs[katranQUICBackend].Addr
				if c.decrypt {
					stranger, _ := quiclb.MakeServerID(bytes.Repeat([]byte{0xee}, qc.ServerIDLen))
					qc.ServerIDs = map[netip.Addr]quiclb.ServerID{target: stranger}
				}
				quicPayload = shortHeader(newCID(b, qc, target))
			}
			if c.mode == ForwardGUE && c.ct == ConntrackOff {
				opts.SecondChance = time.Hour
			}
			if err := lb.SetService(svc, bs, opts); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = lb.DeleteService(svc) }()
			port := uint16(1)
			if opts.SecondChance > 0 { // a backend joins; the port names a flow whose slot moved, or did not
				old := lb.Table(svc)
				if err := lb.SetService(svc, encapBackends(101, c.v6), opts); err != nil {
					b.Fatal(err)
				}
				now := lb.Table(svc)
				for port = 1; ; port++ {
					h := FlowHash(lb.opts.Seed, client(c.v6, port), svc.VIP, 6)
					if (old.LookupHash(h) != now.LookupHash(h)) == c.second {
						break
					}
				}
			}
			in := tcpFlags(packet(client(c.v6, port), svc.VIP, 6, nil), c.flags)
			if c.quic != "" {
				in = packet(client(c.v6, port), svc.VIP, 17, quicPayload)
			}
			prog := pp
			switch c.kind {
			case established:
				prog = benchProgs(b, lb).XdpBench
			case newFlow:
				prog = benchProgs(b, lb).XdpBenchNew
			}
			type result struct {
				v uint32
				d time.Duration
			}
			var total time.Duration
			before := counts(lb)
			for range b.N {
				r, err := xdptest.In(f.ns, func() (result, error) {
					v, d, err := prog.Benchmark(in, repeat, nil)
					return result{v, d}, err
				})
				if err != nil || r.v != c.want {
					b.Fatalf("verdict %d, want %d: %v", r.v, c.want, err)
				}
				total += r.d
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
			after := counts(lb)
			got := path{after.hits - before.hits, after.inserts - before.inserts, after.flood - before.flood,
				after.stateless - before.stateless, after.second - before.second, after.cid - before.cid, after.decrypted - before.decrypted}
			// n packets at least: a run that a signal interrupts is run
			// again whole (Program.Benchmark retries on EINTR), and the
			// packets it had run were counted.
			n := uint64(b.N) * repeat
			var ok bool
			switch {
			case c.kind == floor:
				ok = got == path{}
			case c.decrypt: // decrypted, then by the table: its conntrack entry
				ok = got.decrypted >= n && got.cid == 0 && got.hits >= n-1
			case c.quic != "": // by the connection ID, decrypted once at most (the cache)
				ok = got.cid >= n && got.decrypted <= 1 && got.hits == 0 && got.inserts == 0
			case c.ct == ConntrackOff: // no conntrack; a second hop on each packet of a moved slot's flow
				ok = got.hits == 0 && got.inserts == 0 && got.flood == 0 && got.stateless >= n &&
					(c.second && got.second >= n || !c.second && (c.kind == newFlow || got.second == 0))
			case c.kind == established: // the first packet may write the entry
				ok = got.hits >= n-1 && got.flood == 0 && got.stateless == 0
			case c.flood: // FloodRate 1: ten entries at first, then one a second
				ok = got.hits == 0 && got.inserts+got.flood >= n && got.inserts <= 11+uint64(b.Elapsed().Seconds())
			default:
				ok = got.hits == 0 && got.inserts >= n && got.flood == 0 && got.stateless == 0
			}
			if !ok {
				b.Fatalf("of %d packets: %d conntrack hits, %d inserts, %d routed by the flood guard, %d stateless, %d with a second hop, %d by the connection ID, %d decrypted",
					n, got.hits, got.inserts, got.flood, got.stateless, got.second, got.cid, got.decrypted)
			}
		}
	}
	const xdpRedirect = 4
	for _, c := range []struct {
		name string
		fwdCase
	}{
		{"floor", fwdCase{kind: floor, flags: xdptest.FlagACK, want: xdpPass}},
		{"l2/established", fwdCase{kind: established, mode: ForwardL2, flags: xdptest.FlagACK, want: xdpTX}},
		{"l2/established_syn", fwdCase{kind: established, mode: ForwardL2, flags: xdptest.FlagSYN, want: xdpTX}},
		{"ipip/established", fwdCase{kind: established, mode: ForwardIPIP, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"ipip6/established", fwdCase{kind: established, mode: ForwardIPIP, v6: true, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"gue/established", fwdCase{kind: established, mode: ForwardGUE, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"l2/new_flow", fwdCase{kind: newFlow, mode: ForwardL2, flags: xdptest.FlagACK, want: xdpTX}},
		{"l2/new_flow_syn", fwdCase{kind: newFlow, mode: ForwardL2, flags: xdptest.FlagSYN, want: xdpTX}},
		{"ipip/new_flow", fwdCase{kind: newFlow, mode: ForwardIPIP, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"ipip6/new_flow", fwdCase{kind: newFlow, mode: ForwardIPIP, v6: true, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"ipip/new_flow_flood", fwdCase{kind: newFlow, flood: true, mode: ForwardIPIP, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"ipip/stateless", fwdCase{kind: established, mode: ForwardIPIP, ct: ConntrackOff, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"ipip/stateless_new_flow", fwdCase{kind: newFlow, mode: ForwardIPIP, ct: ConntrackOff, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"ipip6/stateless", fwdCase{kind: established, mode: ForwardIPIP, v6: true, ct: ConntrackOff, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"ipip6/stateless_new_flow", fwdCase{kind: newFlow, mode: ForwardIPIP, v6: true, ct: ConntrackOff, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"gue/stateless", fwdCase{kind: established, mode: ForwardGUE, ct: ConntrackOff, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"gue/stateless_new_flow", fwdCase{kind: newFlow, mode: ForwardGUE, ct: ConntrackOff, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"gue/stateless_second_hop", fwdCase{kind: established, mode: ForwardGUE, ct: ConntrackOff, second: true, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"gue6/stateless", fwdCase{kind: established, mode: ForwardGUE, v6: true, ct: ConntrackOff, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"gue6/stateless_new_flow", fwdCase{kind: newFlow, mode: ForwardGUE, v6: true, ct: ConntrackOff, flags: xdptest.FlagACK, want: xdpRedirect}},
		{"l2/quic", fwdCase{kind: established, mode: ForwardL2, quic: "plaintext", want: xdpTX}},
		{"ipip/quic", fwdCase{kind: established, mode: ForwardIPIP, quic: "plaintext", want: xdpRedirect}},
		{"ipip6/quic", fwdCase{kind: established, mode: ForwardIPIP, v6: true, quic: "plaintext", want: xdpRedirect}},
		{"gue/quic", fwdCase{kind: established, mode: ForwardGUE, quic: "plaintext", want: xdpRedirect}},
		{"ipip/quic_single", fwdCase{kind: established, mode: ForwardIPIP, quic: "single", want: xdpRedirect}},
		{"ipip/quic_four", fwdCase{kind: established, mode: ForwardIPIP, quic: "four", want: xdpRedirect}},
		{"ipip/quic_single_decrypt", fwdCase{kind: established, mode: ForwardIPIP, quic: "single", decrypt: true, want: xdpRedirect}},
		{"ipip/quic_four_decrypt", fwdCase{kind: established, mode: ForwardIPIP, quic: "four", decrypt: true, want: xdpRedirect}},
	} {
		b.Run(c.name, bench(c.fwdCase))
	}
}

// BenchmarkAES measures the kernel's AES alone, as the program runs it
// for an encrypted QUIC-LB connection ID: one 16-octet block through the
// BPF crypto kfuncs (bpf_crypto_decrypt, as a single pass decodes;
// bpf_crypto_encrypt, as each round of the four-pass network does), next
// to copy, the same program with the block copied instead (the same
// lookups and dynptrs), whose figure is the floor. BPF_PROG_TEST_RUN,
// 1,000,000 repeats a call, the kernel's timing; each reports
// ns/packet, and checks the block against Go's AES once.
func BenchmarkAES(b *testing.B) {
	lb := newLB(b, Options{M: 251})
	svc := Service{VIP: vip(false, 443), Proto: UDP}
	// The first service's codepoint 0 has slot 0 of quic_keys.
	quicService(b, lb, svc, testBackends(1, 1, false), ServiceOptions{}, quiclb.Config{ID: 0, ServerIDLen: 4, NonceLen: 12, Key: quicKey})
	p := benchProgs(b, lb)
	in := make([]byte, 64)
	for i := range in {
		in[i] = byte(i * 7)
	}
	blk, err := aes.NewCipher(quicKey)
	if err != nil {
		b.Fatal(err)
	}
	want := map[string][]byte{"copy": in[:16], "decrypt": make([]byte, 16), "encrypt": make([]byte, 16)}
	blk.Decrypt(want["decrypt"], in[:16])
	blk.Encrypt(want["encrypt"], in[:16])
	for _, c := range []struct {
		name string
		prog *ebpf.Program
	}{{"copy", p.XdpAesCopy}, {"decrypt", p.XdpAesDecrypt}, {"encrypt", p.XdpAesEncrypt}} {
		b.Run(c.name, func(b *testing.B) {
			out := make([]byte, len(in))
			if v, err := c.prog.Run(&ebpf.RunOptions{Data: in, DataOut: out}); err != nil || v != xdpTX || !bytes.Equal(out[:16], want[c.name]) {
				b.Fatalf("verdict %d, %v: block %x, want %x", v, err, out[:16], want[c.name])
			}
			const repeat = 1_000_000
			var total time.Duration
			for range b.N {
				v, d, err := c.prog.Benchmark(in, repeat, nil)
				if err != nil || v != xdpTX {
					b.Fatalf("verdict %d, %v", v, err)
				}
				total += d
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
		})
	}
}
