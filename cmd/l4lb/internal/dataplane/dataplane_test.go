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
	"strconv"
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
	var out nstest.LogBuffer
	if err := Detach(lb, "v0", slog.New(slog.NewJSONHandler(&out, nil))); err != nil {
		t.Fatal(err)
	}
	if rs := out.Records(); len(rs) != 1 || rs[0].Level != "INFO" || !rs[0].Is("detached, and removed the pins", "iface", "v0", "path", dir) {
		t.Errorf("logged %q, want one record of the detach from v0 and the pins in %s", out.String(), dir)
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
		WatchDriver(ctx, lb, "v0", 50*time.Millisecond, slog.New(slog.NewJSONHandler(&log, nil)))
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
	r := log.AwaitRecord(t, driverWarning, "iface", "v0", "counter", "rx_xdp_tx_errors")
	by, _ := strconv.Atoi(r.Attrs["rose"])
	if r.Level != "WARN" || r.Attrs["rose"] != r.Attrs["value"] || by < 1 || by > 10 {
		t.Errorf("the warning %+v: want a first rise of 1 to 10 frames, at WARN", r)
	}
	send()
	time.Sleep(300 * time.Millisecond)
	if rs := log.Records(); len(rs) != 1 {
		t.Errorf("%d records after two rises, want 1 warning:\n%s", len(rs), log.String())
	}
	if d, err := lb.Driver(); err != nil || d["rx_xdp_tx_errors"] != 20 {
		t.Errorf("the driver counts %d errors (%v), want the 20 frames sent", d["rx_xdp_tx_errors"], err)
	}
}

// TestDecapAttrs: l4lb decap's last record has the second chance
// counters only if a packet named a second hop.
func TestDecapAttrs(t *testing.T) {
	for _, c := range []struct {
		st   xdpmaglev.DecapStats
		want string
	}{
		{xdpmaglev.DecapStats{Decapsulated: 5, Passed: 1}, `decapsulated=5 passed=1 malformed=0 untrusted=0`},
		{xdpmaglev.DecapStats{SecondHop: 7, SecondLocal: 2, SecondNoRoute: 1}, `decapsulated=0 passed=0 malformed=0 untrusted=0 second_hop=7 second_local=2 second_no_route=1`},
	} {
		attrs := decapAttrs(c.st)
		var got []string
		for i := 0; i+1 < len(attrs); i += 2 {
			got = append(got, fmt.Sprintf("%v=%v", attrs[i], attrs[i+1]))
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%+v: %v, want %s", c.st, got, c.want)
		}
	}
}
