// Package nstest is what l4lb's tests that need network namespaces share:
// the check that they may run (root, ip), a namespace with a veth pair,
// running a func in a namespace, frames sent into it, a BPF filesystem
// for pins, a log buffer to wait on, and a lock across test processes
// that keeps a test that loads the CPUs apart from those that time the
// built l4lb. It is for tests only.
package nstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netns"
)

// Need skips the test (fails it under CI=true) without root or ip.
func Need(tb testing.TB) {
	tb.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root: attaching an XDP program needs CAP_BPF and CAP_NET_ADMIN"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "ip is missing: install iproute2"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal(why)
	}
	tb.Skip(why)
}

// IP runs ip with args, failing the test on an error, and returns its
// output.
func IP(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// VethNS creates the namespace tag-PID with a veth pair, v0 (198.18.0.3/24)
// and v1, and lo, all up, removed at the end of the test; it returns the
// namespace's name.
func VethNS(tb testing.TB, tag string) string {
	tb.Helper()
	ns := fmt.Sprintf("%s-%d", tag, os.Getpid())
	IP(tb, "netns", "add", ns)
	tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() }) // best effort
	IP(tb, "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	IP(tb, "-n", ns, "addr", "add", "198.18.0.3/24", "dev", "v0")
	for _, dev := range []string{"lo", "v0", "v1"} {
		IP(tb, "-n", ns, "link", "set", dev, "up")
	}
	return ns
}

// InNS runs fn on a thread of its own in namespace ns. The thread goes
// back to its namespace after fn, or, if it cannot, ends with its
// goroutine: no thread of the test stays in ns (were it the process's
// main thread, which never ends, the process would be in ns for ip netns
// pids, and lab.sh down would end it).
func InNS[T any](ns string, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var r result
		defer func() { c <- r }()
		home, err := netns.Get()
		if err != nil {
			r.err = err
			return // locked: the thread ends with the goroutine
		}
		defer func() { _ = home.Close() }()
		h, err := netns.GetFromName(ns)
		if err != nil {
			r.err = err
			return
		}
		defer func() { _ = h.Close() }()
		if r.err = netns.Set(h); r.err != nil {
			return
		}
		r.v, r.err = fn()
		if netns.Set(home) == nil {
			runtime.UnlockOSThread()
		}
	}()
	r := <-c
	return r.v, r.err
}

// lockPath is the lock l4lb's test processes share, one per machine.
var lockPath = filepath.Join(os.TempDir(), "maglev-l4lb-tests.lock")

// Exclusive holds the tests' lock for tb's duration, alone: for a test
// that loads the machine's CPUs (the health checker at scale), so that no
// test that runs the built l4lb and measures its timing (Shared) runs
// meanwhile in another package's test process (go test runs packages in
// parallel).
func Exclusive(tb testing.TB) { lock(tb, syscall.LOCK_EX) }

// Shared holds the tests' lock for tb's duration, with the other Shared
// holders: a test whose timing an Exclusive one would upset.
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
// end of the test, before the directory goes.
func BPFFS(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	MountBPF(tb, dir)
	return dir
}

// MountBPF mounts a BPF filesystem on dir, unmounted at the end of the
// test (after the cleanups registered later, such as stopping the
// processes that use it: cleanups run last first).
func MountBPF(tb testing.TB, dir string) {
	tb.Helper()
	if err := syscall.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		tb.Fatalf("mounting a BPF filesystem: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}
