//go:build linux

package xdptest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Need skips tb unless it runs as root with ip, and each of tools, on the
// PATH; under CI=true it fails tb instead (see Skip).
func Need(tb testing.TB, tools ...string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Skip(tb, "not root: network namespaces and XDP programs need CAP_SYS_ADMIN, CAP_BPF and CAP_NET_ADMIN (run the tests as root)")
		return
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			Skip(tb, tool+" is missing: install it (ip is Debian's iproute2)")
			return
		}
	}
}

// Skip skips tb, saying why; under CI=true, where everything a test needs
// is installed, it fails tb instead, so that a test does not pass there
// by not running.
func Skip(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatal(why)
	}
	tb.Skip(why)
}

// IP runs ip with args and returns its output; an error fails tb, with
// the output.
func IP(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// NewNS creates the network namespace name-PID, PID the test process's
// id, with lo up, and returns its name; it is removed at the end of tb,
// on failure too. First it deletes the namespaces name-P that test
// processes P no longer running left behind (a test binary killed at its
// timeout runs no cleanups).
func NewNS(tb testing.TB, name string) string {
	tb.Helper()
	sweep(name)
	ns := fmt.Sprintf("%s-%d", name, os.Getpid())
	IP(tb, "netns", "add", ns)
	tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() }) // best effort
	IP(tb, "-n", ns, "link", "set", "lo", "up")
	return ns
}

// sweep deletes the namespaces name-PID whose process PID has ended.
func sweep(name string) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return // NewNS's ip netns add says what is wrong
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		rest, ok := strings.CutPrefix(f[0], name+"-")
		pid, err := strconv.Atoi(rest)
		if !ok || err != nil || pid <= 0 || strconv.Itoa(pid) != rest || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // its test is running
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run() // best effort
	}
}

// Veth creates a veth pair, dev in namespace ns and peer in namespace
// peerNS (ns again for both ends in one), both up. The pair goes with
// its namespaces.
func Veth(tb testing.TB, ns, dev, peerNS, peer string) {
	tb.Helper()
	IP(tb, "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", peer, "netns", peerNS)
	IP(tb, "-n", ns, "link", "set", dev, "up")
	IP(tb, "-n", peerNS, "link", "set", peer, "up")
}

// VethNS creates the namespace name-PID (NewNS) with a veth pair inside,
// v0, 198.18.0.3/24, and v1, both up, and returns its name. A frame
// Send writes out of v1 arrives at v0, and at the program attached
// there, as from a neighbour.
func VethNS(tb testing.TB, name string) string {
	tb.Helper()
	ns := NewNS(tb, name)
	Veth(tb, ns, "v0", ns, "v1")
	IP(tb, "-n", ns, "addr", "add", "198.18.0.3/24", "dev", "v0")
	return ns
}

// Sysctl sets the sysctl key (net.ipv4.ip_forward) to value in namespace
// ns; an error fails tb.
func Sysctl(tb testing.TB, ns, key, value string) {
	tb.Helper()
	_, err := In(ns, func() (struct{}, error) {
		// /proc/sys/net is the namespace of the thread that opens it.
		return struct{}{}, os.WriteFile("/proc/sys/"+strings.ReplaceAll(key, ".", "/"), []byte(value), 0)
	})
	if err != nil {
		tb.Fatalf("sysctl %s=%s in %s: %v", key, value, ns, err)
	}
}

// In runs fn in network namespace ns and returns what it returns. fn
// runs on a goroutine locked to its thread: the thread enters ns, runs
// fn, goes back to its namespace and is unlocked, for other goroutines
// to use. If it cannot go back, In reports that too, and the thread ends
// with the goroutine: no thread of the process is left in ns, where a
// goroutine would run unawares (were it the process's main thread, the
// process would show in ip netns pids ns). Sockets, links and programs
// fn creates stay in ns. A fn that changes its thread for good (its CPU
// affinity, say) calls runtime.LockOSThread, and the thread ends with
// the goroutine.
//
// Errors are prefixed with "xdptest: " and wrap the cause (errors.Is);
// fn's error is returned as it is.
func In[T any](ns string, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() {
		var r result
		defer func() { c <- r }() // last, after the handles' Close
		runtime.LockOSThread()
		home, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread() // the thread has not moved
			r.err = fmt.Errorf("xdptest: the thread's namespace: %w", err)
			return
		}
		defer func() { _ = home.Close() }()
		h, err := netns.GetFromName(ns)
		if err != nil {
			runtime.UnlockOSThread()
			r.err = fmt.Errorf("xdptest: namespace %s: %w", ns, err)
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			runtime.UnlockOSThread() // setns failed: the thread has not moved
			r.err = fmt.Errorf("xdptest: entering namespace %s: %w", ns, err)
			return
		}
		r.v, r.err = fn()
		if err := netns.Set(home); err != nil {
			r.err = errors.Join(r.err, fmt.Errorf("xdptest: back from namespace %s: %w", ns, err))
			return // locked: the thread ends with the goroutine
		}
		runtime.UnlockOSThread()
	}()
	r := <-c
	return r.v, r.err
}

// Interface returns the interface dev of namespace ns: its index and
// hardware address, say. An error fails tb.
func Interface(tb testing.TB, ns, dev string) *net.Interface {
	tb.Helper()
	ifc, err := In(ns, func() (*net.Interface, error) { return net.InterfaceByName(dev) })
	if err != nil {
		tb.Fatalf("interface %s of %s: %v", dev, ns, err)
	}
	return ifc
}

// Send writes each of frames, whole Ethernet frames as Ethernet,
// Packet, TCP and UDP make them, out of interface dev of namespace
// ns through a packet socket: they arrive at dev's peer, and at the XDP
// program attached there. An error fails tb.
func Send(tb testing.TB, ns, dev string, frames ...[]byte) {
	tb.Helper()
	_, err := In(ns, func() (struct{}, error) {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return struct{}{}, err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return struct{}{}, err
		}
		defer func() { _ = unix.Close(fd) }()
		to := &unix.SockaddrLinklayer{Ifindex: ifc.Index}
		for _, f := range frames {
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	if err != nil {
		tb.Fatalf("sending %d frames out of %s in %s: %v", len(frames), dev, ns, err)
	}
}
