package pool

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/membership"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// TestPlan: what the data plane holds as backends are drained, undrained,
// deregistered and drained by weight, and when each drain ends.
func TestPlan(t *testing.T) {
	a := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}) }
	p := New(nil, config.Service{Timeout: 10 * time.Second, Drained: []netip.Addr{a(4)}}, nil, nil)
	t0 := time.Unix(1000, 0)
	show := func(bs []xdpmaglev.Backend) string {
		s := ""
		for _, b := range bs {
			s += fmt.Sprintf("%v=%d ", b.Addr, b.Weight)
		}
		return s
	}
	step := func(now time.Time, want string, wantNext time.Time) {
		t.Helper()
		bs, next := p.plan(now)
		if got := show(bs); got != want || !next.Equal(wantNext) {
			t.Errorf("at +%v: %q, next drain end +%v; want %q, +%v", now.Sub(t0), got, next.Sub(t0), want, wantNext.Sub(t0))
		}
		p.applied = bs
	}
	p.members = map[netip.Addr]Member{a(1): {Weight: 1}, a(2): {Weight: 2}, a(3): {Weight: 1}, a(4): {Weight: 1}}
	// 198.18.0.4 is drained by the flag from the start.
	step(t0, "198.18.0.1=1 198.18.0.2=2 198.18.0.3=1 198.18.0.4=0 ", t0.Add(10*time.Second))
	// 198.18.0.2 drained through etcd (weight 0); 198.18.0.3 deregistered.
	p.members = map[netip.Addr]Member{a(1): {Weight: 1}, a(2): {Weight: 0}, a(4): {Weight: 1}}
	step(t0.Add(4*time.Second), "198.18.0.1=1 198.18.0.2=0 198.18.0.3=0 198.18.0.4=0 ", t0.Add(10*time.Second))
	// 198.18.0.4's drain ends; it stays a member, out of the service.
	step(t0.Add(10*time.Second), "198.18.0.1=1 198.18.0.2=0 198.18.0.3=0 ", t0.Add(14*time.Second))
	// Undrained: live again, and its next drain would start anew.
	delete(p.drained, a(4))
	step(t0.Add(11*time.Second), "198.18.0.1=1 198.18.0.2=0 198.18.0.3=0 198.18.0.4=1 ", t0.Add(14*time.Second))
	step(t0.Add(14*time.Second), "198.18.0.1=1 198.18.0.4=1 ", time.Time{})
	if len(p.since) != 1 { // 198.18.0.2, a member still, drained
		t.Errorf("drain start times kept: %v", p.since)
	}
	// 198.18.0.3 registers again: live at once.
	p.members[a(3)] = Member{Weight: 1}
	step(t0.Add(15*time.Second), "198.18.0.1=1 198.18.0.3=1 198.18.0.4=1 ", time.Time{})

	// A drain timeout of 0 takes a drained backend out at once.
	p = New(nil, config.Service{}, nil, nil)
	p.members = map[netip.Addr]Member{a(1): {Weight: 1}, a(2): {Weight: 1}}
	step(t0, "198.18.0.1=1 198.18.0.2=1 ", time.Time{})
	p.drained[a(2)] = true
	step(t0, "198.18.0.1=1 ", time.Time{})
}

