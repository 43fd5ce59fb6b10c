package main

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

	"github.com/maglevlb/maglev/membership"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// TestK8sPlan: what the data plane holds as a Service's endpoints come,
// turn terminating-but-serving (drained as weight 0 in etcd is), leave,
// and come back.
func TestK8sPlan(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := newPool(nil, xdpmaglev.Service{}, xdpmaglev.ServiceOptions{}, 10*time.Second, nil, nil)
	t0 := time.Unix(1000, 0)
	step := func(now time.Time, eps []membership.Endpoint, want string, wantNext time.Time) {
		t.Helper()
		p.members = members(eps, logger)
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
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ep := func(hostport string, w uint32) membership.Endpoint {
		host, port, _ := net.SplitHostPort(hostport)
		p, _ := strconv.Atoi(port)
		return membership.Endpoint{Name: hostport, Host: host, Port: uint16(p), Weight: w}
	}
	m := members([]membership.Endpoint{
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
		if got, ok := m[netip.MustParseAddr(a)]; !ok || got.weight != w || got.hw != nil {
			t.Errorf("%s: %+v (%v), want weight %d", a, got, ok, w)
		}
	}
	if !strings.Contains(logs.String(), "web-0:8080") {
		t.Errorf("the endpoint left out is not logged; logs:\n%s", logs.String())
	}
}
