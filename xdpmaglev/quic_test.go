package xdpmaglev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/quiclb"
)

// quicWords is QUIC_WORDS: the words a block is read as.
const quicWords = int(maglevConstsQUIC_WORDS)

// QUIC versions 1 and 2 (RFC 9000, RFC 9369).
const (
	quicV1 = 0x00000001
	quicV2 = 0x6b3343cf
)

// shortHeader returns a QUIC short header packet's UDP payload: the first
// octet (fixed bit set), the destination connection ID cid, and 24 octets
// of packet number, payload and AEAD tag.
func shortHeader(cid []byte) []byte {
	b := append([]byte{0x40}, cid...)
	return append(b, bytes.Repeat([]byte{0x5a}, 24)...)
}

// longHeader returns a QUIC long header packet's UDP payload of version v
// and type t (the first octet's bits 4 and 5), destination connection ID
// dcid, an 8-octet source connection ID, and 40 octets after them.
func longHeader(v uint32, t byte, dcid []byte) []byte {
	b := []byte{0xc0 | t<<4, 0, 0, 0, 0, byte(len(dcid))}
	binary.BigEndian.PutUint32(b[1:], v)
	b = append(b, dcid...)
	b = append(b, 8, 1, 2, 3, 4, 5, 6, 7, 8)
	return append(b, bytes.Repeat([]byte{0x33}, 40)...)
}

var quicKey = bytes.Repeat([]byte{0x42}, quiclb.KeyLen)

// quicModes are a configuration of each way of writing server IDs: in the
// clear, one AES block, four passes with the server ID in the left half
// (three to decrypt), four passes with a longer server ID (four), an odd
// block (the split octet).
var quicModes = []struct {
	name string
	c    quiclb.Config
}{
	{"plaintext", quiclb.Config{ServerIDLen: 3, NonceLen: 6}},
	{"single-pass", quiclb.Config{ServerIDLen: 4, NonceLen: 12, Key: quicKey}},
	{"four-pass", quiclb.Config{ServerIDLen: 3, NonceLen: 6, Key: quicKey}},
	{"four-pass-long-sid", quiclb.Config{ServerIDLen: 9, NonceLen: 5, Key: quicKey, EncodeLength: true}},
	{"four-pass-odd", quiclb.Config{ServerIDLen: 2, NonceLen: 5, Key: quicKey}},
}

// quicSIDs gives each backend of bs a server ID of n octets: 0a, the
// backend's index, and zeros.
func quicSIDs(t testing.TB, bs []Backend, n int) map[netip.Addr]quiclb.ServerID {
	t.Helper()
	out := map[netip.Addr]quiclb.ServerID{}
	for i, b := range bs {
		raw := make([]byte, n)
		raw[0] = 0x0a
		if n > 1 {
			raw[1] = byte(i)
		} else {
			raw[0] = byte(0x80 + i)
		}
		id, err := quiclb.MakeServerID(raw)
		if err != nil {
			t.Fatal(err)
		}
		out[b.Addr] = id
	}
	return out
}

// quicService sets svc with backends bs and the configurations cs, each
// with server IDs from quicSIDs, and returns the configurations.
func quicService(t testing.TB, lb *LB, svc Service, bs []Backend, opts ServiceOptions, cs ...quiclb.Config) []QUICConfig {
	t.Helper()
	q := &QUIC{}
	for _, c := range cs {
		q.Configs = append(q.Configs, QUICConfig{Config: c, ServerIDs: quicSIDs(t, bs, c.ServerIDLen)})
	}
	opts.QUIC = q
	if err := lb.SetService(svc, bs, opts); err != nil {
		t.Fatal(err)
	}
	return q.Configs
}

// newCID returns a new connection ID of backend a in configuration c.
func newCID(t testing.TB, c QUICConfig, a netip.Addr) []byte {
	t.Helper()
	g, err := quiclb.NewGenerator(c.Config, c.ServerIDs[a])
	if err != nil {
		t.Fatal(err)
	}
	cid, err := g.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cid
}

