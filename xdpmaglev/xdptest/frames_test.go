package xdptest_test

import (
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestChecksum checks Checksum against RFC 1071's example and the IPv4
// header of Wikipedia's "Internet checksum" article, both worked by hand
// there, and that a header holding its checksum sums to 0.
func TestChecksum(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     uint16
	}{
		// RFC 1071, section 3: the sum of 0001 f203 f4f5 f6f7 is ddf2, its
		// complement 220d.
		{"RFC 1071", "0001f203f4f5f6f7", 0x220d},
		// Wikipedia: 4500 0073 0000 4000 4011 [0000] c0a8 0001 c0a8 00c7.
		{"IPv4 header", "450000730000400040110000c0a80001c0a800c7", 0xb861},
		{"IPv4 header with it", "45000073000040004011b861c0a80001c0a800c7", 0},
		// An odd byte is padded: 0001 f200 → f201 → 0dfe.
		{"odd length", "0001f2", 0x0dfe},
		{"empty", "", 0xffff},
	} {
		b, err := hex.DecodeString(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := xdptest.Checksum(b); got != c.want {
			t.Errorf("%s: Checksum(%s) = %#04x, want %#04x", c.name, c.in, got, c.want)
		}
	}
}

// TestFrames pins the builders' bytes, written out field by field (the
// IPv4 checksums computed by hand: 4500+0028+0000+0000+4006+c612+0002+
// c613+0001 = 2 1156, folded 1158, complemented eea7; the UDP one has
// 001e and 11, one more, so eea6).
func TestFrames(t *testing.T) {
	dst := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	src := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	c4, v4 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.19.0.1")
	c6, v6 := netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("2001:db8:ffff::1")
	for _, c := range []struct {
		name string
		got  []byte
		want string // hex; spaces and dots between fields are ignored
	}{
		{"IPv4 TCP SYN", xdptest.Ethernet(dst, src, xdptest.Packet(xdptest.ProtoTCP, c4, v4, xdptest.TCP(40000, 80, xdptest.FlagSYN, nil))),
			"020000000001 020000000002 0800 " +
				"45.00.0028.0000.0000.40.06.eea7.c6120002.c6130001 " +
				"9c40.0050.00000000.00000000.50.02.0000.0000.0000"},
		{"IPv4 UDP", xdptest.Packet(xdptest.ProtoUDP, c4, v4, xdptest.UDP(53, 6080, []byte("hi"))),
			"45.00.001e.0000.0000.40.11.eea6.c6120002.c6130001 " +
				"0035.17c0.000a.0000.6869"},
		{"IPv6 UDP", xdptest.Ethernet(dst, src, xdptest.Packet(xdptest.ProtoUDP, c6, v6, xdptest.UDP(1234, 443, []byte{0xff}))),
			"020000000001 020000000002 86dd " +
				"60000000.0009.11.40.20010db8000000000000000000000002.20010db8ffff00000000000000000001 " +
				"04d2.01bb.0009.0000.ff"},
		{"TCP ACK", xdptest.TCP(1, 2, xdptest.FlagACK, []byte("x")),
			"0001.0002.00000000.00000000.50.10.0000.0000.0000.78"},
	} {
		want, err := hex.DecodeString(strings.NewReplacer(" ", "", ".", "").Replace(c.want))
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(c.got) != hex.EncodeToString(want) {
			t.Errorf("%s:\n got % x\nwant % x", c.name, c.got, want)
		}
	}
}

// TestPacketFamilies: Packet of two families is a mistake of the test, which Packet
// names.
func TestPacketFamilies(t *testing.T) {
	defer func() {
		if r, _ := recover().(string); !strings.HasPrefix(r, "xdptest: ") {
			t.Errorf("Packet from IPv4 to IPv6 recovered %q, want a panic prefixed xdptest", r)
		}
	}()
	xdptest.Packet(xdptest.ProtoTCP, netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:db8::1"), nil)
}
