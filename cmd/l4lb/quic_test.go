package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/quicmaglev"
	"github.com/maglevlb/maglev/quicmaglev/quicecho"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	"github.com/quic-go/quic-go"
)

// The QUIC test's network, addresses in 198.18.0.0/15:
//
//	client  198.18.1.2/24, its default route via the router
//	router  198.18.1.1/24 to the client, 198.18.0.1/24 on a bridge to
//	        l4lb and the backends; the VIP routed to l4lb
//	l4lb    198.18.0.3 (XDP on eth0), one-armed: every mode sends the
//	        packets back out of eth0, to the backends on its segment
//	backends 198.18.0.11.. (the VIP on lo, l4lb decap on eth0), each a
//	        quic-go echo server on VIP:443 issuing QUIC-LB connection
//	        IDs of its server ID, answering the client through the router
type quicNet struct {
	*routedNet
	lb              string   // namespace
	backends        []string // namespaces
	servers         []*quicServer
	bin, dir, admin string
	keys            map[uint8]string // key files by codepoint
	decaps          []*process
	lbProc          *process
	table           *maglev.Table // the table of the backends in the file
}

var (
	quicVIP    = netip.MustParseAddrPort("198.19.0.1:443")
	quicClient = netip.MustParseAddr("198.18.1.2")
)

const quicSeed = 0x5eed

// quicServer is a backend's echo server and its connection ID generator.
type quicServer struct {
	addr netip.Addr
	sid  quiclb.ServerID
	gen  *countingGenerator
	srv  *quicecho.Server
}

// countingGenerator is a quicmaglev.Generator that counts the IDs it
// issues by codepoint.
type countingGenerator struct {
	*quicmaglev.Generator
	mu     sync.Mutex
	issued map[uint8]int
}

func (g *countingGenerator) GenerateConnectionID() (quic.ConnectionID, error) {
	id, err := g.Generator.GenerateConnectionID()
	if err == nil {
		g.mu.Lock()
		g.issued[id.Bytes()[0]>>5]++
		g.mu.Unlock()
	}
	return id, err
}

func (g *countingGenerator) counts() map[uint8]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[uint8]int{}
	for k, v := range g.issued {
		out[k] = v
	}
	return out
}

// newQUICNet builds the network with n backends (servers that issue IDs
// of configuration c), each running l4lb decap, and no l4lb yet.
func newQUICNet(t *testing.T, n int, c quiclb.Config) *quicNet {
	// quic-go's UDP segmentation offload needs the checksum offload the
	// links have off.
	t.Setenv("QUIC_GO_DISABLE_GSO", "1")
	q := &quicNet{routedNet: newRoutedNet(t, "q"), dir: t.TempDir(), admin: "127.0.0.1:9183", keys: map[uint8]string{}}
	q.bin = build(t)
	xdptest.IP(t, "-n", q.router, "route", "add", quicVIP.Addr().String()+"/32", "via", "198.18.0.3")
	q.lb = xdptest.NewNS(q.t, q.tag+"lb")
	q.link(q.lb, "r-lb", "198.18.0.3/24", true)
	xdptest.IP(t, "-n", q.lb, "route", "add", "default", "via", "198.18.0.1")
	xdptest.Sysctl(q.t, q.lb, "net.ipv4.conf.all.forwarding", "1") // bpf_fib_lookup's encapsulation
	q.attachPass("r-lb")
	for i := range n {
		q.addBackend(i, c)
		q.attachPass(fmt.Sprintf("r-be%d", i))
	}
	return q
}

// quicBackend is backend i's address, and its server ID: 0b, i.
func quicBackend(i int) (netip.Addr, quiclb.ServerID) {
	id, _ := quiclb.MakeServerID([]byte{0x0b, byte(i)})
	return netip.AddrFrom4([4]byte{198, 18, 0, byte(11 + i)}), id
}