// quicCounters returns the QUIC-LB counters by name, cid, decrypted and
// each table reason, and the conntrack inserts.
func quicCounters(t testing.TB, lb *LB) map[string]uint64 {
	t.Helper()
	st, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{"cid": st.QUIC.CID, "decrypted": st.QUIC.Decrypted, "conntrack_insert": st.Conntrack.Inserts,
		"stateless": st.Stateless, "tx": st.Forwarded}
	for r, n := range st.QUIC.Table {
		m["table_"+r] = n
	}
	return m
}

// sendTo sends a QUIC payload from c to svc and returns the address of
// the backend it went to (the L2 backend of its destination MAC).
func sendTo(t testing.TB, lb *LB, bs []Backend, c netip.AddrPort, svc Service, payload []byte) netip.Addr {
	t.Helper()
	v, out := run(t, lb, packet(c, svc.VIP, 17, payload))
	if v != xdpTX {
		t.Fatalf("from %v, %x: verdict %d, want XDP_TX", c, payload[:min(len(payload), 24)], v)
	}
	for _, b := range bs {
		if bytes.Equal(out[:6], b.HW) {
			return b.Addr
		}
	}
	t.Fatalf("from %v: sent to %v, no backend", c, net.HardwareAddr(out[:6]))
	return netip.Addr{}
}

// tableTo returns the backend the table sends a new flow from c to.
func tableTo(lb *LB, svc Service, c netip.AddrPort) netip.Addr {
	return netip.MustParseAddr(lb.Table(svc).LookupHash(FlowHash(lb.opts.Seed, c, svc.VIP, 17)))
}

// TestQUICByCID: for every mode of writing server IDs, IPv4 and IPv6, a
// connection's short header packets go to the backend its connection ID
// names from every client port (a migrated client, a rebound NAT), and so
// do its Handshake packets of versions 1 and 2, though the table would
// send most of those flows elsewhere; none writes a conntrack entry, and
// an encrypted ID is decrypted once, then found in the cache.
func TestQUICByCID(t *testing.T) {
	lb := newLB(t, Options{M: 251})
	for _, v6 := range []bool{false, true} {
		for _, m := range quicModes {
			t.Run(fmt.Sprintf("%s/v6=%v", m.name, v6), func(t *testing.T) {
				svc := Service{VIP: vip(v6, 443), Proto: UDP}
				bs := testBackends(1, 4, v6)
				cs := quicService(t, lb, svc, bs, ServiceOptions{}, m.c)
				defer func() { _ = lb.DeleteService(svc) }()
				before := quicCounters(t, lb)
				elsewhere := 0
				for _, b := range bs {
					cid := newCID(t, cs[0], b.Addr)
					for port := uint16(2000); port < 2040; port++ {
						c := client(v6, port)
						if got := sendTo(t, lb, bs, c, svc, shortHeader(cid)); got != b.Addr {
							t.Fatalf("port %d: to %v, want %v, whose ID it carries", port, got, b.Addr)
						}
						if tableTo(lb, svc, c) != b.Addr {
							elsewhere++
						}
					}
					for _, lh := range [][]byte{longHeader(quicV1, 2, cid), longHeader(quicV2, 3, cid)} {
						if got := sendTo(t, lb, bs, client(v6, 3000), svc, lh); got != b.Addr {
							t.Fatalf("a Handshake packet: to %v, want %v", got, b.Addr)
						}
					}
				}
				d := delta(before, quicCounters(t, lb))
				n := uint64(len(bs) * 42)
				wantDecrypted := uint64(0)
				if m.c.Mode() != quiclb.Plaintext {
					wantDecrypted = uint64(len(bs)) // one a connection ID
				}
				if d["cid"] != n || d["decrypted"] != wantDecrypted || d["conntrack_insert"] != 0 || d["tx"] != n || len(d) > 3 {
					t.Fatalf("counters moved %v, want cid and tx %d, decrypted %d, nothing else", d, n, wantDecrypted)
				}
				if elsewhere < len(bs)*40/2 {
					t.Fatalf("the table would have sent only %d of %d flows elsewhere: the test shows nothing", elsewhere, len(bs)*40)
				}
			})
		}
	}
}

