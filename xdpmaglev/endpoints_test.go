package xdpmaglev

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/membership"
)

// TestFromEndpoints: an endpoint's IP, IPv6 and IPv4-mapped ones
// included, its port left out, with its weight; one IP twice is live if
// either is; an endpoint whose host is no IP address is left out and
// named in the error, the others' backends returned with it.
func TestFromEndpoints(t *testing.T) {
	ep := func(host string, port uint16, w uint32) membership.Endpoint {
		e := membership.Endpoint{Host: host, Port: port, Weight: w}
		e.Name = e.HostPort()
		return e
	}
	bs, err := FromEndpoints([]membership.Endpoint{
		ep("198.18.0.1", 8080, 1),
		ep("198.18.0.2", 8080, 0),
		ep("2001:db8::1", 8080, 1),
		ep("::ffff:198.18.0.3", 8080, 3),
		ep("198.18.0.4", 8080, 0),
		ep("198.18.0.4", 9090, 1),
		ep("198.18.0.5", 8080, 2),
		ep("198.18.0.5", 9090, 0),
		ep("198.18.0.6", 0, 1),
		ep("web-0", 8080, 1),
		ep("fe80::1%eth0", 8080, 1),
	})
	var got []string
	for _, b := range bs {
		if b.HW != nil {
			t.Errorf("%v: HW %v", b.Addr, b.HW)
		}
		got = append(got, fmt.Sprintf("%v=%d", b.Addr, b.Weight))
	}
	const want = "198.18.0.1=1 198.18.0.2=0 198.18.0.3=3 198.18.0.4=1 198.18.0.5=2 198.18.0.6=1 2001:db8::1=1"
	if strings.Join(got, " ") != want {
		t.Errorf("backends %q, want %q", strings.Join(got, " "), want)
	}
	if !errors.Is(err, ErrBackend) || !strings.HasPrefix(err.Error(), "xdpmaglev: ") ||
		!strings.Contains(err.Error(), `"web-0:8080"`) || !strings.Contains(err.Error(), `"[fe80::1%eth0]:8080"`) {
		t.Errorf("error %v, want ErrBackend naming web-0:8080 and [fe80::1%%eth0]:8080", err)
	}
	if bs, err := FromEndpoints(nil); err != nil || len(bs) != 0 {
		t.Errorf("no endpoints: %v, %v", bs, err)
	}
}
