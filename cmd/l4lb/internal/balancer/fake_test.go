package balancer

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool/pooltest"
	"github.com/maglevlb/maglev/xdpmaglev"
	"go.opentelemetry.io/otel/metric/noop"
)

// The tests of this file run the balancer on a fake data plane
// (pooltest.DataPlane): no privileges, namespace or XDP program.

var _ DataPlane = (*pooltest.DataPlane)(nil)

// fakeServices returns the services of a configuration file's services
// section.
func fakeServices(t *testing.T, services string) []config.Service {
	t.Helper()
	_, svcs, err := config.Parse([]byte("iface: v0\nm: 251\nservices:\n" + services))
	if err != nil {
		t.Fatal(err)
	}
	return svcs
}

// newFake returns a balancer of dp, logging to log (nil: nowhere).
func newFake(t *testing.T, dp *pooltest.DataPlane, log *nstest.LogBuffer) *Balancer {
	t.Helper()
	h := slog.DiscardHandler
	if log != nil {
		h = slog.NewJSONHandler(log, nil)
	}
	b, err := New(t.Context(), dp, Options{Iface: "v0", Meter: noop.NewMeterProvider().Meter(""), Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// backendsOf returns the backends the data plane holds for svc, as
// "addr=weight[/down]".
func backendsOf(dp *pooltest.DataPlane, svc xdpmaglev.Service) []string {
	var out []string
	for _, be := range dp.Backends(svc) {
		s := fmt.Sprintf("%v=%d", be.Addr, be.Weight)
		if be.Down {
			s += "/down"
		}
		out = append(out, s)
	}
	return out
}

const (
	fakeWeb  = "  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11=02:00:00:00:00:11, 198.18.0.12=02:00:00:00:00:12]\n"
	fakeWeb2 = "  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11=02:00:00:00:00:11]\n"
	fakeDNS  = "  - name: dns\n    vip: 198.19.0.2:53\n    proto: udp\n    backends: [198.18.0.21=02:00:00:00:00:21]\n"
	fakeTLS  = "  - name: tls\n    vip: 198.19.0.1:443\n    backends: [198.18.0.31=02:00:00:00:00:31]\n"
)

// TestReloadOnFake: a reload adds, changes and removes services; the new
// ones are written in one batch, a changed one in place (its removed
// backend drains), a removed one leaves the data plane.
func TestReloadOnFake(t *testing.T) {
	dp := &pooltest.DataPlane{}
	var log nstest.LogBuffer
	b := newFake(t, dp, &log)
	first := fakeServices(t, fakeWeb+fakeDNS)
	did, err := b.Apply(first)
	if err != nil || did.String() != "2 services: added dns, web, changed none, removed none, 0 unchanged" {
		t.Fatalf("first apply: %q, %v", did, err)
	}
	for _, c := range dp.Calls() {
		if c.Op != "batch" {
			t.Errorf("a first apply's update %+v, want a batch's", c)
		}
	}
	did, err = b.Apply(fakeServices(t, fakeWeb2+fakeTLS))
	if err != nil || did.String() != "2 services: added tls, changed web, removed dns, 0 unchanged" {
		t.Fatalf("reload: %q, %v", did, err)
	}
	web, dns := first[0].Svc, first[1].Svc
	if got := backendsOf(dp, web); !slices.Equal(got, []string{"198.18.0.11=1", "198.18.0.12=0"}) {
		t.Errorf("web after the reload: %v, want 198.18.0.12 draining", got)
	}
	if got := dp.Services(); len(got) != 2 || slices.Contains(got, dns) {
		t.Errorf("services after the reload %v, want web and tls", got)
	}
	if names := []string{b.Pools()[0].Name(), b.Pools()[1].Name()}; !slices.Equal(names, []string{"tls", "web"}) {
		t.Errorf("pools %v", names)
	}
	did, err = b.Apply(fakeServices(t, fakeWeb2+fakeTLS))
	if err != nil || did.String() != "2 services: added none, changed none, removed none, 2 unchanged" {
		t.Errorf("the same again: %q, %v", did, err)
	}
	for _, want := range [][]string{
		{"service started", "service", "dns", "vip", "udp/198.19.0.2:53", "iface", "v0", "mode", "native", "forward", "l2", "backends", "1"},
		{"backends applied", "service", "web", "live", "2", "draining", "0", "down", "0", "unresolved", "0"},
		{"service changed", "service", "web"},
		{"backends applied", "service", "web", "live", "1", "draining", "1"},
		{"service stopped", "service", "dns"},
	} {
		log.AwaitRecord(t, want[0], want[1:]...)
	}
}

// TestFailedStartOnFake: a reload whose new service the data plane
// refuses changes nothing: the running services go on, the new one is
// deleted again, and the error is the data plane's.
func TestFailedStartOnFake(t *testing.T) {
	dp := &pooltest.DataPlane{}
	b := newFake(t, dp, nil)
	if _, err := b.Apply(fakeServices(t, fakeWeb)); err != nil {
		t.Fatal(err)
	}
	dp.FailBatch(xdpmaglev.ErrFull)
	dp.FailSet(xdpmaglev.ErrFull)
	if _, err := b.Apply(fakeServices(t, fakeWeb+fakeDNS)); !errors.Is(err, xdpmaglev.ErrFull) {
		t.Fatalf("a service the data plane refuses: %v, want ErrFull", err)
	}
	calls := dp.Calls()
	if last := calls[len(calls)-1]; last.Op != "delete" || last.Service.VIP.Port() != 53 {
		t.Errorf("the last update %+v, want dns deleted", last)
	}
	if ps := b.Pools(); len(ps) != 1 || ps[0].Name() != "web" {
		t.Errorf("running after a failed start: %v", ps)
	}
	if got := backendsOf(dp, fakeServices(t, fakeWeb)[0].Svc); len(got) != 2 {
		t.Errorf("web after a failed start: %v", got)
	}
}

// TestAdoptOnFake: a data plane an earlier l4lb left is adopted: a
// service the configuration holds starts from what it holds (a backend
// that is no member drains, one held down starts down by its health
// check, one held in service up), one it does not hold stays
// until Prune deletes it, and one the configuration drops before Prune
// is left as it was.
func TestAdoptOnFake(t *testing.T) {
	web := fakeServices(t, fakeWeb+"    health: tcp\n    health-interval: 1h\n")[0]
	dns, tls := fakeServices(t, fakeDNS)[0], fakeServices(t, fakeTLS)[0]
	a := netip.MustParseAddr
	dp := pooltest.Left("/sys/fs/bpf/l4lb/v0", map[xdpmaglev.Service][]xdpmaglev.Backend{
		web.Svc: {{Addr: a("198.18.0.10"), Weight: 1}, {Addr: a("198.18.0.11"), Weight: 1}, {Addr: a("198.18.0.12"), Weight: 1, Down: true}},
		dns.Svc: {{Addr: a("198.18.0.21"), Weight: 1}},
		tls.Svc: {{Addr: a("198.18.0.31"), Weight: 1}},
	})
	var log nstest.LogBuffer
	b := newFake(t, dp, &log)
	b.Adopt()
	if _, err := b.Apply([]config.Service{web, tls}); err != nil {
		t.Fatal(err)
	}
	if got, want := backendsOf(dp, web.Svc), []string{"198.18.0.10=0", "198.18.0.11=1", "198.18.0.12=1/down"}; !slices.Equal(got, want) {
		t.Errorf("web adopted: %v, want %v", got, want)
	}
	st := b.Pools()[1].Status()
	if st.Name != "web" || st.Backends[2].Health != "down" || st.Backends[1].Health != "up" {
		t.Errorf("web's status: %+v, want 198.18.0.12 down and 198.18.0.11 up, as the data plane held them", st)
	}
	log.AwaitRecord(t, "adopted the pinned data plane: its connection tracking, tables and counters go on", "path", "/sys/fs/bpf/l4lb/v0")
	if r := log.AwaitRecord(t, "health: backend starts down, as the data plane left it", "service", "web", "backend", "198.18.0.12"); r.Attrs["rise"] != "2" {
		t.Errorf("record %+v, want rise=2", r)
	}
	// tls, taken over, then dropped: it leaves; dns, never taken over,
	// stays until Prune.
	if _, err := b.Apply([]config.Service{web}); err != nil {
		t.Fatal(err)
	}
	if got := dp.Services(); len(got) != 2 || !slices.Contains(got, dns.Svc) {
		t.Errorf("before Prune: %v, want web and dns", got)
	}
	if err := b.Prune(); err != nil {
		t.Fatal(err)
	}
	if got := dp.Services(); len(got) != 1 || got[0] != web.Svc {
		t.Errorf("after Prune: %v, want web alone", got)
	}
	log.AwaitRecord(t, "service stopped", "service", "tls")
	log.AwaitRecord(t, "service deleted: an earlier l4lb left it, and the configuration does not hold it", "vip", "udp/198.19.0.2:53")
}

// TestKeptOnFailedStartOnFake: a first apply that fails leaves the
// services the earlier l4lb left as they were, none deleted.
func TestKeptOnFailedStartOnFake(t *testing.T) {
	web := fakeServices(t, fakeWeb)[0]
	left := []xdpmaglev.Backend{{Addr: netip.MustParseAddr("198.18.0.10"), Weight: 1}}
	dp := pooltest.Left("/sys/fs/bpf/l4lb/v0", map[xdpmaglev.Service][]xdpmaglev.Backend{web.Svc: left})
	b := newFake(t, dp, nil)
	b.Adopt()
	dp.FailBatch(xdpmaglev.ErrFull)
	dp.FailSet(xdpmaglev.ErrFull)
	if _, err := b.Apply([]config.Service{web}); !errors.Is(err, xdpmaglev.ErrFull) {
		t.Fatalf("apply: %v, want ErrFull", err)
	}
	if got := backendsOf(dp, web.Svc); !slices.Equal(got, []string{"198.18.0.10=1"}) {
		t.Errorf("web after a failed start: %v, want as the earlier l4lb left it", got)
	}
	for _, c := range dp.Calls() {
		if c.Op == "delete" {
			t.Errorf("deleted %v", c.Service)
		}
	}
}

// TestAppliedString: what an Apply did, in a line, one service or more.
func TestAppliedString(t *testing.T) {
	for _, c := range []struct {
		a    Applied
		want string
	}{
		{Applied{Changed: []string{"web"}}, "1 service: added none, changed web, removed none, 0 unchanged"},
		{Applied{Added: []string{"dns"}, Removed: []string{"old"}, Unchanged: 1}, "2 services: added dns, changed none, removed old, 1 unchanged"},
		{Applied{}, "0 services: added none, changed none, removed none, 0 unchanged"},
	} {
		if got := c.a.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.a, got, c.want)
		}
	}
}