// TestQUICTableRoutes: a packet whose connection ID the client chose, or
// that names no server of the service, goes where the table sends its
// flow, and is counted by reason; the service's conntrack holds it.
func TestQUICTableRoutes(t *testing.T) {
	lb := newLB(t, Options{M: 251})
	svc := Service{VIP: vip(false, 443), Proto: UDP}
	bs := testBackends(1, 4, false)
	cs := quicService(t, lb, svc, bs, ServiceOptions{}, quiclb.Config{ID: 1, ServerIDLen: 3, NonceLen: 6, Key: quicKey})
	good := newCID(t, cs[0], bs[0].Addr)
	with := func(cid []byte, first byte) []byte {
		c := slices.Clone(cid)
		c[0] = first
		return c
	}
	unknown, _ := quiclb.MakeServerID([]byte{0xee, 0xee, 0xee})
	stranger := newCID(t, QUICConfig{Config: cs[0].Config, ServerIDs: map[netip.Addr]quiclb.ServerID{{}: unknown}}, netip.Addr{})
	for i, c := range []struct {
		name, reason string
		payload      []byte
	}{
		{"v1 Initial", "initial", longHeader(quicV1, 0, good)},
		{"v1 0-RTT", "initial", longHeader(quicV1, 1, good)},
		{"v2 Initial", "initial", longHeader(quicV2, 1, good)},
		{"v2 0-RTT", "initial", longHeader(quicV2, 2, good)},
		{"v1 Retry", "long_other", longHeader(quicV1, 3, good)},
		{"v2 Retry", "long_other", longHeader(quicV2, 0, good)},
		{"Version Negotiation", "long_other", longHeader(0, 0, good)},
		{"an unknown version", "long_other", longHeader(0x1a2a3a4a, 2, good)},
		{"codepoint 0b111", "unroutable", shortHeader(with(good, 0xe0|good[0]&0x1f))},
		{"a codepoint with no configuration", "unknown_config", shortHeader(with(good, 0x40|good[0]&0x1f))},
		{"an unknown server ID", "unknown_server", shortHeader(stranger)},
		{"a Handshake ID shorter than the configuration's", "short", longHeader(quicV1, 2, good[:len(good)-1])},
		{"a packet too short for a QUIC packet", "short", append([]byte{0x40}, good...)},
		{"no payload", "short", nil},
		{"a long header cut short", "short", []byte{0xc0, 0, 0}},
	} {
		before := quicCounters(t, lb)
		from := client(false, uint16(4000+i))
		if got, want := sendTo(t, lb, bs, from, svc, c.payload), tableTo(lb, svc, from); got != want {
			t.Errorf("%s: to %v, want %v, the table's", c.name, got, want)
		}
		d := delta(before, quicCounters(t, lb))
		if d["table_"+c.reason] != 1 || d["cid"] != 0 || d["conntrack_insert"] != 1 {
			t.Errorf("%s: counters moved %v, want table_%s and a conntrack entry", c.name, d, c.reason)
		}
	}
}

// TestQUICHostile: random payloads on the service's port, and random
// connection IDs in well-formed headers, are each forwarded (never
// dropped, passed or aborted), by the connection ID only where it decodes
// to a server, and counted once each.
func TestQUICHostile(t *testing.T) {
	lb := newLB(t, Options{M: 251})
	svc := Service{VIP: vip(false, 443), Proto: UDP}
	bs := testBackends(1, 4, false)
	quicService(t, lb, svc, bs, ServiceOptions{}, quiclb.Config{ID: 0, ServerIDLen: 3, NonceLen: 6},
		quiclb.Config{ID: 2, ServerIDLen: 4, NonceLen: 12, Key: quicKey}, quiclb.Config{ID: 3, ServerIDLen: 3, NonceLen: 5, Key: quicKey})
	rng := rand.New(rand.NewPCG(1, 2))
	before := quicCounters(t, lb)
	const n = 3000
	for i := range n {
		p := make([]byte, rng.IntN(64))
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		switch i % 3 {
		case 1: // a short header
			if len(p) > 0 {
				p[0] = p[0]&0x7f | 0x40
			}
		case 2: // a version 1 Handshake, its ID random
			p = longHeader(quicV1, 2, p[:min(len(p), 20)])
		}
		sendTo(t, lb, bs, client(false, uint16(i)), svc, p)
	}
	d := delta(before, quicCounters(t, lb))
	var total uint64
	for k, v := range d {
		if k == "cid" || strings.HasPrefix(k, "table_") {
			total += v
		}
	}
	if total != n || d["tx"] != n {
		t.Fatalf("counters moved %v: %d counted by route, want %d", d, total, n)
	}
	if d["cid"] > n/100 {
		t.Fatalf("%d random IDs routed by connection ID", d["cid"])
	}
}

