package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

func TestLoadError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{xdpmaglev.ErrLayout, "l4lb run -rebuild replaces them"},
		{xdpmaglev.ErrPinned, "l4lb run -rebuild replaces them"},
		{xdpmaglev.ErrInUse, "is another l4lb running on eth0?"},
	} {
		err := LoadError(c.err, "eth0")
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want it wrapped, saying %q", c.err, err, c.want)
		}
	}
	if err := LoadError(xdpmaglev.ErrAttach, "eth0"); err != xdpmaglev.ErrAttach {
		t.Errorf("ErrAttach: %v, want it as it is", err)
	}
}

// TestDetachFunc: detach, the end of a drain of the whole load balancer,
// removes the program and the pins, where leave keeps them.
func TestDetachFunc(t *testing.T) {
	xdptest.Need(t)
	ns := xdptest.VethNS(t, "l4pin")
	mnt := xdptest.BPFFS(t)
	dir := filepath.Join(mnt, "l4lb", "v0")
	lb, err := xdptest.In(ns, func() (*xdpmaglev.LB, error) {
		return xdpmaglev.Load("v0", xdpmaglev.Options{PinPath: dir, M: 251, ConntrackSize: 1024, MaxServices: 2, MaxBackends: 4})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	if _, err := os.Stat(filepath.Join(dir, "link")); err != nil {
		t.Fatalf("the link is not pinned: %v", err)
	}
	var out strings.Builder
	if err := Detach(lb, "v0", slog.New(slog.NewTextHandler(&out, nil))); err != nil {
		t.Fatal(err)
	}
	if want := ` level=INFO msg="detached from v0, and removed the pins in ` + dir + "\"\n"; !strings.HasSuffix(out.String(), want) || strings.Count(out.String(), "\n") != 1 {
		t.Errorf("logged %q, want one record ending %q", out.String(), want)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after detach, %s: %v", dir, err)
	}
	if o := xdptest.IP(t, "-n", ns, "link", "show", "v0"); strings.Contains(o, "xdp") {
		t.Errorf("a program is still attached to v0 after detach: %s", o)
	}
}

// TestDriverWarning: frames the program sends by XDP_TX on a veth whose
// peer has no XDP program are lost in the driver, which counts them; the
// load balancer logs a warning the first time that count rises, naming
// it, and not again.
func TestDriverWarning(t *testing.T) {
	xdptest.Need(t)
	ns := xdptest.VethNS(t, "l4lbw")
	lb, err := xdptest.In(ns, func() (*xdpmaglev.LB, error) { return xdpmaglev.Load("v0", xdpmaglev.Options{FloodRate: -1}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	if err := lb.SetService(svc, []xdpmaglev.Backend{{Addr: netip.MustParseAddr("198.18.0.11"), Weight: 1, HW: net.HardwareAddr{2, 0, 0, 0, 0, 0x11}}}, xdpmaglev.ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	var log nstest.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		WatchDriver(ctx, lb, "v0", 50*time.Millisecond, slog.New(slog.NewTextHandler(&log, nil)))
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	send := func() {
		t.Helper()
		v0 := xdptest.Interface(t, ns, "v0").HardwareAddr
		var frames [][]byte
		for i := range 10 {
			tcp := xdptest.TCP(uint16(0x9c00+i), 80, xdptest.FlagACK, nil)
			frames = append(frames, xdptest.Ethernet(v0, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02},
				xdptest.Packet(xdptest.ProtoTCP, netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.19.0.1"), tcp)))
		}
		xdptest.Send(t, ns, "v1", frames...)
	}
	time.Sleep(100 * time.Millisecond) // the watch's first read
	send()
	// The first rise the watch reads: the 10 frames, or the first of them
	// where a read fell among them.
	out := log.Await(t, "the driver of v0 counts XDP errors: rx_xdp_tx_errors rose by ")
	var by, to int
	if m := regexp.MustCompile(`rose by (\d+) to (\d+):`).FindString(out); m == "" {
		t.Errorf("the warning says no rise: %s", out)
	} else if _, err := fmt.Sscanf(m, "rose by %d to %d:", &by, &to); err != nil || by != to || by < 1 || by > 10 {
		t.Errorf("the warning does not say a first rise of 1 to 10 frames: %s", out)
	}
	if !strings.Contains(out, "level=WARN") {
		t.Errorf("not a warning: %s", out)
	}
	send()
	time.Sleep(300 * time.Millisecond)
	if n := strings.Count(log.String(), "counts XDP errors"); n != 1 {
		t.Errorf("%d warnings after two rises, want 1:\n%s", n, log.String())
	}
	if d, err := lb.Driver(); err != nil || d["rx_xdp_tx_errors"] != 20 {
		t.Errorf("the driver counts %d errors (%v), want the 20 frames sent", d["rx_xdp_tx_errors"], err)
	}
}

// TestSecondHops: l4lb decap's last status line counts the packets that
// named a second hop only if there were any.
func TestSecondHops(t *testing.T) {
	if got := secondHops(xdpmaglev.DecapStats{Decapsulated: 5}); got != "" {
		t.Errorf("no second hop: %q", got)
	}
	want := "; of those that named a second hop, 7 passed on to it, 2 delivered here, 1 with no route to it"
	if got := secondHops(xdpmaglev.DecapStats{SecondHop: 7, SecondLocal: 2, SecondNoRoute: 1}); got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
