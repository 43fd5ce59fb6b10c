package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// The restart test's network: one bridge, addresses in 198.18.0.0/16 (all
// on one link) and the fleet's VIP:
//
//	client 198.18.1.2, its route to the VIP via l4lb's address
//	l4lb   198.18.0.3 (XDP on eth0)
//	backends 198.18.0.11.. (the VIP on lo), answering the client directly
//
// The client's address, the VIP and the seed are the fleet's, so that
// dialFrom and predict serve here too.
type restartNet struct {
	t      *testing.T
	sw, lb string // namespaces: the bridge's, l4lb's
	client string
	bes    []string
	stops  []func() // each backend's server's
	bin    string
	pins   string // -pin-dir, in a BPF filesystem of the test's own
}

func (r *restartNet) join(ns, port, addr string) {
	xdptest.IP(r.t, "-n", r.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
	xdptest.IP(r.t, "-n", r.sw, "link", "set", port, "master", "br0", "up")
	xdptest.IP(r.t, "-n", ns, "addr", "add", addr+"/16", "dev", "eth0")
	xdptest.IP(r.t, "-n", ns, "link", "set", "eth0", "up")
}

func (r *restartNet) nsexec(ns string, args ...string) {
	r.t.Helper()
	if out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput(); err != nil {
		r.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newRestartNet(t *testing.T, backends int) *restartNet {
	xdptest.Need(t, "ethtool")
	r := &restartNet{t: t}
	r.bin = build(t)        // skips under -race, as build says
	mnt := xdptest.BPFFS(t) // unmounted after the processes: cleanups run last first
	r.pins = filepath.Join(mnt, "l4lb")

	r.sw = xdptest.NewNS(r.t, "rssw")
	xdptest.IP(t, "-n", r.sw, "link", "add", "br0", "type", "bridge")
	xdptest.IP(t, "-n", r.sw, "link", "set", "br0", "up")
	r.client = xdptest.NewNS(r.t, "rscl")
	r.join(r.client, "p-cl", fleetClient.String())
	xdptest.IP(t, "-n", r.client, "route", "add", fleetVIP.Addr().String()+"/32", "via", "198.18.0.3")
	r.lb = xdptest.NewNS(r.t, "rslb")
	r.join(r.lb, "p-lb", "198.18.0.3")
	// Forwarded packets must carry whole checksums.
	r.nsexec(r.client, "ethtool", "-K", "eth0", "tx", "off")
	r.nsexec(r.lb, "ethtool", "-K", "eth0", "tx", "off")
	// veth's XDP_TX needs a program on the peer: one that passes all.
	pass, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}}) // XDP_PASS
	if err != nil {
		t.Fatalf("loading an XDP_PASS program: %v", err)
	}
	t.Cleanup(func() { _ = pass.Close() })
	xdptest.AttachXDP(t, r.sw, "p-lb", pass)
	for i := range backends {
		ns := xdptest.NewNS(r.t, fmt.Sprintf("rsbe%d", i))
		r.join(ns, fmt.Sprintf("p-be%d", i), beAddr(i).String())
		xdptest.IP(t, "-n", ns, "addr", "add", fleetVIP.Addr().String()+"/32", "dev", "lo")
		for _, dev := range []string{"all", "eth0"} {
			xdptest.Sysctl(r.t, ns, "net.ipv4.conf."+dev+".arp_ignore", "1")
			xdptest.Sysctl(r.t, ns, "net.ipv4.conf."+dev+".arp_announce", "2")
		}
		r.bes = append(r.bes, ns)
		r.stops = append(r.stops, serve(t, ns, beAddr(i).String()))
	}
	return r
}

// args is l4lb's command line with backends 0 to n-1 but those in
// without, pinned in r.pins if pinned.
func (r *restartNet) args(n int, pinned bool, without ...int) []string {
	pins := ""
	if pinned {
		pins = r.pins
	}
	a := []string{"run", "-iface", "eth0", "-vip", fleetVIP.String(), "-seed", strconv.Itoa(fleetSeed), "-mode", "native", "-admin", "", "-pin-dir", pins,
		"-drain-timeout", restartDrain.String()}
	for i := range n {
		if !slices.Contains(without, i) {
			a = append(a, "-backend", beAddr(i).String())
		}
	}
	return a
}

