package config

import (
	"errors"
	"log/slog"
	"path/filepath"
	"syscall"
)

// bpfFSMagic is a BPF filesystem's type in statfs(2).
const bpfFSMagic = 0xcafe4a11

// Path returns the pin directory of iface, or "" for none: pin-dir "", or
// the default pin-dir where no BPF filesystem is mounted, which is logged
// as a warning (l4lb then runs as it did before pinning). A pin-dir given
// outside a BPF filesystem is left to xdpmaglev.Load, which refuses it.
func (p Pin) Path(iface string, log *slog.Logger) string {
	if p.Dir == "" {
		return ""
	}
	if !p.Explicit && !inBPFFS(p.Dir) {
		log.Warn("pin-dir is not in a BPF filesystem (mount -t bpf bpf /sys/fs/bpf): nothing pinned, so a restart detaches the program and forgets connection tracking", "path", p.Dir)
		return ""
	}
	return filepath.Join(p.Dir, iface)
}

// inBPFFS reports whether dir, or the nearest of its parents that
// exists, is in a BPF filesystem.
func inBPFFS(dir string) bool {
	for p := dir; ; p = filepath.Dir(p) {
		var st syscall.Statfs_t
		err := syscall.Statfs(p, &st)
		if err == nil {
			return uint32(st.Type) == bpfFSMagic
		}
		if !errors.Is(err, syscall.ENOENT) || p == filepath.Dir(p) {
			return false
		}
	}
}