// addBackend makes backend i: its namespace, l4lb decap, and its echo
// server, whose IDs are of configuration c.
func (q *quicNet) addBackend(i int, c quiclb.Config) {
	t := q.t
	addr, sid := quicBackend(i)
	ns := xdptest.NewNS(q.t, fmt.Sprintf("%sbe%d", q.tag, i))
	q.link(ns, fmt.Sprintf("r-be%d", i), addr.String()+"/24", true)
	xdptest.IP(t, "-n", ns, "route", "add", "default", "via", "198.18.0.1")
	xdptest.IP(t, "-n", ns, "addr", "add", quicVIP.Addr().String()+"/32", "dev", "lo")
	for _, dev := range []string{"all", "eth0"} {
		xdptest.Sysctl(q.t, ns, "net.ipv4.conf."+dev+".arp_ignore", "1")
		xdptest.Sysctl(q.t, ns, "net.ipv4.conf."+dev+".arp_announce", "2")
		xdptest.Sysctl(q.t, ns, "net.ipv4.conf."+dev+".rp_filter", "0")
	}
	q.backends = append(q.backends, ns)
	d := start(t, ns, q.bin, "decap", "-iface", "eth0", "-vip", quicVIP.Addr().String(), "-decap-sources", "198.18.0.3/32", "-admin", "")
	d.await("decapsulating IPIP and GUE")
	q.decaps = append(q.decaps, d)

	pc, err := xdptest.In(ns, func() (net.PacketConn, error) { return net.ListenUDP("udp", net.UDPAddrFromAddrPort(quicVIP)) })
	if err != nil {
		t.Fatal(err)
	}
	g, err := quicmaglev.NewGenerator(c, sid)
	if err != nil {
		t.Fatal(err)
	}
	cg := &countingGenerator{Generator: g, issued: map[uint8]int{}}
	tr := &quic.Transport{Conn: pc, ConnectionIDGenerator: cg}
	srv, err := quicecho.Serve(tr, addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Close()
		_ = tr.Close()
		_ = pc.Close()
	})
	q.servers = append(q.servers, &quicServer{addr: addr, sid: sid, gen: cg, srv: srv})
}

// key writes a key file for codepoint cp and returns its path.
func (q *quicNet) key(cp uint8) string {
	if p, ok := q.keys[cp]; ok {
		return p
	}
	p := filepath.Join(q.dir, fmt.Sprintf("quic%d.key", cp))
	k := bytes.Repeat([]byte{0x40 + cp}, quiclb.KeyLen)
	if err := os.WriteFile(p, []byte(hex.EncodeToString(k)+"\n"), 0o600); err != nil {
		q.t.Fatal(err)
	}
	q.keys[cp] = p
	return p
}

// configure writes l4lb's configuration file: the service on the VIP by
// forward, its first n backends, with quic-lb on (c's codepoint, lengths
// and, with keyed, the key file of its codepoint) or off; the servers
// issue IDs of c from then on. It starts l4lb the first time, and
// reloads it after.
func (q *quicNet) configure(forward string, n int, on bool, c quiclb.Config, keyed bool) {
	t := q.t
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "iface: eth0\nmode: native\nseed: %d\nadmin: %s\npin-dir: \"\"\nservices:\n  - name: h3\n    vip: %v\n    proto: udp\n    forward: %s\n    backends:\n",
		quicSeed, q.admin, quicVIP, forward)
	var names []maglev.Backend
	for i := range n {
		addr, sid := quicBackend(i)
		if on {
			fmt.Fprintf(&b, "      - {addr: %v, server-id: %v}\n", addr, sid)
		} else {
			fmt.Fprintf(&b, "      - %v\n", addr)
		}
		names = append(names, maglev.Backend{Name: addr.String(), Weight: 1})
	}
	if on {
		fmt.Fprintf(&b, "    quic-lb: true\n    quic-lb-config-id: %d\n    quic-lb-server-id-length: %d\n    quic-lb-nonce-length: %d\n", c.ID, c.ServerIDLen, c.NonceLen)
		if keyed {
			fmt.Fprintf(&b, "    quic-lb-key-file: %s\n", q.key(c.ID))
		}
	}
	if keyed {
		c.Key = bytes.Repeat([]byte{0x40 + c.ID}, quiclb.KeyLen)
	} else {
		c.Key = nil
	}
	for _, s := range q.servers {
		if err := s.gen.Rotate(c, s.sid); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(q.dir, "l4lb.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if q.table, err = maglev.NewWeighted(names, maglev.DefaultSize, nil); err != nil {
		t.Fatal(err)
	}
	if q.lbProc == nil {
		q.lbProc = start(q.top, q.lb, q.bin, "run", "-config", path)
		q.lbProc.await("backends applied")
		return
	}
	if _, err := requestAt(q.lb, q.admin, "POST", "/reload"); err != nil {
		t.Fatalf("reload: %v", err)
	}
}