// restartDrain is l4lb's -drain-timeout in TestRestart.
const restartDrain = time.Second

// restartTable is the table of backends 0 to n-1 but those in without.
func restartTable(t *testing.T, n int, without ...int) *maglev.Table {
	var bs []maglev.Backend
	for i := range n {
		if !slices.Contains(without, i) {
			bs = append(bs, maglev.Backend{Name: beAddr(i).String(), Weight: 1})
		}
	}
	tbl, err := maglev.NewWeighted(bs, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// lb starts l4lb with args and waits for its table.
func (r *restartNet) lbStart(args []string) *process {
	r.t.Helper()
	p := start(r.t, r.lb, r.bin, args...)
	p.await("backends applied")
	return p
}

// restart stops p by SIGTERM, starts l4lb with args, waits for its table,
// and returns it and how long that took from the signal. A pinned l4lb
// must say that it left the program attached, and the next that it
// adopted it.
func (r *restartNet) restart(p *process, args []string) (*process, time.Duration) {
	r.t.Helper()
	t0 := time.Now()
	rest := p.stop()
	i := slices.Index(args, "-pin-dir")
	pinned := i >= 0 && args[i+1] != ""
	const left = "left attached and pinned for the next l4lb (l4lb detach removes it)"
	if pinned && (len(rest) == 0 || !rest[len(rest)-1].Is(left, "iface", "eth0")) {
		r.t.Fatalf("l4lb's last records %+v, want %q", rest, left)
	}
	p = start(r.t, r.lb, r.bin, args...)
	if pinned {
		p.await("adopted the pinned data plane: its connection tracking, tables and counters go on", "path", filepath.Join(r.pins, "eth0"))
	}
	p.await("backends applied")
	return p, time.Since(t0)
}

// connect makes one connection from each port, and checks that each
// reaches the backend want predicts.
func (r *restartNet) connect(want *maglev.Table, ports []int) []*fconn {
	r.t.Helper()
	conns, err := xdptest.In(r.client, func() ([]*fconn, error) {
		var out []*fconn
		for _, port := range ports {
			c, err := dialFrom(port)
			if err != nil {
				return out, fmt.Errorf("port %d: %w", port, err)
			}
			out = append(out, c)
			if c.backend != predict(want, port) {
				return out, fmt.Errorf("port %d reached %s, the table says %s", port, c.backend, predict(want, port))
			}
		}
		return out, nil
	})
	for _, c := range conns {
		r.t.Cleanup(func() { _ = c.Close() })
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return conns
}

// retransmits returns the TCP segments retransmitted by the client and
// the backends, from their namespaces' counters.
func (r *restartNet) retransmits() uint64 {
	r.t.Helper()
	var sum uint64
	for _, ns := range append([]string{r.client}, r.bes...) {
		b, err := xdptest.In(ns, func() ([]byte, error) { return os.ReadFile("/proc/thread-self/net/snmp") })
		if err != nil {
			r.t.Fatal(err)
		}
		var names []string
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != "Tcp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			i := slices.Index(names, "RetransSegs")
			if i < 0 || i >= len(f) {
				r.t.Fatalf("no RetransSegs in %s's /proc/net/snmp", ns)
			}
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				r.t.Fatal(err)
			}
			sum += n
			found = true
		}
		if !found {
			r.t.Fatalf("no Tcp: counters in %s's /proc/net/snmp", ns)
		}
	}
	return sum
}

// echoes keep every long-lived connection echoing a line every 20 ms,
// and record each round trip.
type echoes struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    map[int]error // by port
	samples []rtt
	conns   []*fconn
}

type rtt struct {
	at time.Time // when it ended
	d  time.Duration
}

func startEchoes(conns []*fconn) *echoes {
	e := &echoes{stop: make(chan struct{}), errs: map[int]error{}, conns: conns}
	for _, c := range conns {
		e.wg.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-e.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				t0 := time.Now()
				err := c.echo(fmt.Sprintf("%d %d", c.port, seq))
				now := time.Now()
				e.mu.Lock()
				if err != nil {
					e.errs[c.port] = fmt.Errorf("line %d: %w", seq, err)
				} else {
					e.samples = append(e.samples, rtt{now, now.Sub(t0)})
				}
				e.mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	return e
}

func (e *echoes) close() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.wg.Wait()
}

