//go:build linux

package xdptest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// lockPath is the lock that the test processes of a machine share.
var lockPath = filepath.Join(os.TempDir(), "maglev-xdptest.lock")

// Exclusive holds the test processes' lock for tb's duration, alone: for
// a test that loads the machine's CPUs (the health checker at scale), so
// that no test that measures time (Shared) runs meanwhile in another
// package's test process (go test runs packages in parallel). It waits
// for the holders to let go.
func Exclusive(tb testing.TB) { lock(tb, syscall.LOCK_EX) }

// Shared holds the test processes' lock for tb's duration, with the
// other Shared holders: for a test whose timing an Exclusive one would
// upset. It waits while an Exclusive holder has it.
func Shared(tb testing.TB) { lock(tb, syscall.LOCK_SH) }

func lock(tb testing.TB, how int) {
	tb.Helper()
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		tb.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		_ = f.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() }) // the lock goes with the file
}

// BPFFS mounts a BPF filesystem of the test's own on a new temporary
// directory, for pins, and returns the directory; it is unmounted at the
// end of tb, before the directory goes.
func BPFFS(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	MountBPF(tb, dir)
	return dir
}

// MountBPF mounts a BPF filesystem on dir, unmounted at the end of tb
// (after the cleanups registered later, such as stopping the processes
// that use it: cleanups run last first).
func MountBPF(tb testing.TB, dir string) {
	tb.Helper()
	if err := syscall.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		tb.Fatalf("mounting a BPF filesystem on %s: %v", dir, err)
	}
	tb.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}
