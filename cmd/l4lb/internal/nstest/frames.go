package nstest

import (
	"encoding/binary"
	"net"

	"golang.org/x/sys/unix"
)

// MAC returns the hardware address of the interface dev of namespace ns.
func MAC(ns, dev string) (net.HardwareAddr, error) {
	return InNS(ns, func() (net.HardwareAddr, error) {
		i, err := net.InterfaceByName(dev)
		if err != nil {
			return nil, err
		}
		return i.HardwareAddr, nil
	})
}

// Send writes each of frames, whole Ethernet frames, into v1 of
// namespace ns (VethNS's pair) by a packet socket, so that each arrives
// at v0, and the program attached there, as from v0's peer.
func Send(ns string, frames ...[]byte) error {
	_, err := InNS(ns, func() (struct{}, error) {
		v0, err := net.InterfaceByName("v0")
		if err != nil {
			return struct{}{}, err
		}
		v1, err := net.InterfaceByName("v1")
		if err != nil {
			return struct{}{}, err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return struct{}{}, err
		}
		defer func() { _ = unix.Close(fd) }()
		to := &unix.SockaddrLinklayer{Ifindex: v1.Index, Halen: 6}
		copy(to.Addr[:], v0.HardwareAddr)
		for _, f := range frames {
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

// IPv4 is an IPv4 header from src to dst with its checksum, then payload.
func IPv4(proto byte, src, dst [4]byte, payload []byte) []byte {
	h := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0}
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	h = append(append(h, src[:]...), dst[:]...)
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
	return append(h, payload...)
}

// EthIPv4 is an Ethernet frame to dst from 02:00:00:00:00:02 carrying p.
func EthIPv4(dst net.HardwareAddr, p []byte) []byte {
	b := append([]byte{}, dst...)
	b = append(b, 0x02, 0, 0, 0, 0, 0x02, 0x08, 0x00)
	return append(b, p...)
}