// TestQUICRotation: a service decodes two configurations at once (a key
// rotation: the old codepoint and key, the new), each by its own key;
// once the old one is removed, its IDs go by the table; a new key at a
// codepoint in use takes effect at once, the cache keeping no server ID
// of the old key's.
func TestQUICRotation(t *testing.T) {
	lb := newLB(t, Options{M: 251})
	svc := Service{VIP: vip(false, 443), Proto: UDP}
	bs := testBackends(1, 3, false)
	oldC := quiclb.Config{ID: 0, ServerIDLen: 3, NonceLen: 6, Key: bytes.Repeat([]byte{1}, 16)}
	newC := quiclb.Config{ID: 1, ServerIDLen: 3, NonceLen: 6, Key: bytes.Repeat([]byte{2}, 16)}
	cs := quicService(t, lb, svc, bs, ServiceOptions{}, oldC, newC)
	oldIDs, newIDs := map[netip.Addr][]byte{}, map[netip.Addr][]byte{}
	for _, b := range bs {
		oldIDs[b.Addr], newIDs[b.Addr] = newCID(t, cs[0], b.Addr), newCID(t, cs[1], b.Addr)
	}
	check := func(ids map[netip.Addr][]byte, byCID bool, what string) {
		t.Helper()
		for a, cid := range ids {
			for port := uint16(100); port < 110; port++ {
				c := client(false, port)
				want := a
				if !byCID {
					want = tableTo(lb, svc, c)
				}
				if got := sendTo(t, lb, bs, c, svc, shortHeader(cid)); got != want {
					t.Fatalf("%s: %v's ID from port %d to %v, want %v", what, a, port, got, want)
				}
			}
		}
	}
	check(oldIDs, true, "both configurations")
	check(newIDs, true, "both configurations")

	before := quicCounters(t, lb)
	quicService(t, lb, svc, bs, ServiceOptions{}, newC) // the old configuration gone
	check(oldIDs, false, "the new configuration alone")
	check(newIDs, true, "the new configuration alone")
	if d := delta(before, quicCounters(t, lb)); d["table_unknown_config"] != 30 || d["cid"] != 30 || d["decrypted"] != 0 {
		t.Fatalf("counters moved %v, want 30 unknown_config, 30 by cid from the cache", d)
	}

	// Another key at codepoint 1: the IDs of the last key decrypt to no
	// server now (not a stale entry of the cache), and the new key's
	// route.
	before = quicCounters(t, lb)
	other := newC
	other.Key = bytes.Repeat([]byte{3}, 16)
	cs = quicService(t, lb, svc, bs, ServiceOptions{}, other)
	check(newIDs, false, "a new key at the same codepoint")
	otherIDs := map[netip.Addr][]byte{}
	for _, b := range bs {
		otherIDs[b.Addr] = newCID(t, cs[0], b.Addr)
	}
	check(otherIDs, true, "a new key at the same codepoint")
	if d := delta(before, quicCounters(t, lb)); d["table_unknown_server"] != 30 || d["cid"] != 30 || d["decrypted"] != 30+3 {
		t.Fatalf("counters moved %v, want 30 unknown_server (each decrypted: not cached), 30 by cid (3 decrypted)", d)
	}
	// The same configuration set again keeps its key and cache.
	before = quicCounters(t, lb)
	quicService(t, lb, svc, bs, ServiceOptions{}, other)
	check(otherIDs, true, "the same key set again")
	if d := delta(before, quicCounters(t, lb)); d["decrypted"] != 0 {
		t.Fatalf("the same key set again: %d decrypted, want the cache's", d["decrypted"])
	}
}