// TestK8sPlan: what the data plane holds as a Service's endpoints come,
// turn terminating-but-serving (drained as weight 0 in etcd is), leave,
// and come back.
func TestK8sPlan(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := New(nil, config.Service{Timeout: 10 * time.Second}, nil, nil)
	t0 := time.Unix(1000, 0)
	step := func(now time.Time, eps []membership.Endpoint, want string, wantNext time.Time) {
		t.Helper()
		p.members = Members(eps, logger)
		bs, next := p.plan(now)
		got := ""
		for _, b := range bs {
			got += fmt.Sprintf("%v=%d ", b.Addr, b.Weight)
		}
		if got != want || !next.Equal(wantNext) {
			t.Errorf("at +%v: %q, next drain end +%v; want %q, +%v", now.Sub(t0), got, next.Sub(t0), want, wantNext.Sub(t0))
		}
		p.applied = bs
	}
	// An endpoint as k8smaglev.Watch gives it: weight 1, or 0 while it
	// terminates but serves.
	ep := func(i int, draining bool) membership.Endpoint {
		ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}), 8080)
		return membership.Endpoint{Name: ap.String(), Host: ap.Addr().String(), Port: ap.Port(), Weight: map[bool]uint32{false: 1, true: 0}[draining]}
	}
	step(t0, []membership.Endpoint{ep(1, false), ep(2, false), ep(3, false)},
		"198.18.0.1=1 198.18.0.2=1 198.18.0.3=1 ", time.Time{})
	// 198.18.0.2 terminates but serves: weight 0 until the drain timeout.
	// 198.18.0.3 leaves the slices (deleted, or no longer ready): the same.
	step(t0.Add(2*time.Second), []membership.Endpoint{ep(1, false), ep(2, true)},
		"198.18.0.1=1 198.18.0.2=0 198.18.0.3=0 ", t0.Add(12*time.Second))
	// A new endpoint is live at once.
	step(t0.Add(5*time.Second), []membership.Endpoint{ep(1, false), ep(2, true), ep(4, false)},
		"198.18.0.1=1 198.18.0.2=0 198.18.0.3=0 198.18.0.4=1 ", t0.Add(12*time.Second))
	// The drains end: both leave the service.
	step(t0.Add(12*time.Second), []membership.Endpoint{ep(1, false), ep(2, true), ep(4, false)},
		"198.18.0.1=1 198.18.0.4=1 ", time.Time{})
	// The terminating pod is gone; 198.18.0.3 is ready again (a new pod on
	// its IP): live.
	step(t0.Add(13*time.Second), []membership.Endpoint{ep(1, false), ep(3, false), ep(4, false)},
		"198.18.0.1=1 198.18.0.3=1 198.18.0.4=1 ", time.Time{})
	if len(p.since) != 0 {
		t.Errorf("drain start times kept: %v", p.since)
	}
	// Every endpoint terminating: all drain, none live.
	step(t0.Add(20*time.Second), []membership.Endpoint{ep(1, true), ep(3, true), ep(4, true)},
		"198.18.0.1=0 198.18.0.3=0 198.18.0.4=0 ", t0.Add(30*time.Second))
}

// TestMembers: the members of an endpoint list, from etcd or Kubernetes,
// are the endpoints' IPs, IPv6 and IPv4-mapped ones included, their ports
// left out, with their weights; one IP twice is live if either is; an
// endpoint whose host is no IP address is left out (and logged).
func TestMembers(t *testing.T) {
	var logs nstest.LogBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	ep := func(hostport string, w uint32) membership.Endpoint {
		host, port, _ := net.SplitHostPort(hostport)
		p, _ := strconv.Atoi(port)
		return membership.Endpoint{Name: hostport, Host: host, Port: uint16(p), Weight: w}
	}
	m := Members([]membership.Endpoint{
		ep("198.18.0.1:8080", 1),
		ep("198.18.0.2:8080", 0),
		ep("[2001:db8::1]:8080", 1),
		ep("[::ffff:198.18.0.3]:8080", 1),
		ep("198.18.0.4:8080", 0),
		ep("198.18.0.4:9090", 1),
		ep("198.18.0.5:8080", 1),
		ep("198.18.0.5:9090", 0),
		ep("198.18.0.6:80", 5),
		ep("web-0:8080", 1),
	}, logger)
	want := map[string]uint32{"198.18.0.1": 1, "198.18.0.2": 0, "2001:db8::1": 1, "198.18.0.3": 1, "198.18.0.4": 1, "198.18.0.5": 1, "198.18.0.6": 5}
	if len(m) != len(want) {
		t.Errorf("%d members, want %d: %v", len(m), len(want), m)
	}
	for a, w := range want {
		if got, ok := m[netip.MustParseAddr(a)]; !ok || got.Weight != w || got.HW != nil {
			t.Errorf("%s: %+v (%v), want weight %d", a, got, ok, w)
		}
	}
	if rs := logs.Records(); len(rs) != 1 || !rs[0].Is("endpoints ignored: their host is not an IP address") || !strings.Contains(rs[0].Attrs["err"], "web-0:8080") {
		t.Errorf("the endpoint left out is not logged; logs:\n%s", logs.String())
	}
}

