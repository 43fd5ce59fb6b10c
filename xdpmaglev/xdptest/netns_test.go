//go:build linux

package xdptest_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	"golang.org/x/sys/unix"
)

// thread is what fn saw of its thread in In: its id and its network
// namespace (the link /proc gives, net:[INODE]).
type thread struct {
	tid int
	ns  string
}

func here() (thread, error) {
	ns, err := os.Readlink("/proc/thread-self/ns/net")
	return thread{unix.Gettid(), ns}, err
}

// TestIn: fn runs in the namespace; the thread then goes back to the
// test's namespace and is unlocked, and so lives on for other
// goroutines; a thread fn locks for good ends with fn's goroutine; a
// namespace that does not exist is an error In names.
func TestIn(t *testing.T) {
	xdptest.Need(t)
	ns := xdptest.NewNS(t, "xdptest-in")
	home, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t // ip netns add's bind mount of the namespace
	if err := unix.Stat("/run/netns/"+ns, &st); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)

	th, err := xdptest.In(ns, here)
	if err != nil {
		t.Fatal(err)
	}
	if th.ns != want {
		t.Fatalf("fn ran in %s, want %s's %s (the test's is %s)", th.ns, ns, want, home)
	}
	if got := strings.TrimSpace(xdptest.IP(t, "netns", "identify", strconv.Itoa(os.Getpid()))); got != "" {
		t.Errorf("the process is in namespace %q after In", got)
	}
	// An unlocked thread stays, idle or running goroutines, back home; a
	// locked one would end as its goroutine did, at once.
	for range 20 {
		got, err := os.Readlink("/proc/self/task/" + strconv.Itoa(th.tid) + "/ns/net")
		if err != nil {
			t.Fatalf("the thread that ran fn ended: In left it locked (%v)", err)
		}
		if got != home {
			t.Fatalf("the thread that ran fn is in %s after In, want the test's %s", got, home)
		}
		time.Sleep(10 * time.Millisecond)
	}

	kept, err := xdptest.In(ns, func() (thread, error) {
		runtime.LockOSThread() // for good: the thread ends with the goroutine
		return here()
	})
	if err != nil {
		t.Fatal(err)
	}
	// Go parks the process's main thread rather than end it: it stays,
	// back in the test's namespace, running no goroutine.
	if kept.tid == os.Getpid() {
		if got, err := os.Readlink("/proc/self/task/" + strconv.Itoa(kept.tid) + "/ns/net"); err != nil || got != home {
			t.Errorf("the main thread, locked for good in fn, is in %s (%v) after In, want the test's %s", got, err, home)
		}
	} else if !ended(kept.tid) {
		t.Errorf("the thread fn locked for good still runs 5 s after In")
	}

	_, err = xdptest.In("xdptest-none", here)
	if err == nil || !strings.HasPrefix(err.Error(), "xdptest: ") || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("In of a namespace that does not exist: %v, want an xdptest error wrapping fs.ErrNotExist", err)
	}
}

// TestNewNS: NewNS deletes a namespace of its name that a test process
// no longer running left, and keeps one whose process runs.
func TestNewNS(t *testing.T) {
	xdptest.Need(t)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	stale := "xdptest-sweep-" + strconv.Itoa(cmd.Process.Pid) // it has ended
	live := "xdptest-sweep-1"                                 // init runs
	for _, ns := range []string{stale, live} {
		xdptest.IP(t, "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	ns := xdptest.NewNS(t, "xdptest-sweep")
	if want := "xdptest-sweep-" + strconv.Itoa(os.Getpid()); ns != want {
		t.Errorf("NewNS named %s, want %s", ns, want)
	}
	list := xdptest.IP(t, "netns", "list")
	if strings.Contains(list, stale+" ") || strings.Contains(list, stale+"\n") {
		t.Errorf("the stale namespace %s is still there:\n%s", stale, list)
	}
	if !strings.Contains(list, live) || !strings.Contains(list, ns) {
		t.Errorf("want %s and %s listed:\n%s", live, ns, list)
	}
	if out := xdptest.IP(t, "-n", ns, "link", "show", "lo"); !strings.Contains(out, "UP") {
		t.Errorf("lo of %s is not up: %s", ns, out)
	}
}

// TestSend: a frame Send writes out of v1 of VethNS's namespace arrives
// at v0 as it was built.
func TestSend(t *testing.T) {
	xdptest.Need(t)
	ns := xdptest.VethNS(t, "xdptest-send")
	v0 := xdptest.Interface(t, ns, "v0")
	fd, err := xdptest.In(ns, func() (int, error) {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return -1, err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: v0.Index}); err != nil {
			_ = unix.Close(fd)
			return -1, err
		}
		return fd, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}); err != nil {
		t.Fatal(err)
	}
	frame := xdptest.Ethernet(v0.HardwareAddr, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02},
		xdptest.Packet(xdptest.ProtoUDP, netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3"), xdptest.UDP(40000, 9, []byte("xdptest"))))
	xdptest.Send(t, ns, "v1", frame)
	buf := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			t.Fatalf("no frame at v0 in 5 s: %v", err)
		}
		if bytes.Equal(buf[:n], frame) {
			return
		}
		// the kernel's own (IPv6 neighbour discovery): read on
	}
}

// ended waits up to 5 s for the thread tid of the process to end, and
// says whether it did.
func ended(tid int) bool {
	for range 500 {
		if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); errors.Is(err, fs.ErrNotExist) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestBPFFS: BPFFS mounts a BPF filesystem.
func TestBPFFS(t *testing.T) {
	xdptest.Need(t)
	dir := xdptest.BPFFS(t)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	const bpfMagic = uint32(unix.BPF_FS_MAGIC)
	if got := uint32(st.Type); got != bpfMagic { // st.Type: int32 on 386, int64 on amd64
		t.Errorf("%s: file system type %#x, want BPF's %#x", dir, got, bpfMagic)
	}
}