// TestQUICBackends: a backend that leaves, or is Down, gets no packet by
// its server ID (they go by the table); a drained one (weight 0) keeps
// its connections' packets; one without a server ID gets what the table
// sends it.
func TestQUICBackends(t *testing.T) {
	lb := newLB(t, Options{M: 251})
	svc := Service{VIP: vip(false, 443), Proto: UDP}
	bs := testBackends(1, 4, false)
	cs := quicService(t, lb, svc, bs, ServiceOptions{}, quicModes[0].c)
	ids := map[netip.Addr][]byte{}
	for _, b := range bs {
		ids[b.Addr] = newCID(t, cs[0], b.Addr)
	}
	next := uint16(500) // each call's flows new: no conntrack entry of an earlier table's
	route := func(what string, a netip.Addr, byCID bool) {
		t.Helper()
		next += 20
		for port := next; port < next+20; port++ {
			c := client(false, port)
			want := a
			if !byCID {
				want = tableTo(lb, svc, c)
			}
			if got := sendTo(t, lb, bs, c, svc, shortHeader(ids[a])); got != want {
				t.Fatalf("%s: from port %d to %v, want %v", what, port, got, want)
			}
		}
	}
	set := func(bs []Backend) {
		t.Helper()
		q := &QUIC{Configs: []QUICConfig{{Config: cs[0].Config, ServerIDs: map[netip.Addr]quiclb.ServerID{}}}}
		for _, b := range bs {
			if id, ok := cs[0].ServerIDs[b.Addr]; ok {
				q.Configs[0].ServerIDs[b.Addr] = id
			}
		}
		if err := lb.SetService(svc, bs, ServiceOptions{QUIC: q}); err != nil {
			t.Fatal(err)
		}
	}
	drained := slices.Clone(bs)
	drained[1].Weight = 0
	set(drained)
	route("drained", bs[1].Addr, true)
	down := slices.Clone(bs)
	down[2].Down = true
	set(down)
	route("Down", bs[2].Addr, false)
	route("the others", bs[0].Addr, true)
	set(bs[:3])
	before := quicCounters(t, lb)
	route("gone", bs[3].Addr, false)
	if d := delta(before, quicCounters(t, lb)); d["table_unknown_server"] != 20 {
		t.Fatalf("counters moved %v, want 20 unknown_server", d)
	}
	set(bs) // back; a backend without a server ID
	noID := quicSIDs(t, bs, 3)
	delete(noID, bs[0].Addr)
	if err := lb.SetService(svc, bs, ServiceOptions{QUIC: &QUIC{Configs: []QUICConfig{{Config: cs[0].Config, ServerIDs: noID}}}}); err != nil {
		t.Fatal(err)
	}
	route("no server ID", bs[0].Addr, false)
	route("with one", bs[1].Addr, true)
}

// TestQUICStateless: with conntrack off, a packet goes by its connection
// ID all the same, and one the table routes goes by the table alone.
func TestQUICStateless(t *testing.T) {
	lb := newLB(t, Options{M: 251})
	svc := Service{VIP: vip(true, 443), Proto: UDP}
	bs := testBackends(1, 3, true)
	cs := quicService(t, lb, svc, bs, ServiceOptions{Conntrack: ConntrackOff}, quicModes[1].c)
	before := quicCounters(t, lb)
	cid := newCID(t, cs[0], bs[2].Addr)
	for port := uint16(1); port < 30; port++ {
		if got := sendTo(t, lb, bs, client(true, port), svc, shortHeader(cid)); got != bs[2].Addr {
			t.Fatalf("to %v, want %v", got, bs[2].Addr)
		}
		c := client(true, port)
		if got := sendTo(t, lb, bs, c, svc, longHeader(quicV1, 0, cid)); got != tableTo(lb, svc, c) {
			t.Fatalf("an Initial to %v, want the table's", got)
		}
	}
	if d := delta(before, quicCounters(t, lb)); d["cid"] != 29 || d["table_initial"] != 29 || d["stateless"] != 29 || d["conntrack_insert"] != 0 {
		t.Fatalf("counters moved %v", d)
	}
}

