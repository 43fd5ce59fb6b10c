package nstest

import (
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
