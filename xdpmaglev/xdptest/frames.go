package xdptest

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// IP protocol numbers, for Packet.
const (
	ProtoIPIP = 4
	ProtoTCP  = 6
	ProtoUDP  = 17
)

// TCP flags, for TCP.
const (
	FlagFIN = 0x01
	FlagSYN = 0x02
	FlagRST = 0x04
	FlagACK = 0x10
)

// Ethernet returns an Ethernet frame to dst from src (6 bytes each)
// carrying the IP packet p, its EtherType IPv4 or IPv6 by p's version
// (p's first four bits).
func Ethernet(dst, src net.HardwareAddr, p []byte) []byte {
	b := make([]byte, 0, 14+len(p))
	b = append(append(b, dst[:6]...), src[:6]...)
	typ := uint16(0x0800)
	if len(p) > 0 && p[0]>>4 == 6 {
		typ = 0x86dd
	}
	b = binary.BigEndian.AppendUint16(b, typ)
	return append(b, p...)
}

// Packet returns an IP packet of protocol proto from src to dst carrying
// payload: IPv4 when src is an IPv4 address (a 20-byte header, no
// options, not to be fragmented nor marked DF, TTL 64, with its
// checksum), IPv6 otherwise (a 40-byte header, hop limit 64, flow label
// 0). src and dst are of one family; Packet panics otherwise, a mistake of
// the test.
func Packet(proto uint8, src, dst netip.Addr, payload []byte) []byte {
	if src.Is4() != dst.Is4() || !src.IsValid() {
		panic(fmt.Sprintf("xdptest: Packet from %v to %v: not one family", src, dst))
	}
	if src.Is4() {
		h := make([]byte, 20, 20+len(payload))
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
		h[8] = 64
		h[9] = proto
		s, d := src.As4(), dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		binary.BigEndian.PutUint16(h[10:], Checksum(h))
		return append(h, payload...)
	}
	h := make([]byte, 40, 40+len(payload))
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6] = proto
	h[7] = 64
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, payload...)
}

// TCP returns a TCP segment from port sport to dport: a 20-byte header
// with flags (FlagSYN, FlagACK, ...), its sequence and acknowledgement
// numbers, window and checksum 0, then payload. A load balancer's
// program does not check the checksum; a host's TCP would drop the
// segment.
func TCP(sport, dport uint16, flags uint8, payload []byte) []byte {
	h := make([]byte, 20, 20+len(payload))
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	h[12] = 5 << 4
	h[13] = flags
	return append(h, payload...)
}

// UDP returns a UDP datagram from port sport to dport: an 8-byte header
// with its length and checksum 0 (none, which IPv4 allows and IPv6 does
// not: a host drops it there), then payload.
func UDP(sport, dport uint16, payload []byte) []byte {
	h := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint16(h[4:], uint16(8+len(payload)))
	return append(h, payload...)
}

// Checksum returns the Internet checksum of b (RFC 1071): the ones'
// complement of the ones'-complement sum of b's 16-bit words, an odd
// last byte padded with a zero. A header whose checksum field holds it
// sums to 0.
func Checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