// TestQUICOptions checks the bad QUIC-LB options, each refused with its
// error, and the data plane left as it was.
func TestQUICOptions(t *testing.T) {
	lb := newLB(t, Options{M: 251})
	udp := Service{VIP: vip(false, 443), Proto: UDP}
	bs := testBackends(1, 3, false)
	good := quiclb.Config{ID: 1, ServerIDLen: 2, NonceLen: 6}
	sids := quicSIDs(t, bs, 2)
	with := func(f func(q *QUIC)) *QUIC {
		q := &QUIC{Configs: []QUICConfig{{Config: good, ServerIDs: maps.Clone(sids)}}}
		f(q)
		return q
	}
	id3, _ := quiclb.MakeServerID([]byte{1, 2, 3})
	for _, c := range []struct {
		name string
		svc  Service
		q    *QUIC
		want error
		text string
	}{
		{"TCP", Service{VIP: vip(false, 443), Proto: TCP}, with(func(*QUIC) {}), ErrService, "QUIC-LB routes UDP"},
		{"no configuration", udp, &QUIC{}, ErrService, "0 configurations"},
		{"eight", udp, with(func(q *QUIC) {
			for i := range 7 {
				q.Configs = append(q.Configs, QUICConfig{Config: quiclb.Config{ID: uint8(i), ServerIDLen: 2, NonceLen: 6}})
			}
		}), ErrService, "8 configurations"},
		{"a codepoint twice", udp, with(func(q *QUIC) { q.Configs = append(q.Configs, QUICConfig{Config: good}) }), ErrService, "configuration 1 given twice"},
		{"a bad configuration", udp, with(func(q *QUIC) { q.Configs[0].NonceLen = 3 }), quiclb.ErrConfig, "NonceLen 3"},
		{"codepoint 7", udp, with(func(q *QUIC) { q.Configs[0].ID = 7 }), quiclb.ErrConfig, "ID 7"},
		{"a server ID's length", udp, with(func(q *QUIC) { q.Configs[0].ServerIDs[bs[0].Addr] = id3 }), ErrBackend, "3 octets"},
		{"a server ID twice", udp, with(func(q *QUIC) { q.Configs[0].ServerIDs[bs[0].Addr] = sids[bs[1].Addr] }), ErrBackend, "given to"},
		{"a server ID of no backend", udp, with(func(q *QUIC) { q.Configs[0].ServerIDs[netip.MustParseAddr("198.18.9.9")] = id3 }), ErrService, "no backend"},
	} {
		err := lb.SetService(c.svc, bs, ServiceOptions{QUIC: c.q})
		if !errors.Is(err, c.want) || !strings.Contains(fmt.Sprint(err), c.text) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.text)
		}
	}
	if len(lb.Services()) != 0 {
		t.Fatalf("services %v after refused updates", lb.Services())
	}
	// Without the kernel's AES, an encrypted configuration is refused.
	lb.kptr = false
	err := lb.SetService(udp, bs, ServiceOptions{QUIC: with(func(q *QUIC) { q.Configs[0].Key = quicKey })})
	wantErr(t, err, ErrUnsupported)
}

// refQUIC is quic.h's reading of a QUIC-LB service's UDP payload p, in Go,
// with quiclb's Decoder d of the configurations cs: the reason the table
// routes the packet, or "" and the server ID its connection ID carries.
func refQUIC(p []byte, d *quiclb.Decoder, cs map[uint8]quiclb.Config) (string, quiclb.ServerID) {
	var none quiclb.ServerID
	if len(p) < 6 {
		return "short", none
	}
	room, cid := 0xff, p[1:]
	if p[0]&0x80 != 0 {
		v, typ := binary.BigEndian.Uint32(p[1:]), p[0]>>4&3
		switch {
		case v == quicV1 && typ <= 1, v == quicV2 && (typ == 1 || typ == 2):
			return "initial", none
		case v == quicV1 && typ == 2, v == quicV2 && typ == 3:
		default:
			return "long_other", none
		}
		room, cid = int(p[5]), p[6:]
	}
	if len(cid) < 1+8*quicWords { // the program reads the block as words
		return "short", none
	}
	c, ok := cs[cid[0]>>5]
	switch {
	case cid[0]>>5 == quiclb.Unroutable:
		return "unroutable", none
	case !ok:
		return "unknown_config", none
	case room < 1+c.ServerIDLen+c.NonceLen:
		return "short", none
	}
	id, err := d.Decode(cid)
	if err != nil {
		panic(err) // the checks above are Decode's
	}
	return "", id
}