// fakeHealth is a Health whose down backends the test sets.
type fakeHealth struct {
	down     map[netip.Addr]bool
	failOpen bool
	probed   []netip.Addr
}

func (h *fakeHealth) Set(addrs []netip.Addr)   { h.probed = addrs }
func (h *fakeHealth) IsDown(a netip.Addr) bool { return h.down[a] }
func (h *fakeHealth) Health(a netip.Addr) (string, string, int, int) {
	if h.down[a] {
		return "down", "refused", 0, 3
	}
	return "up", "", 2, 0
}
func (h *fakeHealth) SetFailOpen(open bool) { h.failOpen = open }
func (h *fakeHealth) String() string        { return "fake" }
func (h *fakeHealth) Close()                {}

// fakeAnnouncer records what the pool tells it.
type fakeAnnouncer struct {
	healthy bool
	why     string
}

func (a *fakeAnnouncer) Set(_ xdpmaglev.Service, healthy bool, why string) {
	a.healthy, a.why = healthy, why
}

var _ Health = (*fakeHealth)(nil)
var _ Announcer = (*fakeAnnouncer)(nil)

// TestDownAndFailOpen: through its two small interfaces, the pool marks
// the backends its Health has down, and tells its Announcer the service
// is healthy while a backend of weight > 0 is up; with every one down it
// fails open (the last applied table's downs kept, the Health told), and
// the Announcer is told it is not healthy; a backend up again ends it.
func TestDownAndFailOpen(t *testing.T) {
	a := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}) }
	h, an := &fakeHealth{down: map[netip.Addr]bool{}}, &fakeAnnouncer{}
	var log nstest.LogBuffer
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	p := New(nil, config.Service{Name: "web", Svc: svc, Timeout: time.Minute}, an, slog.New(slog.NewJSONHandler(&log, nil)))
	p.SetHealth(h)
	p.Stage(map[netip.Addr]Member{a(1): {Weight: 1}, a(2): {Weight: 1}, a(3): {Weight: 0}})
	if len(h.probed) != 3 {
		t.Fatalf("Stage: the Health probes %v, want the 3 members", h.probed)
	}
	step := func(want string, healthy bool) {
		t.Helper()
		p.mu.Lock()
		defer p.mu.Unlock()
		bs, _ := p.plan(time.Unix(1000, 0))
		p.markDown(bs)
		got := ""
		for _, b := range bs {
			got += fmt.Sprintf("%v=%d/%v ", b.Addr, b.Weight, b.Down)
		}
		p.applied = bs
		p.tellBGP()
		if got != want || an.healthy != healthy || h.failOpen != p.open {
			t.Errorf("%q, announced healthy %v (%s), fail open %v/%v; want %q, %v", got, an.healthy, an.why, p.open, h.failOpen, want, healthy)
		}
	}
	step("198.18.0.1=1/false 198.18.0.2=1/false 198.18.0.3=0/false ", true)
	h.down[a(2)] = true
	step("198.18.0.1=1/false 198.18.0.2=1/true 198.18.0.3=0/false ", true)
	h.down[a(1)] = true // every backend of weight > 0 down: the last table's downs kept
	step("198.18.0.1=1/false 198.18.0.2=1/true 198.18.0.3=0/false ", false)
	failing := log.Records()
	if !p.open || !strings.Contains(an.why, "failing open") || len(failing) != 1 || failing[0].Level != "WARN" ||
		!failing[0].Is("failing open: every backend is down by its health check, the last table kept", "service", "web", "vip", "tcp/198.19.0.1:80", "backends", "2") {
		t.Errorf("not failing open: %v, %q\n%s", p.open, an.why, log.String())
	}
	delete(h.down, a(2))
	step("198.18.0.1=1/true 198.18.0.2=1/false 198.18.0.3=0/false ", true)
	if rs := log.Records(); p.open || len(rs) != 2 || !rs[1].Is("failing open no more", "service", "web", "vip", "tcp/198.19.0.1:80", "up", "1") {
		t.Errorf("still failing open:\n%s", log.String())
	}
	st := p.withHealth(BackendStatus{Addr: a(1).String()}, a(1))
	if st.Health != "down" || st.HealthError != "refused" || st.HealthFailed != 3 {
		t.Errorf("the Health's verdict in the status: %+v", st)
	}
}
