package balancer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	"go.opentelemetry.io/otel/metric/noop"
)

// scaleFile writes a configuration file of n services of k backends each
// (static, with their MACs: nothing to resolve), tables of m slots, and
// returns its path.
func scaleFile(t testing.TB, n, k, m int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "iface: v0\nmax-services: %d\nmax-backends: %d\nm: %d\nservices:\n", n, n*k+k, m)
	for s := range n {
		fmt.Fprintf(&b, "  - name: s%d\n    vip: 198.19.%d.%d:80\n    backends: [", s, s/256, s%256)
		for i := range k {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "198.18.%d.%d=02:00:00:00:%02x:%02x", i/256, i%256+1, i/256, i%256+1)
		}
		b.WriteString("]\n")
	}
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// kernelBytes returns the kernel memory of the process's BPF maps, summed
// from /proc/self/fdinfo's memlock lines (maps whose fds are closed, the
// tables in the outer map among them, are not counted: see TestScale).
func kernelBytes(t testing.TB) int {
	fds, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, fd := range fds {
		b, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err != nil || !strings.Contains(string(b), "map_type:") {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "memlock:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				sum += n
			}
		}
	}
	return sum
}

// TestScale applies a file of many services to a data plane loaded
// without an interface and reports what it takes: the time from the
// file's read to the last service's table in the kernel (its first packet
// could be forwarded then), the Go heap after, and the kernel memory of
// the maps (the tables: 8·(M+1) bytes each, summed, since their fds are
// closed once in the outer map). Then it reloads the file with one
// service changed: one service updated, the others not touched. It runs
// 100 services of 100 backends in CI; L4LB_SCALE=1000 runs
// 1,000 (docs/l4lb-howto-sizing.md, "Many services at scale", has the figures).
func TestScale(t *testing.T) {
	xdptest.Need(t)
	xdptest.Exclusive(t) // its times are measured, and it loads the kernel
	n, k, m := 100, 100, 10007
	if s := os.Getenv("L4LB_SCALE"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	if s := os.Getenv("L4LB_SCALE_M"); s != "" {
		m, _ = strconv.Atoi(s)
	}
	path := scaleFile(t, n, k, m)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	kernel0 := kernelBytes(t)

	t0 := time.Now()
	g, svcs, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	parsed := time.Since(t0)
	g.Opts.MeterProvider = noop.NewMeterProvider()
	lb, err := xdpmaglev.Load("", g.Opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	loaded := time.Since(t0)
	b, err := New(context.Background(), lb, Options{Meter: noop.NewMeterProvider().Meter(""), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	did, err := b.Apply(svcs)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Since(t0)
	if len(did.Added) != n || len(lb.Services()) != n {
		t.Fatalf("apply: %s; %d services in the data plane, want %d", did, len(lb.Services()), n)
	}
	last := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort(fmt.Sprintf("198.19.%d.%d:80", (n-1)/256, (n-1)%256))}
	if tb := lb.Table(last); tb == nil || tb.Size() != m || tb.NumBackends() != k {
		t.Fatalf("the last service's table: %v", tb)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	tables := n * 8 * (m + 1)
	t.Logf("%d services of %d backends, M = %d: file parsed in %v, data plane loaded at %v, every table in the kernel at %v (%v a service); Go heap %.1f MiB more; kernel: maps %.1f MiB + tables %.1f MiB",
		n, k, m, parsed.Round(time.Millisecond), loaded.Round(time.Millisecond), first.Round(time.Millisecond), (first-loaded)/time.Duration(n),
		float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), float64(kernelBytes(t)-kernel0)/(1<<20), float64(tables)/(1<<20))

	// One service changed: a backend more. Only it is updated.
	svcs[n/2].Backends = append(svcs[n/2].Backends, xdpmaglev.Backend{Addr: netip.MustParseAddr("198.18.200.1"), Weight: 1, HW: net.HardwareAddr{2, 0, 0, 0, 0xc8, 1}})
	svcs[n/2].Settings += "\x00-backend=198.18.200.1"
	t1 := time.Now()
	did, err = b.Apply(svcs)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d services: added none, changed s%d, removed none, %d unchanged", n, n/2, n-1); did.String() != want {
		t.Fatalf("reload: %q, want %q", did, want)
	}
	if tb := lb.Table(svcs[n/2].Svc); tb.NumBackends() != k+1 {
		t.Fatalf("the changed service has %d backends, want %d", tb.NumBackends(), k+1)
	}
	t.Logf("a reload changing one service of %d: %v", n, time.Since(t1).Round(time.Microsecond))
}