// FuzzQUIC sends random UDP payloads to a QUIC-LB service of three
// configurations (plaintext, single pass, four passes) and checks the
// program against refQUIC and quiclb's Decoder: a payload whose connection
// ID decodes to a backend's server ID goes to that backend, every other
// to the table's, counted by the reason refQUIC gives.
func FuzzQUIC(f *testing.F) {
	lb := newLB(f, Options{M: 251})
	svc := Service{VIP: vip(false, 443), Proto: UDP}
	bs := testBackends(1, 4, false)
	cfgs := []quiclb.Config{{ID: 0, ServerIDLen: 2, NonceLen: 6}, {ID: 2, ServerIDLen: 4, NonceLen: 12, Key: quicKey},
		{ID: 3, ServerIDLen: 3, NonceLen: 6, Key: quicKey, EncodeLength: true}}
	cs := quicService(f, lb, svc, bs, ServiceOptions{}, cfgs...)
	d, err := quiclb.NewDecoder(cfgs...)
	if err != nil {
		f.Fatal(err)
	}
	byID := map[uint8]quiclb.Config{}
	owner := map[uint8]map[quiclb.ServerID]netip.Addr{}
	for _, c := range cs {
		byID[c.ID] = c.Config
		owner[c.ID] = map[quiclb.ServerID]netip.Addr{}
		for a, id := range c.ServerIDs {
			owner[c.ID][id] = a
		}
	}
	// Seeds: each backend's IDs in short and Handshake headers, an
	// Initial, and the cases of TestQUICTableRoutes.
	for _, c := range cs {
		for _, b := range bs {
			cid := newCID(f, c, b.Addr)
			f.Add(shortHeader(cid))
			f.Add(longHeader(quicV2, 3, cid))
			f.Add(longHeader(quicV1, 0, cid))
			f.Add(longHeader(quicV1, 2, cid[:len(cid)-1]))
			f.Add(append([]byte{0x40}, cid...))
		}
	}
	f.Add([]byte{})
	f.Add(shortHeader(bytes.Repeat([]byte{0xe0}, 20)))
	from := client(false, 4433)
	table := tableTo(lb, svc, from)
	f.Fuzz(func(t *testing.T, p []byte) {
		if len(p) > 1400 {
			p = p[:1400]
		}
		reason, id := refQUIC(p, d, byID)
		want := table
		if reason == "" {
			a, ok := owner[p[cidAt(p)]>>5][id]
			if ok {
				want = a
			} else {
				reason = "unknown_server"
			}
		}
		before := quicCounters(t, lb)
		if got := sendTo(t, lb, bs, from, svc, p); got != want {
			t.Fatalf("%x: to %v, want %v (%q)", p, got, want, reason)
		}
		dl := delta(before, quicCounters(t, lb))
		counted := "cid"
		if reason != "" {
			counted = "table_" + reason
		}
		if dl[counted] != 1 {
			t.Fatalf("%x: counters moved %v, want %s", p, dl, counted)
		}
	})
}

// cidAt returns where a QUIC payload's destination connection ID starts.
func cidAt(p []byte) int {
	if p[0]&0x80 != 0 {
		return 6
	}
	return 1
}

