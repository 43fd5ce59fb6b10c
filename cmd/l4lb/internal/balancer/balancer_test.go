package balancer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool/pooltest"
	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestUnresolvedStatus: a backend given without a MAC that nobody answers
// ARP for is out of service, and says so: its update returns within the
// data plane's wait (250 ms for all of them: it was 2 s each), its state
// is unresolved (not live) in the admin API and in the metric
// maglev.l4lb.backend.state, and the status line counts it unresolved, at
// level WARN, naming it. Once the neighbour table has its MAC, the data
// plane takes it back, and the pool says so in a status line, live.
func TestUnresolvedStatus(t *testing.T) {
	xdptest.Need(t)
	ns := xdptest.VethNS(t, "l4lbu")
	var log nstest.LogBuffer
	logger := slog.New(slog.NewJSONHandler(&log, nil))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var b *Balancer
	var mu sync.Mutex
	lb, err := xdptest.In(ns, func() (*xdpmaglev.LB, error) {
		return xdpmaglev.Load("v0", xdpmaglev.Options{Changed: func(s xdpmaglev.Service) {
			mu.Lock()
			defer mu.Unlock()
			b.Resolved(s)
		}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	p := pool.New(lb, config.Service{Name: "default", Svc: svc, Timeout: time.Second}, nil, logger)
	t.Cleanup(p.Close)
	mu.Lock()
	if b, err = New(context.Background(), lb, Options{Meter: mp.Meter(""), Logger: logger}); err != nil {
		t.Fatal(err)
	}
	b.running[svc] = &running{cfg: config.Service{Name: "default", Svc: svc}, pool: p}
	mu.Unlock()

	// Three addresses on v0's segment that nothing holds.
	members := map[netip.Addr]pool.Member{netip.MustParseAddr("198.18.0.11"): {Weight: 1, HW: net.HardwareAddr{2, 0, 0, 0, 0, 0x11}}}
	for _, last := range []byte{50, 51, 52} {
		members[netip.AddrFrom4([4]byte{198, 18, 0, last})] = pool.Member{Weight: 1}
	}
	start := time.Now()
	if err := p.SetMembers(members); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the update with 3 unresolvable backends took %v", took)
	}
	r := log.AwaitRecord(t, "backends applied, some with no MAC in the neighbour table", "service", "default", "live", "1", "draining", "0", "unresolved", "3")
	if r.Level != "WARN" || r.Attrs["unresolved_backends"] != `["198.18.0.50","198.18.0.51","198.18.0.52"]` || len(r.Attrs["digest"]) != 64 {
		t.Errorf("record %+v", r)
	}
	state := func() map[string]string {
		t.Helper()
		got := map[string]string{}
		for _, be := range p.Status().Backends {
			got[be.Addr] = be.State
		}
		return got
	}
	if got := state(); got["198.18.0.11"] != "live" || got["198.18.0.50"] != "unresolved" {
		t.Errorf("states %v", got)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	gauge := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "maglev.l4lb.backend.state" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				be, _ := dp.Attributes.Value(attribute.Key("maglev.backend"))
				st, _ := dp.Attributes.Value(attribute.Key("maglev.state"))
				gauge[be.AsString()] = fmt.Sprintf("%s=%d", st.AsString(), dp.Value)
			}
		}
	}
	if gauge["198.18.0.11"] != "live=1" || gauge["198.18.0.50"] != "unresolved=1" || len(gauge) != 4 {
		t.Errorf("maglev.l4lb.backend.state: %v", gauge)
	}

	// The neighbour table learns one: the data plane takes it back.
	xdptest.IP(t, "-n", ns, "neigh", "replace", "198.18.0.50", "lladdr", "02:00:00:00:00:50", "dev", "v0", "nud", "permanent")
	log.AwaitRecord(t, "backends applied, some with no MAC in the neighbour table", "live", "2", "draining", "0", "unresolved", "2", "reason", "the neighbour table answered")
	if got := state(); got["198.18.0.50"] != "live" {
		t.Errorf("states once resolved: %v", got)
	}
}

// TestKeptOnFailedStart: a new l4lb whose configuration cannot start
// (here, more backends than the pinned maps hold) leaves the service an
// earlier l4lb left as it was, forwarding, for the next one; once a
// configuration applies, services it does not hold are deleted.
func TestKeptOnFailedStart(t *testing.T) {
	xdptest.Need(t)
	ns := xdptest.VethNS(t, "l4keep")
	mnt := xdptest.BPFFS(t)
	opts := xdpmaglev.Options{PinPath: filepath.Join(mnt, "l4lb", "v0"), M: 251, ConntrackSize: 1024, MaxServices: 2, MaxBackends: 4}
	load := func() *xdpmaglev.LB {
		t.Helper()
		lb, err := xdptest.In(ns, func() (*xdpmaglev.LB, error) { return xdpmaglev.Load("v0", opts) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lb.Close() })
		return lb
	}
	service := func(vip string, n int) config.Service {
		t.Helper()
		file := fmt.Sprintf("iface: v0\nm: 251\nservices:\n  - name: default\n    vip: %s\n    backends:\n", vip)
		for i := range n {
			file += fmt.Sprintf("      - %s=02:00:00:00:00:%02x\n", netip.AddrFrom4([4]byte{198, 18, 0, byte(11 + i)}), i)
		}
		_, svcs, err := config.Parse([]byte(file))
		if err != nil {
			t.Fatal(err)
		}
		return svcs[0]
	}
	web, other := service("198.19.0.1:80", 2), service("198.19.0.2:80", 1)
	lb := load()
	for _, c := range []config.Service{web, other} {
		if err := lb.SetService(c.Svc, c.Backends, xdpmaglev.ServiceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	digest := lb.Table(web.Svc).Digest()
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}

	lb = load()
	var out nstest.LogBuffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	b, err := New(t.Context(), lb, Options{Iface: "v0", Meter: noop.NewMeterProvider().Meter(""), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	b.Adopt()
	if _, err := b.Apply([]config.Service{service("198.19.0.1:80", 5)}); !errors.Is(err, xdpmaglev.ErrFull) {
		t.Fatalf("5 backends in maps of 4: %v, want ErrFull", err)
	}
	if got := lb.Services(); len(got) != 2 || lb.Table(web.Svc) == nil || lb.Table(web.Svc).Digest() != digest {
		t.Fatalf("after a failed start: services %v; want both, and %v's table, as the earlier l4lb left them\n%s", got, web.Svc, out.String())
	}
	if _, err := b.Apply([]config.Service{web}); err != nil {
		t.Fatal(err)
	}
	if err := b.Prune(); err != nil {
		t.Fatal(err)
	}
	if got := lb.Services(); len(got) != 1 || got[0] != web.Svc {
		t.Fatalf("after an apply of one service and prune: services %v", got)
	}
	if !slices.ContainsFunc(out.Records(), func(r nstest.Record) bool {
		return r.Is("service deleted: an earlier l4lb left it, and the configuration does not hold it", "vip", "tcp/198.19.0.2:80")
	}) {
		t.Fatalf("logged %q", out.String())
	}
	// Taken over, a service an apply drops leaves the data plane.
	if _, err := b.Apply([]config.Service{other}); err != nil {
		t.Fatal(err)
	}
	if got := lb.Services(); len(got) != 1 || got[0] != other.Svc {
		t.Fatalf("after an apply of the other service: services %v", got)
	}
	b.Close()
}

// TestReloadSource changes a service's etcd prefix by a reload: the
// members become the new prefix's, the old prefix's changes count no
// more, and the new one's do. It runs on a fake data plane.
func TestReloadSource(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	reg := func(prefix string, i int) {
		t.Helper()
		ep := endpoints.Endpoint{Addr: fmt.Sprintf("198.18.0.%d:80", 10+i)}
		if _, err := etcdmaglev.Register(context.Background(), cli, prefix, ep, etcdmaglev.RegisterOptions{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	reg("svc/a", 1)
	reg("svc/a", 2)
	reg("svc/b", 3)
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	load := func(prefix string) []config.Service {
		t.Helper()
		file := fmt.Sprintf("iface: v0\nm: 251\netcd: %s\nservices:\n  - name: web\n    vip: 198.19.0.1:80\n    forward: ipip\n    encap-src: 198.18.0.3\n    etcd-prefix: %s\n", srv.Endpoint(), prefix)
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, svcs, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return svcs
	}
	lb := &pooltest.DataPlane{}
	b, err := New(context.Background(), lb, Options{Meter: noop.NewMeterProvider().Meter(""), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	svcs := load("svc/a")
	if _, err := b.Apply(svcs); err != nil {
		t.Fatal(err)
	}
	// backends waits up to 5 s for the service's table to hold want, of
	// weight > 0 (members that left drain, with weight 0, for the drain
	// timeout).
	backends := func(want ...string) {
		t.Helper()
		var got []string
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			tb := lb.Table(svcs[0].Svc)
			got = nil
			for i, name := range tb.Backends() {
				if tb.Weights()[i] > 0 {
					got = append(got, name)
				}
			}
			if slices.Equal(got, want) {
				return
			}
		}
		t.Fatalf("backends %v, want %v", got, want)
	}
	backends("198.18.0.11", "198.18.0.12")
	did, err := b.Apply(load("svc/b"))
	if err != nil || did.String() != "1 service: added none, changed web, removed none, 0 unchanged" {
		t.Fatalf("reload: %q, %v", did, err)
	}
	backends("198.18.0.13")
	reg("svc/a", 4) // the old prefix: no longer the service's
	reg("svc/b", 5)
	backends("198.18.0.13", "198.18.0.15")
}
