//go:build linux

package xdpmaglev

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A driver reads the XDP counters the interface's driver keeps (ethtool
// -S), through a socket of the network namespace Load ran in: what the
// program cannot count itself, such as the frames of XDP_TX or
// XDP_REDIRECT the driver failed to send (the program counts them
// forwarded).
type driver struct {
	fd   int
	name string // the interface's
}

func newDriver(name string) (*driver, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xdpmaglev: a socket for the driver's counters: %w", err)
	}
	return &driver{fd: fd, name: name}, nil
}

func (d *driver) close() { _ = unix.Close(d.fd) }

// The ethtool ioctl's commands and string set (linux/ethtool.h).
const (
	ethtoolGSTRINGS  = 0x1b
	ethtoolGSTATS    = 0x1d
	ethtoolGSSETINFO = 0x37
	ethSSStats       = 1
	ethGStringLen    = 32
)

// ifreqData is struct ifreq with ifr_data, for SIOCETHTOOL.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte // the rest of the union
}

func (d *driver) ioctl(data unsafe.Pointer) error {
	var ifr ifreqData
	copy(ifr.name[:], d.name)
	ifr.data = data
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(d.fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return errno
	}
	return nil
}

// queue matches the queue part of a per-queue counter's name
// ("rx_queue_3_xdp_tx_errors"), which stats leaves out to sum the queues.
var queue = regexp.MustCompile(`queue_[0-9]+_`)

// stats returns the driver's counters whose names have "xdp", summed over
// queues by name without the queue ("rx_xdp_tx_errors"). A driver with no
// counters returns none.
func (d *driver) stats() (map[string]uint64, error) {
	info := struct {
		cmd, _ uint32
		mask   uint64
		n      uint32
	}{cmd: ethtoolGSSETINFO, mask: 1 << ethSSStats}
	if err := d.ioctl(unsafe.Pointer(&info)); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, nil
		}
		return nil, fmt.Errorf("xdpmaglev: the driver's counters of %s: %w", d.name, err)
	}
	if info.mask == 0 || info.n == 0 {
		return nil, nil
	}
	n := int(info.n)
	names := make([]byte, 12+n*ethGStringLen) // struct ethtool_gstrings
	*(*[3]uint32)(unsafe.Pointer(&names[0])) = [3]uint32{ethtoolGSTRINGS, ethSSStats, uint32(n)}
	if err := d.ioctl(unsafe.Pointer(&names[0])); err != nil {
		return nil, fmt.Errorf("xdpmaglev: the names of the driver's counters of %s: %w", d.name, err)
	}
	vals := make([]uint64, 1+n) // struct ethtool_stats: cmd and n_stats in the first word
	*(*[2]uint32)(unsafe.Pointer(&vals[0])) = [2]uint32{ethtoolGSTATS, uint32(n)}
	if err := d.ioctl(unsafe.Pointer(&vals[0])); err != nil {
		return nil, fmt.Errorf("xdpmaglev: the driver's counters of %s: %w", d.name, err)
	}
	out := map[string]uint64{}
	for i := range n {
		name, _, _ := strings.Cut(string(names[12+i*ethGStringLen:12+(i+1)*ethGStringLen]), "\x00")
		if !strings.Contains(strings.ToLower(name), "xdp") {
			continue
		}
		out[queue.ReplaceAllString(name, "")] += vals[1+i]
	}
	return out, nil
}
