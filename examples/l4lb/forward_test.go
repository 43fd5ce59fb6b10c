package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestForwardCommand builds l4lb and runs it with -forward gue on a veth
// in a namespace of its own whose forwarding is off: it says so at start
// and in its first line, a SYN to the VIP is dropped as forwarding_off
// (so the service is set with the GUE options: -forward l2 would send it);
// with forwarding on and the backend's neighbour entry, the next SYN is
// encapsulated and sent. SIGTERM detaches it.
func TestForwardCommand(t *testing.T) {
	need(t)
	bin := filepath.Join(t.TempDir(), "l4lb")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	ns := fmt.Sprintf("l4lbf-%d", os.Getpid())
	ip(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() }) // best effort
	ip(t, "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	ip(t, "-n", ns, "addr", "add", "198.18.0.3/24", "dev", "v0")
	for _, dev := range []string{"lo", "v0", "v1"} {
		ip(t, "-n", ns, "link", "set", dev, "up")
	}
	sysctl := func(key, v string) {
		t.Helper()
		if _, err := inNS(ns, func() (struct{}, error) {
			return struct{}{}, os.WriteFile("/proc/sys/"+strings.ReplaceAll(key, ".", "/"), []byte(v), 0)
		}); err != nil {
			t.Fatal(err)
		}
	}
	sysctl("net.ipv4.conf.all.forwarding", "0") // a new namespace's default; set, so that the test does not depend on it

	cmd := exec.Command("ip", "netns", "exec", ns, bin, "-iface", "v0", "-vip", "198.19.0.1:80", "-forward", "gue",
		"-backend", "198.18.0.11", "-m", "251", "-flood-rate", "-1", "-admin", "127.0.0.1:9183")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer // read after Wait
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // already gone, normally
	lines := make(chan string, 16)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("l4lb exited: %v\n%s", <-done, stderr.String())
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatal("l4lb printed nothing for 20 s")
		}
		return ""
	}
	if l, want := next(), "l4lb: tcp/198.19.0.1:80 attached to v0 (native) by gue, 1 backends"; l != want {
		t.Fatalf("first line %q, want %q", l, want)
	}
	if l := next(); !strings.HasPrefix(l, "l4lb: 1 backends live, 0 draining, table digest ") {
		t.Fatalf("second line %q", l)
	}
	if l := next(); !strings.Contains(l, "/debug/maglev") {
		t.Fatalf("third line %q", l)
	}

	v0, err := inNS(ns, func() (*net.Interface, error) { return net.InterfaceByName("v0") })
	if err != nil {
		t.Fatal(err)
	}
	syn := func(sport uint16) {
		t.Helper()
		if _, err := inNS(ns, func() (struct{}, error) {
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
			return struct{}{}, unix.Sendto(fd, synFrame(v0.HardwareAddr, sport, 80), 0, to)
		}); err != nil {
			t.Fatal(err)
		}
	}
	// stats polls /debug/maglev until ok, for at most 5 s.
	stats := func(ok func(status) bool) (status, []byte) {
		t.Helper()
		var st status
		var body []byte
		for range 50 {
			var err error
			if body, err = requestAt(ns, "127.0.0.1:9183", "GET", "/debug/maglev"); err != nil {
				t.Fatal(err)
			}
			st = status{}
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			if ok(st) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return st, body
	}

	syn(40000)
	st, body := stats(func(st status) bool { return st.Stats.Dropped["forwarding_off"] >= 1 })
	if st.Forward != "gue" || st.Stats.Dropped["forwarding_off"] != 1 || st.Stats.Forwarded != 0 {
		t.Errorf("forwarding off: /debug/maglev: %s", body)
	}

	sysctl("net.ipv4.conf.all.forwarding", "1")
	ip(t, "-n", ns, "neigh", "replace", "198.18.0.11", "lladdr", "02:00:00:00:00:11", "dev", "v0", "nud", "permanent")
	syn(40001)
	st, body = stats(func(st status) bool { return st.Stats.Forwarded >= 1 })
	// (The service's and backend's packet counts are not checked: they
	// count the dropped SYN too.)
	if st.Stats.Forwarded != 1 || st.Stats.Dropped["forwarding_off"] != 1 || st.Stats.Dropped["no_neighbor"] != 0 || len(st.Stats.Services) != 1 {
		t.Errorf("forwarding on: /debug/maglev: %s", body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var last string
	for l := range lines {
		last = l
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("l4lb exited: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("l4lb still running 20 s after SIGTERM")
	}
	if last != "l4lb: detached from v0" {
		t.Errorf("last line %q", last)
	}
	if want := "l4lb: -forward gue: net.ipv4.conf.v0.forwarding is 0: the kernel's route lookup refuses, and tcp/198.19.0.1:80's packets are dropped (forwarding_off); sysctl -w net.ipv4.conf.all.forwarding=1\n"; stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
}