// failed returns the ports whose connection failed.
func (e *echoes) failed() map[int]error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.errs)
}

// window returns the round trips that ended in [from, to): how many, the
// slowest and the 99th percentile.
func (e *echoes) window(from, to time.Time) (n int, slowest, p99 time.Duration) {
	e.mu.Lock()
	var ds []time.Duration
	for _, s := range e.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			ds = append(ds, s.d)
		}
	}
	e.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return len(ds), ds[len(ds)-1], ds[len(ds)*99/100]
}

// gap returns the longest time in [from, to) in which no round trip
// ended, on any connection: while packets are lost, none does.
func (e *echoes) gap(from, to time.Time) time.Duration {
	e.mu.Lock()
	ends := []time.Time{from}
	for _, s := range e.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			ends = append(ends, s.at)
		}
	}
	e.mu.Unlock()
	ends = append(ends, to)
	slices.SortFunc(ends, time.Time.Compare)
	var longest time.Duration
	for i := 1; i < len(ends); i++ {
		longest = max(longest, ends[i].Sub(ends[i-1]))
	}
	return longest
}

// TestRestart restarts l4lb, pinned, under 100 long-lived connections
// that echo a line every 20 ms and a bounded load of new connections:
// five restarts with the same backends, one that adds three (the
// adopted connection tracking keeps every connection where it was,
// though the new table moves many), one that removes a backend (only its
// connections break); then l4lb detach, and a plain restart without
// pins for comparison. docs/testing-l4lb.md, "Restarts", has the
// figures.
func TestRestart(t *testing.T) {
	r := newRestartNet(t, 6)
	p := r.lbStart(r.args(3, true))
	three := restartTable(t, 3)
	e := startEchoes(r.connect(three, portRange(30000, 100)))
	defer e.close()
	loop := startLoad(r.client, 2, 5*time.Millisecond) // a bounded load of new connections
	defer loop.close()
	time.Sleep(time.Second)

	// 1. Five restarts, the same backends.
	retrans := r.retransmits()
	from := time.Now()
	var took []string
	for range 5 {
		var d time.Duration
		p, d = r.restart(p, r.args(3, true))
		took = append(took, d.Round(time.Millisecond).String())
		time.Sleep(200 * time.Millisecond)
	}
	to := time.Now()
	n0, slow0, p990 := e.window(from.Add(-time.Second), from)
	n1, slow1, p991 := e.window(from, to)
	lost := r.retransmits() - retrans
	if failed := e.failed(); len(failed) > 0 {
		t.Fatalf("1. %d of 100 long-lived connections broke over 5 restarts: %v", len(failed), failed)
	}
	if n := loop.fail.Load(); n > 0 {
		t.Fatalf("1. %d new connections failed over 5 restarts (%d made); the first: %v", n, loop.ok.Load(), loop.first)
	}
	if lost > 0 {
		t.Errorf("1. %d TCP segments retransmitted over 5 restarts: packets were lost", lost)
	}
	// A lost packet costs TCP at least its minimum retransmission timeout.
	if slow1 >= 200*time.Millisecond {
		t.Errorf("1. a round trip of %v during the restarts (%v before them): a packet was lost", slow1, slow0)
	}
	if n0 < 1000 || n1 < 1000 {
		t.Fatalf("1. %d round trips in the second before the restarts, %d during them: too few", n0, n1)
	}
	t.Logf("1. 5 restarts (SIGTERM to the new l4lb's table: %s): 100 of 100 long-lived connections kept, %d new connections and 0 failed, %d segments retransmitted; round trips in the second before: %d, slowest %v, p99 %v, longest time without one %v; during: %d, slowest %v, p99 %v, longest time without one %v",
		strings.Join(took, ", "), loop.ok.Load(), lost, n0, slow0.Round(time.Microsecond), p990.Round(time.Microsecond), e.gap(from.Add(-time.Second), from).Round(time.Microsecond),
		n1, slow1.Round(time.Microsecond), p991.Round(time.Microsecond), e.gap(from, to).Round(time.Microsecond))

	// 2. A restart that adds three backends: the new table moves many of
	// the connections, and the adopted connection tracking keeps them.
	six := restartTable(t, 6)
	moved := 0
	for _, c := range e.conns {
		if predict(six, c.port) != c.backend {
			moved++
		}
	}
	if moved < 20 {
		t.Fatalf("2. the six backends' table moves %d of 100 connections: too few to show anything", moved)
	}
	retrans = r.retransmits()
	p, d := r.restart(p, r.args(6, true))
	time.Sleep(time.Second)
	if failed := e.failed(); len(failed) > 0 {
		t.Fatalf("2. %d of 100 long-lived connections broke when 3 backends were added (%d moved by the table): %v", len(failed), moved, failed)
	}
	if n := loop.fail.Load(); n > 0 {
		t.Fatalf("2. %d new connections failed; the first: %v", n, loop.first)
	}
	loop.close()
	// New connections follow the new table.
	for _, c := range r.connect(six, portRange(31000, 50)) {
		_ = c.Close()
	}
	t.Logf("2. a restart (%v) with 3 more backends, whose table moves %d of the 100 connections: all 100 kept (%d segments retransmitted), %d new connections over 1 and 2, 0 failed, 50 more at the new table's backends",
		d.Round(time.Millisecond), moved, r.retransmits()-retrans, loop.ok.Load())

	// 3. A restart without backend 0: it drains, as a backend that leaves
	// a running l4lb's members does (the new l4lb finds it in the adopted
	// data plane); once the drain is over only its connections break.
	gone := beAddr(0).String()
	on := 0
	for _, c := range e.conns {
		if c.backend == gone {
			on++
		}
	}
	t0 := time.Now()
	p.stop()
	p = start(t, r.lb, r.bin, r.args(6, true, 0)...)
	p.await("backends applied", "live", "5", "draining", "1", "digest", digestHex(restartTable(t, 6, 0)))
	d = time.Since(t0)
	time.Sleep(restartDrain / 2)
	if failed := e.failed(); len(failed) > 0 {
		t.Fatalf("3. %d connections broke while %s drained: %v", len(failed), gone, failed)
	}
	time.Sleep(restartDrain + time.Second)
	failed := e.failed()
	for _, c := range e.conns {
		if _, broke := failed[c.port]; broke != (c.backend == gone) {
			t.Errorf("3. the connection from port %d to %s: broken %v, after %s left", c.port, c.backend, broke, gone)
		}
	}
	if on == 0 {
		t.Fatalf("3. no connection was on %s", gone)
	}
	t.Logf("3. a restart (%v) without %s: it drained for the %v drain timeout, its %d connections working; then they broke, and the other %d kept", d.Round(time.Millisecond), gone, restartDrain, on, 100-on)

	// 4. l4lb detach removes the program and the pins.
	if rest := p.stop(); len(rest) == 0 || !rest[len(rest)-1].Is("left attached and pinned for the next l4lb (l4lb detach removes it)", "iface", "eth0") {
		t.Fatalf("4. last records %+v", rest)
	}
	out, err := exec.Command("ip", "netns", "exec", r.lb, r.bin, "detach", "-iface", "eth0", "-pin-dir", r.pins).CombinedOutput()
	if err != nil {
		t.Fatalf("4. l4lb detach: %v: %s", err, out)
	}
	dir := filepath.Join(r.pins, "eth0")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if !slices.Contains(lines, "l4lb: removed "+filepath.Join(dir, "link")) || !slices.Contains(lines, "l4lb: removed "+filepath.Join(dir, "conntrack4")) ||
		lines[len(lines)-1] != "l4lb: detached from eth0" {
		t.Fatalf("4. l4lb detach printed %q", lines)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("4. after -detach, %s: %v", dir, err)
	}
	if o := xdptest.IP(t, "-n", r.lb, "link", "show", "eth0"); strings.Contains(o, "xdp") {
		t.Fatalf("4. a program is still attached to eth0 after -detach: %s", o)
	}
	t.Logf("4. l4lb detach: removed %d pins and the directory, eth0 has no program", len(lines)-1)

	// 5. For comparison, a plain restart, without pins: the program is
	// detached, then attached again.
	p = r.lbStart(r.args(6, false, 0))
	time.Sleep(1500 * time.Millisecond) // the connections recover from the gap l4lb detach made
	broken := len(e.failed())
	retrans = r.retransmits()
	from = time.Now()
	p, d = r.restart(p, r.args(6, false, 0))
	time.Sleep(time.Second)
	to = time.Now()
	_, slow0, _ = e.window(from.Add(-500*time.Millisecond), from)
	_, slow1, _ = e.window(from, to)
	gap := e.gap(from, to)
	lost = r.retransmits() - retrans
	if lost == 0 || slow1 < 200*time.Millisecond {
		t.Errorf("5. a plain restart: %d segments retransmitted, a slowest round trip of %v: no gap seen, so the checks of 1 could not see one either", lost, slow1)
	}
	if n := len(e.failed()) - broken; n != 0 {
		t.Errorf("5. %d connections broke in a plain restart (the same backends: the same table)", n)
	}
	t.Logf("5. a plain restart without pins (%v): %d segments retransmitted, the slowest round trip %v (%v in the half second before), %v without a round trip; 0 connections broke",
		d.Round(time.Millisecond), lost, slow1.Round(time.Millisecond), slow0.Round(time.Microsecond), gap.Round(time.Millisecond))
	if rest := p.stop(); len(rest) == 0 || !rest[len(rest)-1].Is("detached", "iface", "eth0") {
		t.Errorf("5. last records %+v", rest)
	}
}

