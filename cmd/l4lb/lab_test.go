package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// lab is the quick start's lab (lab.sh), built for a test under a name of
// its own and removed at its end, on failure too.
type lab struct {
	name string // L4LAB: its namespaces are NAME-client, NAME-lb, ...
}

// labUp runs lab.sh up, and lab.sh down at the end of the test.
func labUp(t *testing.T) *lab {
	t.Helper()
	l := &lab{name: fmt.Sprintf("l4lab%d", os.Getpid())}
	script := func(arg string) ([]byte, error) {
		cmd := exec.Command("bash", "lab.sh", arg)
		cmd.Env = append(os.Environ(), "L4LAB="+l.name)
		return cmd.CombinedOutput()
	}
	_, _ = script("down") // what a killed run left
	out, err := script("up")
	t.Cleanup(func() {
		if out, err := script("down"); err != nil {
			t.Errorf("lab.sh down: %v: %s", err, out)
		}
	})
	if err != nil {
		t.Fatalf("lab.sh up: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "ip netns exec "+l.name+"-lb go run ./cmd/l4lb run -iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11 -backend 198.18.0.12") {
		t.Errorf("lab.sh up does not say how to run l4lb in it:\n%s", out)
	}
	return l
}

func (l *lab) ns(host string) string { return l.name + "-" + host }

// get makes n HTTP requests to the VIP from the client, each on a
// connection of its own, and returns the backends' answers counted.
func (l *lab) get(t *testing.T, n int) map[string]int {
	t.Helper()
	got, err := xdptest.In(l.ns("client"), func() (map[string]int, error) {
		out := map[string]int{}
		for range n {
			c, err := net.DialTimeout("tcp", "198.19.0.1:80", 2*time.Second)
			if err != nil {
				return out, err
			}
			_ = c.SetDeadline(time.Now().Add(2 * time.Second)) // a bound, not a check
			if _, err := fmt.Fprint(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
				_ = c.Close()
				return out, err
			}
			r := bufio.NewReader(c)
			var last string
			for {
				line, err := r.ReadString('\n')
				if line != "" {
					last = strings.TrimSpace(line)
				}
				if err != nil {
					break
				}
			}
			_ = c.Close()
			out[last]++
		}
		return out, nil
	})
	if err != nil {
		t.Fatalf("GET http://198.19.0.1/ from the lab's client: %v (answers so far %v)", err, got)
	}
	return got
}

// TestLab runs the quick start of docs/l4lb-quickstart.md: lab.sh up builds the lab,
// l4lb runs in it with the command lab.sh prints, 40 requests to the VIP
// reach both backends, and lab.sh down removes every namespace it made.
func TestLab(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	l := labUp(t)
	p := start(t, l.ns("lb"), bin, "run", "-iface", "eth0", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11", "-backend", "198.18.0.12")
	p.await("backends applied", "live", "2", "draining", "0")
	p.await("admin listening")
	if got := l.get(t, 40); got["be1"]+got["be2"] != 40 || got["be1"] == 0 || got["be2"] == 0 {
		t.Errorf("40 requests: %v, want both backends", got)
	}
	p.stop()

	cmd := exec.Command("bash", "lab.sh", "down")
	cmd.Env = append(os.Environ(), "L4LAB="+l.name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lab.sh down: %v: %s", err, out)
	}
	list, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(list), l.name+"-") {
		t.Errorf("lab.sh down left namespaces:\n%s", list)
	}
}

// unitCaps returns the capabilities l4lb.service gives l4lb
// (AmbientCapabilities=), as setpriv takes them: "+bpf,+net_admin,...".
func unitCaps(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("l4lb.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "AmbientCapabilities="); ok {
			var caps []string
			for _, c := range strings.Fields(v) {
				caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
			return strings.Join(caps, ",")
		}
	}
	t.Fatal("l4lb.service has no AmbientCapabilities=")
	return ""
}

// TestLabUnprivileged runs l4lb in the lab as the user nobody with only
// the capabilities l4lb.service gives it (CAP_BPF, CAP_NET_ADMIN,
// CAP_PERFMON): it attaches, pins its data plane in a BPF filesystem that
// user owns (as the unit's is), forwards, and a restart as the same user
// adopts the pins and forwards on.
func TestLabUnprivileged(t *testing.T) {
	xdptest.Need(t, "setpriv") // util-linux's
	bin := build(t)            // in a directory every user can read
	// A BPF filesystem that nobody owns, where it can reach it.
	dir, err := os.MkdirTemp("", "l4lab")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "bpf")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	xdptest.MountBPF(t, mnt) // unmounted after the processes: cleanups run last first
	if err := os.Chown(mnt, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	l := labUp(t)
	caps := unitCaps(t)
	args := []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=" + caps, "--ambient-caps=" + caps, "--",
		bin, "run", "-iface", "eth0", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11", "-backend", "198.18.0.12", "-pin-dir", mnt}
	p := start(t, l.ns("lb"), "setpriv", args...)
	p.await("data plane pinned", "path", filepath.Join(mnt, "eth0"))
	p.await("admin listening")
	if got := l.get(t, 20); got["be1"]+got["be2"] != 20 {
		t.Errorf("20 requests: %v", got)
	}
	rest := p.stop()
	if len(rest) == 0 || !rest[len(rest)-1].Is("left attached and pinned for the next l4lb (l4lb detach removes it)", "iface", "eth0", "path", filepath.Join(mnt, "eth0")) {
		t.Errorf("last records %+v", rest)
	}
	p = start(t, l.ns("lb"), "setpriv", args...)
	p.await("adopted the pinned data plane: its connection tracking, tables and counters go on", "path", filepath.Join(mnt, "eth0"))
	p.await("admin listening")
	if got := l.get(t, 20); got["be1"]+got["be2"] != 20 {
		t.Errorf("20 requests after the restart: %v", got)
	}
	p.stop()
	if out, err := exec.Command("ip", "netns", "exec", l.ns("lb"), "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps="+caps, "--ambient-caps="+caps, "--",
		bin, "detach", "-iface", "eth0", "-pin-dir", mnt).CombinedOutput(); err != nil {
		t.Errorf("l4lb detach as nobody: %v: %s", err, out)
	}
}

// TestSystemdUnit checks l4lb.service with systemd-analyze verify, the
// binary it names being the one built here: no error and no warning.
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		xdptest.Skip(t, "systemd-analyze is missing: install systemd")
	}
	bin := build(t)
	b, err := os.ReadFile("l4lb.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(b), "/usr/local/bin/l4lb", bin)
	if unit == string(b) {
		t.Fatal("l4lb.service does not run /usr/local/bin/l4lb")
	}
	path := filepath.Join(t.TempDir(), "l4lb.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify l4lb.service: %v\n%s", err, out)
	}
}