// socket opens a UDP socket of the client's.
func (q *quicNet) socket() *net.UDPConn {
	q.t.Helper()
	pc, err := xdptest.In(q.client, func() (*net.UDPConn, error) {
		return net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(quicClient, 0)))
	})
	if err != nil {
		q.t.Fatal(err)
	}
	q.top.Cleanup(func() { _ = pc.Close() })
	return pc
}

// A quicConn is a client's connection and the backend that answered it
// first.
type quicConn struct {
	c       *quicecho.Client
	sock    *net.UDPConn
	backend string
}

// dial makes n connections, a few at a time, each answered once.
func (q *quicNet) dial(n int) []*quicConn {
	q.t.Helper()
	out := make([]*quicConn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		sock := q.socket()
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := quicecho.Dial(ctx, sock, net.UDPAddrFromAddrPort(quicVIP))
			if err != nil {
				errs[i] = err
				return
			}
			q.top.Cleanup(func() { _ = c.Close() })
			name, err := c.Echo(ctx, "hello")
			out[i], errs[i] = &quicConn{c: c, sock: sock, backend: name}, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			q.t.Fatalf("connection %d of %d: %v", i, n, err)
		}
	}
	return out
}

// migrate moves each connection to a new socket of the client's (a new
// port: a client whose address changes, a NAT that rebinds): it probes
// the new path (from one of the spare connection IDs the server issued),
// switches to it, and echoes on it. It returns, for each, whether it goes
// on with the backend that answered it first, and the new ports.
func (q *quicNet) migrate(conns []*quicConn, wait time.Duration) ([]bool, []uint16) {
	q.t.Helper()
	kept := make([]bool, len(conns))
	ports := make([]uint16, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		sock := q.socket()
		ports[i] = uint16(sock.LocalAddr().(*net.UDPAddr).Port)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			if err := c.c.Migrate(ctx, sock); err != nil {
				return
			}
			// The old socket stays open: quic-go ends a connection when
			// the socket it dialled from closes, wherever it has moved.
			// Nothing is sent from it any more.
			for range 3 {
				name, err := c.c.Echo(ctx, "after")
				if err != nil || name != c.backend {
					return
				}
			}
			kept[i] = true
		})
	}
	wg.Wait()
	return kept, ports
}