// TestQUICAdopt: a QUIC-LB service's packets go by their connection IDs
// across a restart with pinned maps: before the new LB sets the service
// (the keys' AES contexts, the server IDs and the configurations are in
// the maps), and after, when it makes the contexts anew (it cannot read
// a key back) and removes a configuration.
func TestQUICAdopt(t *testing.T) {
	needBPF(t)
	opts := pinOpts(bpffs(t))
	lb := load(t, "", opts)
	svc := Service{VIP: vip(false, 443), Proto: UDP}
	bs := testBackends(1, 3, false)
	cs := quicService(t, lb, svc, bs, ServiceOptions{}, quicModes[1].c, quiclb.Config{ID: 5, ServerIDLen: 2, NonceLen: 8})
	ids := map[netip.Addr][2][]byte{}
	for _, b := range bs {
		ids[b.Addr] = [2][]byte{newCID(t, cs[0], b.Addr), newCID(t, cs[1], b.Addr)}
	}
	check := func(what string, configs int) {
		t.Helper()
		for a, cid := range ids {
			for i := range configs {
				if got := sendTo(t, lb, bs, client(false, 999), svc, shortHeader(cid[i])); got != a {
					t.Fatalf("%s: configuration %d: %v's ID to %v", what, i, a, got)
				}
			}
		}
	}
	check("before the restart", 2)
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}
	lb = load(t, "", opts)
	if !lb.Adopted() {
		t.Fatal("not adopted")
	}
	check("adopted", 2)
	before := quicCounters(t, lb)
	quicService(t, lb, svc, bs, ServiceOptions{}, quicModes[1].c) // the plaintext configuration gone
	check("set again", 1)
	if d := delta(before, quicCounters(t, lb)); d["decrypted"] != 3 {
		t.Fatalf("counters moved %v: want 3 decrypted, the cache's entries of the context made before the restart left behind", d)
	}
	if got := sendTo(t, lb, bs, client(false, 999), svc, shortHeader(ids[bs[0].Addr][1])); got != tableTo(lb, svc, client(false, 999)) {
		t.Fatalf("a removed configuration's ID went to %v", got)
	}
}

// lookupTable is quic_server's lookup (bpf/quic.h) in Go, on a table of
// sidTable's: the backend of server ID k, or false.
func lookupTable(t []maglevQuicEntry, k sidKey) (maglevSlot, bool) {
	mask := t[0].Cp
	i := quicHash(t[0].Sid[0], k.cp, k.sid)
	for p := range uint32(quicProbes) {
		e := t[1+(i+p)&mask]
		if e.Cp == 0 {
			return maglevSlot{}, false
		}
		if e.Cp == 1+uint32(k.cp) && e.Sid == k.sid {
			return e.Be, true
		}
	}
	return maglevSlot{}, false
}

// TestSIDTable: a table of server IDs of 0 to 3,000 entries (seven
// codepoints of up to 429 backends, random IDs of 1 to 15 octets) places
// every ID within its probes, a quarter full at most, deterministically,
// and finds no other ID.
func TestSIDTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 7, 100, 1000, 3000} {
		sids := map[sidKey]maglevSlot{}
		for len(sids) < n {
			b := make([]byte, 1+rng.IntN(quiclb.MaxServerIDLen))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			id, _ := quiclb.MakeServerID(b)
			sids[keyOf(uint8(rng.IntN(quicConfigs)), id)] = maglevSlot{Id: uint32(len(sids)), Cookie: rng.Uint32() | 1}
		}
		tab := sidTable(sids)
		size := len(tab) - 1
		if size&(size-1) != 0 || size < 8 || size < 4*n || int(tab[0].Cp) != size-1 {
			t.Fatalf("%d IDs: a table of %d entries, mask %#x", n, size, tab[0].Cp)
		}
		for k, v := range sids {
			if got, ok := lookupTable(tab, k); !ok || got != v {
				t.Fatalf("%d IDs: %+v found %v, %v; want %v", n, k, got, ok, v)
			}
		}
		for range 1000 {
			k := sidKey{cp: uint8(rng.IntN(quicConfigs)), sid: [2]uint64{rng.Uint64(), rng.Uint64() >> 8}}
			if _, ok := sids[k]; ok {
				continue
			}
			if got, ok := lookupTable(tab, k); ok {
				t.Fatalf("%d IDs: %+v, no ID of the table, found %v", n, k, got)
			}
		}
		if again := sidTable(sids); !slices.Equal(again, tab) {
			t.Fatalf("%d IDs: two tables of the same IDs differ", n)
		}
	}
}
