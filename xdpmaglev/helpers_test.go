package xdpmaglev

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// packetsOnly skips, under the race detector, a test whose subject is
// the BPF program's path on real packets in namespaces (the kernel's
// code, which the detector cannot see): its Go side, Load and
// SetService from the test's goroutine, is what the fixture, metrics,
// restart and neighbour tests run under the detector too, and the plain
// run (the README's test command, in CI too) has the test. Together
// these tests are about a minute of the race step.
func packetsOnly(t testing.TB) {
	t.Helper()
	if raceEnabled {
		t.Skip("checks the program's path on real packets: left to the plain run under the race detector")
	}
}

// needBPF skips the test when the machine cannot load BPF programs (not
// root, or no BPF), naming what is missing; under CI=true it fails
// instead.
func needBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		xdptest.Skip(t, "not root: loading BPF programs needs CAP_BPF and CAP_NET_ADMIN (run the tests as root)")
	} else if err := bpfWorks(); err != nil {
		xdptest.Skip(t, "this kernel does not load the program: "+err.Error())
	}
}

var bpfOnce = sync.OnceValue(func() error {
	lb, err := Load("", Options{ConntrackSize: 16, MaxBackends: 4, MaxServices: 1, M: 7})
	if err != nil {
		return err
	}
	return lb.Close()
})

func bpfWorks() error { return bpfOnce() }

var (
	lbMAC     = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	clientMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}
)

// newLB loads an unattached LB for BPF_PROG_TEST_RUN, closed at the end of
// the test. Its flood guard is off unless opts.FloodRate says otherwise:
// the tests send thousands of new flows in a moment, which the default
// guard (ConntrackSize/130 entries a second) would route without entries.
func newLB(t testing.TB, opts Options) *LB {
	t.Helper()
	needBPF(t)
	if opts.SourceMAC == nil {
		opts.SourceMAC = lbMAC
	}
	if opts.ConntrackSize == 0 {
		opts.ConntrackSize = 1 << 14
	}
	if opts.FloodRate == 0 {
		opts.FloodRate = -1
	}
	lb, err := Load("", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lb.Close(); err != nil {
			t.Error(err)
		}
	})
	return lb
}

// backendMAC is test backend i's hardware address.
func backendMAC(i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0xbe, 0, 0, byte(i >> 8), byte(i)}
}

// testBackends returns n backends 198.18.1.1.. (or 2001:db8:1::1.. for
// IPv6) with weight 1 and MACs backendMAC(first..).
func testBackends(first, n int, v6 bool) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		a := netip.AddrFrom4([4]byte{198, 18, 1, byte(first + i)})
		if v6 {
			a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 14: byte((first + i) >> 8), 15: byte(first + i)})
		}
		bs[i] = Backend{Addr: a, Weight: 1, HW: backendMAC(first + i)}
	}
	return bs
}

// packet builds an Ethernet frame from the client to lbMAC carrying an
// IPv4 or IPv6 packet of protocol proto from src to dst (xdptest's
// builders): a TCP header (flags ACK: a packet of an established
// connection; tcpFlags changes them) or a UDP one for those protocols,
// the two ports for any other, then payload.
func packet(src, dst netip.AddrPort, proto uint8, payload []byte) []byte {
	var l4 []byte
	switch proto {
	case xdptest.ProtoTCP:
		l4 = xdptest.TCP(src.Port(), dst.Port(), xdptest.FlagACK, payload)
	case xdptest.ProtoUDP:
		l4 = xdptest.UDP(src.Port(), dst.Port(), payload)
	default:
		l4 = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, src.Port()), dst.Port())
		l4 = append(l4, payload...)
	}
	return xdptest.Ethernet(lbMAC, clientMAC, xdptest.Packet(proto, src.Addr(), dst.Addr(), l4))
}

// tcpFlags returns a copy of the TCP packet b (of packet) with the flags.
func tcpFlags(b []byte, flags byte) []byte {
	b = slices.Clone(b)
	l4 := 14 + 20
	if b[12] == 0x86 {
		l4 = 14 + 40
	}
	b[l4+13] = flags
	return b
}

// XDP verdicts.
const (
	xdpAborted = 0
	xdpDrop    = 1
	xdpPass    = 2
	xdpTX      = 3
)

// run runs the load balancer's program once on in.
func run(t testing.TB, lb *LB, in []byte) (uint32, []byte) {
	t.Helper()
	v, out, err := lb.objs.XdpMaglev.Test(in)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return v, out
}

// counters returns the data plane's counters by name.
func counters(t testing.TB, lb *LB) map[string]uint64 {
	t.Helper()
	st, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{
		"tx":               st.Forwarded,
		"conntrack_hit":    st.Conntrack.Hits,
		"conntrack_miss":   st.Conntrack.Misses,
		"conntrack_stale":  st.Conntrack.Stale,
		"conntrack_reopen": st.Conntrack.Reopened,
		"conntrack_insert": st.Conntrack.Inserts,
		"conntrack_closed": st.Conntrack.Closed,
		"conntrack_flood":  st.Conntrack.Flood,
		"stateless":        st.Stateless,
		"second_hop":       st.SecondHops,
		"icmp_forwarded":   st.ICMP.Forwarded,
		"icmp_too_big":     st.ICMP.TooBig,
	}
	for k, v := range st.Passed {
		m["pass_"+k] = v
	}
	for k, v := range st.Dropped {
		m["drop_"+k] = v
	}
	return m
}

// delta returns the counters that changed from before to after.
func delta(before, after map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// want checks err wraps target.
func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want one wrapping %v", err, target)
	}
}

// benches holds the benchmark programs loaded against each LB of a test
// (loadBench), closed with the test.
var benches sync.Map // *LB → *benchPrograms

// benchProgs returns the programs of bpf/bench.c loaded against lb's
// maps, with lb's load-time settings, once per LB: the programs Load
// never loads (the benchmarks' wrapper of the load balancer's program,
// and the flow hash written into a frame).
func benchProgs(t testing.TB, lb *LB) *benchPrograms {
	t.Helper()
	if p, ok := benches.Load(lb); ok {
		return p.(*benchPrograms)
	}
	spec, err := loadBench()
	if err != nil {
		t.Fatal(err)
	}
	var mac [6]byte
	copy(mac[:], lb.opts.SourceMAC)
	cost, err := floodCost(lb.opts.FloodRate)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"hash_seed": lb.opts.Seed, "lb_mac": mac, "flood_cost": cost} {
		if err := spec.Variables[name].Set(v); err != nil {
			t.Fatal(err)
		}
	}
	replace := map[string]*ebpf.Map{}
	for name, m := range lb.objs.byName() {
		if ms := spec.Maps[name]; ms != nil {
			ms.MaxEntries = m.MaxEntries()
			if ms.InnerMap != nil {
				ms.InnerMap.MaxEntries = lb.inner.MaxEntries
			}
			replace[name] = m
		}
	}
	var objs benchObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: replace}); err != nil {
		t.Fatalf("loading the benchmark programs: %v", err)
	}
	t.Cleanup(func() {
		benches.Delete(lb)
		_ = objs.Close()
	})
	benches.Store(lb, &objs.benchPrograms)
	return &objs.benchPrograms
}

// passProg returns bpf/pass.c's program, which passes every packet,
// closed with the test.
func passProg(t testing.TB) *ebpf.Program {
	t.Helper()
	var objs passObjects
	if err := loadPassObjects(&objs, nil); err != nil {
		t.Fatalf("loading the pass program: %v", err)
	}
	t.Cleanup(func() { _ = objs.Close() })
	return objs.XdpPass
}
