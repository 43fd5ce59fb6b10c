//go:build linux

package xdpmaglev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// onBPFFS returns nil if dir, or the nearest of its parents that exists,
// is in a BPF filesystem: the only kind that holds pins.
func onBPFFS(dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if errors.Is(err, unix.ENOENT) && p != filepath.Dir(p) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: PinPath %s: %v", ErrOptions, dir, err)
		}
		if st.Type != unix.BPF_FS_MAGIC {
			return fmt.Errorf("%w: PinPath %s is not in a BPF filesystem (%s is not one: mount -t bpf bpf /sys/fs/bpf)", ErrOptions, dir, p)
		}
		return nil
	}
}

// lockDir opens dir and takes an exclusive lock on it (flock), which the
// kernel releases when the file is closed, or the process ends however it
// ends.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("xdpmaglev: PinPath %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by another LB (a running process, or one not yet ended)", ErrInUse, dir)
		}
		return nil, fmt.Errorf("xdpmaglev: locking %s: %w", dir, err)
	}
	return f, nil
}

// netnsID returns the inode of the calling thread's network namespace.
func netnsID() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("xdpmaglev: the network namespace: %w", err)
	}
	return st.Ino, nil
}

// xdpMode returns the mode of the XDP program attached to interface
// ifindex, as the kernel reports it.
func xdpMode(ifindex int) (AttachMode, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return AttachNone, fmt.Errorf("xdpmaglev: interface %d: %w", ifindex, err)
	}
	x := l.Attrs().Xdp
	switch {
	case x == nil || !x.Attached:
		return AttachNone, nil
	case x.AttachMode == nl.XDP_ATTACHED_SKB:
		return AttachGeneric, nil
	}
	return AttachNative, nil
}