// TestRestartHealth: a backend that its health check has down stays out
// of service across a pinned restart. l4lb checks three backends (TCP
// connects to the service's port, every 500 ms, fall 2, rise 2); one's
// server stops, and it goes down; l4lb restarts. The new l4lb starts from
// the data plane's record of it (down), so a load of new connections in
// the 6 s after the restart never reaches it: 0 fail (an l4lb that starts
// every backend up sends it a third of them until fall probes fail). Its
// server back, it comes up after rise passes, and connections reach it.
func TestRestartHealth(t *testing.T) {
	r := newRestartNet(t, 3)
	args := append(r.args(3, true), "-health", "tcp", "-health-interval", "500ms", "-health-timeout", "400ms", "-health-fall", "2", "-health-rise", "2")
	args[slices.Index(args, "-admin")+1] = "127.0.0.1:9180" // backendsOf's
	p := r.lbStart(args)
	down := beAddr(1).String()
	r.stops[1]()
	p.await("health: backend down", "backend", down)
	p.await("backends applied", "live", "2", "draining", "0", "down", "1")

	p.stop()
	l := startLoad(r.client, 4, 0) // the pinned data plane forwards meanwhile
	p = start(t, r.lb, r.bin, args...)
	p.await("health: backend starts down, as the data plane left it", "backend", down, "rise", "2")
	first := p.next()
	for first.Msg != "backends applied" {
		first = p.next()
	}
	if !first.Is("backends applied", "live", "2", "draining", "0", "down", "1") {
		t.Errorf("the first table after the restart: %+v, want the backend down", first)
	}
	time.Sleep(6 * time.Second)
	ok, fail, kinds := l.stop()
	if fail != 0 || ok == 0 {
		t.Errorf("in the 6 s after the restart: %d connections worked, %d failed: %v", ok, fail, kinds)
	}
	st := backendsOf(t, r.lb)
	if b := find(t, st, beAddr(1)); b.State != "down" || b.Health != "down" {
		t.Errorf("after the restart, %s: %+v", down, b)
	}

	// Its server back: up after rise passes, and reached again.
	r.stops[1] = serve(t, r.bes[1], down)
	p.await("health: backend up", "backend", down)
	p.await("backends applied", "live", "3", "draining", "0", "down", "0")
	want := restartTable(t, 3)
	var ports []int
	for port := 21000; port < 21200 && len(ports) < 5; port++ { // below the ephemeral range the load used
		if predict(want, port) == down {
			ports = append(ports, port)
		}
	}
	r.connect(want, ports)
	t.Logf("%d connections in the 6 s after the restart, none to the backend down before it", ok)
}