// echo echoes once on each connection and returns those that failed or
// were answered by another backend than the first.
func (q *quicNet) echo(conns []*quicConn) []int {
	var bad []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if name, err := c.c.Echo(ctx, "again"); err != nil || name != c.backend {
				mu.Lock()
				bad = append(bad, i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(bad)
	return bad
}

// stats returns the data plane's counters, from l4lb's admin API.
func (q *quicNet) stats() xdpmaglev.Stats {
	q.t.Helper()
	body, err := requestAt(q.lb, q.admin, "GET", "/debug/maglev")
	if err != nil {
		q.t.Fatal(err)
	}
	var st struct {
		Stats xdpmaglev.Stats `json:"stats"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		q.t.Fatalf("%v: %s", err, body)
	}
	return st.Stats
}

// quicConfig is the tests' configuration at codepoint cp: a 2-octet
// server ID and a 14-octet nonce (one AES block with a key), as l4lb's
// defaults: every configuration's IDs are 17 octets, as a quic-go
// Transport's must stay.
func quicConfig(cp uint8) quiclb.Config {
	return quiclb.Config{ID: cp, ServerIDLen: 2, NonceLen: 14}
}

// TestQUIC runs quic-go echo servers on three backends behind l4lb, and
// 60 connections from a client that then migrates each to a new port, in
// every forwarding mode, with plaintext and encrypted server IDs: with
// quic-lb on, every connection keeps its backend; with it off, exactly
// those whose new port's flow the table sends elsewhere break (their path
// probe reaches a backend that never saw them), about two in three.
// Then, with the last 60 connections open: a fourth backend joins (new
// connections reach it) and l4lb restarts, and every connection goes on
// and migrates again; a key rotation by reload keeps the connections of
// the old configuration while new ones get the new one's IDs; and junk on
// the VIP's port is routed by the table, counted by reason, and breaks
// nothing.
func TestQUIC(t *testing.T) {
	q := newQUICNet(t, 4, quicConfig(0))
	const n = 60

	t.Run("off", func(t *testing.T) {
		q.t = t
		q.configure("gue", 3, false, quicConfig(0), false)
		conns := q.dial(n)
		kept, ports := q.migrate(conns, 3*time.Second)
		broken, mispredicted := 0, 0
		for i, c := range conns {
			h := xdpmaglev.FlowHash(quicSeed, netip.AddrPortFrom(quicClient, ports[i]), quicVIP, 17)
			if !kept[i] {
				broken++
			}
			if kept[i] != (q.table.LookupHash(h) == c.backend) {
				mispredicted++
			}
		}
		t.Logf("quic-lb off: %d of %d connections broken by their migration", broken, n)
		if mispredicted != 0 {
			t.Errorf("%d connections kept or broken against the table's prediction", mispredicted)
		}
		if broken < n/3 || broken > n*9/10 {
			t.Errorf("%d of %d broken; about 2/3 expected", broken, n)
		}
		for _, c := range conns {
			_ = c.c.Close()
		}
	})

	var last []*quicConn
	for _, mode := range []string{"l2", "ipip", "gue"} {
		for _, keyed := range []bool{false, true} {
			name := mode + "/plaintext"
			if keyed {
				name = mode + "/encrypted"
			}
			t.Run(name, func(t *testing.T) {
				q.t = t
				q.configure(mode, 3, true, quicConfig(0), keyed)
				before := q.stats()
				conns := q.dial(n)
				kept, _ := q.migrate(conns, 5*time.Second)
				if k := count(kept); k != n {
					t.Fatalf("%d of %d connections kept their backend across a migration", k, n)
				}
				backends := map[string]int{}
				for _, c := range conns {
					backends[c.backend]++
				}
				if len(backends) != 3 {
					t.Errorf("connections by backend %v: want all three", backends)
				}
				after := q.stats()
				if after.QUIC.CID <= before.QUIC.CID || after.QUIC.Table["initial"] < before.QUIC.Table["initial"]+n ||
					after.QUIC.Table["unknown_server"] != before.QUIC.Table["unknown_server"] || after.QUIC.Table["unknown_config"] != before.QUIC.Table["unknown_config"] {
					t.Errorf("counters %+v then %+v", before.QUIC, after.QUIC)
				}
				if keyed && after.QUIC.Decrypted == before.QUIC.Decrypted {
					t.Error("encrypted IDs, none decrypted")
				}
				if mode == "gue" && keyed {
					last = conns // kept open for what follows
					return
				}
				for _, c := range conns {
					_ = c.c.Close()
				}
			})
		}
	}
	if t.Failed() {
		return
	}

	t.Run("join and restart", func(t *testing.T) {
		q.t = t
		q.configure("gue", 4, true, quicConfig(0), true) // a fourth backend joins
		if bad := q.echo(last); len(bad) != 0 {
			t.Fatalf("after the join: connections %v broken", bad)
		}
		fresh := q.dial(n)
		fourth := 0
		for _, c := range fresh {
			if c.backend == q.servers[3].addr.String() {
				fourth++
			}
		}
		if fourth == 0 {
			t.Fatalf("none of %d new connections reached the fourth backend", n)
		}
		// A restart without pins: a new data plane, which knows no flow.
		rest := q.lbProc.stop()
		if !has(rest, "detached", "iface", "eth0") {
			t.Fatalf("l4lb's last records %+v", rest)
		}
		q.lbProc = start(q.top, q.lb, q.bin, "run", "-config", filepath.Join(q.dir, "l4lb.yaml"))
		q.lbProc.await("backends applied")
		all := append(slices.Clone(last), fresh...)
		if bad := q.echo(all); len(bad) != 0 {
			t.Fatalf("after the restart: connections %v of %d broken", bad, len(all))
		}
		if kept, _ := q.migrate(all, 5*time.Second); count(kept) != len(all) {
			t.Fatalf("after the restart: %d of %d connections kept their backend across a migration", count(kept), len(all))
		}
		last = all
	})

	t.Run("rotation", func(t *testing.T) {
		q.t = t
		before := map[uint8]int{}
		for _, s := range q.servers {
			for k, v := range s.gen.counts() {
				before[k] += v
			}
		}
		q.configure("gue", 4, true, quicConfig(1), true) // codepoint 1, another key; the servers move to it
		if bad := q.echo(last); len(bad) != 0 {
			t.Fatalf("after the rotation: connections of the old configuration %v broken", bad)
		}
		fresh := q.dial(20)
		all := append(slices.Clone(last), fresh...)
		if kept, _ := q.migrate(all, 5*time.Second); count(kept) != len(all) {
			t.Fatalf("after the rotation: %d of %d connections kept their backend across a migration", count(kept), len(all))
		}
		after := map[uint8]int{}
		for _, s := range q.servers {
			for k, v := range s.gen.counts() {
				after[k] += v
			}
		}
		if after[0] != before[0] || after[1] < 20 {
			t.Fatalf("IDs issued by codepoint: %v, then %v: want new ones of 1 alone", before, after)
		}
		if st := q.stats(); st.QUIC.Table["unknown_config"] != 0 || st.QUIC.Table["unknown_server"] != 0 {
			t.Fatalf("counters %+v", st.QUIC)
		}
	})

	t.Run("hostile", func(t *testing.T) {
		q.t = t
		before := q.stats()
		sock := q.socket()
		rng := rand.New(rand.NewPCG(1, 2))
		_, sid := quicBackend(7) // no backend's
		stranger, err := quiclb.NewGenerator(quiclb.Config{ID: 1, ServerIDLen: 2, NonceLen: 14, Key: bytes.Repeat([]byte{0x41}, 16)}, sid)
		if err != nil {
			t.Fatal(err)
		}
		var sent []string
		send := func(kind string, p []byte) {
			if _, err := sock.WriteToUDP(p, net.UDPAddrFromAddrPort(quicVIP)); err != nil {
				t.Fatal(err)
			}
			sent = append(sent, kind)
		}
		for range 50 {
			cid, _ := stranger.Append(nil)
			send("unknown_server", append(append([]byte{0x40}, cid...), make([]byte, 24)...))
			cid[0] |= 0xe0
			send("unroutable", append(append([]byte{0x40}, cid...), make([]byte, 24)...))
			send("short", []byte{0x40, 0x30, 1, 2})
			junk := make([]byte, 1+rng.IntN(80))
			for i := range junk {
				junk[i] = byte(rng.Uint32())
			}
			send("junk", junk)
		}
		var after xdpmaglev.Stats
		for range 50 { // counted once the program has run on them
			after = q.stats()
			var routed uint64
			for _, v := range after.QUIC.Table {
				routed += v
			}
			for _, v := range before.QUIC.Table {
				routed -= v
			}
			routed += after.QUIC.CID - before.QUIC.CID
			if routed >= uint64(len(sent)) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, r := range []string{"unknown_server", "unroutable", "short"} {
			if d := after.QUIC.Table[r] - before.QUIC.Table[r]; d < 50 {
				t.Errorf("%s: %d counted, want 50 at least", r, d)
			}
		}
		for r, n := range after.Dropped {
			if n != before.Dropped[r] {
				t.Errorf("dropped %s: %d, then %d: junk on the VIP's port is routed, not dropped", r, before.Dropped[r], n)
			}
		}
		if bad := q.echo(last); len(bad) != 0 {
			t.Fatalf("after the junk: connections %v broken", bad)
		}
	})
}

func count(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}
