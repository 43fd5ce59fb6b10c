package xdpmaglev

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
)

// TestValidate: Options.Validate and ServiceOptions.Validate refuse what
// Load and SetService refuse, with the same errors, and pass the zero
// values (the defaults), with no LB and no privilege.
func TestValidate(t *testing.T) {
	for _, o := range []Options{{}, {M: 251, ConntrackSize: DefaultConntrackSize, MaxServices: 1, MaxBackends: 1 << 24, FloodRate: -1}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, o := range []Options{{M: 8}, {ConntrackSize: -1}, {MaxServices: 1<<24 + 1}, {MaxBackends: -2}, {FloodRate: -2}, {Mode: AttachNone}} {
		if err := o.Validate(); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: %v, want ErrOptions", o, err)
		}
	}

	svc := Service{VIP: netip.MustParseAddrPort("198.18.0.1:80"), Proto: TCP}
	b := func(s string) Backend { return Backend{Addr: netip.MustParseAddr(s), Weight: 1} }
	good := []struct {
		o  ServiceOptions
		bs []Backend
	}{
		{ServiceOptions{}, nil},
		{ServiceOptions{M: 251}, []Backend{b("10.0.0.1"), b("2001:db8::1")}},
		{ServiceOptions{Forward: ForwardIPIP}, []Backend{b("10.0.0.1")}},
		{ServiceOptions{Forward: ForwardGUE, Source: netip.MustParseAddr("10.9.0.0"), SourceBits: 16, SecondChance: time.Minute}, []Backend{b("10.0.0.1")}},
	}
	for _, c := range good {
		if err := c.o.Validate(svc, c.bs); err != nil {
			t.Errorf("%+v %v: %v", c.o, c.bs, err)
		}
	}
	bad := []struct {
		svc  Service
		o    ServiceOptions
		bs   []Backend
		want error
	}{
		{Service{VIP: netip.MustParseAddrPort("198.18.0.1:0"), Proto: TCP}, ServiceOptions{}, nil, ErrService},
		{Service{VIP: svc.VIP, Proto: 1}, ServiceOptions{}, nil, ErrService},
		{svc, ServiceOptions{M: 100}, nil, maglev.ErrSize},
		{svc, ServiceOptions{Conntrack: 7}, nil, ErrService},
		{svc, ServiceOptions{Forward: 9}, nil, ErrService},
		{svc, ServiceOptions{SecondChance: time.Minute}, nil, ErrService},
		{svc, ServiceOptions{Forward: ForwardGUE, SecondChance: -time.Second}, nil, ErrService},
		{svc, ServiceOptions{Forward: ForwardIPIP, Source: netip.MustParseAddr("2001:db8::3")}, nil, ErrService},
		{svc, ServiceOptions{Forward: ForwardIPIP, Source: netip.MustParseAddr("10.9.0.1"), SourceBits: 8}, nil, ErrService},
		{svc, ServiceOptions{Forward: ForwardIPIP, SourceBits: MaxSourceBits + 1}, nil, ErrService},
		{svc, ServiceOptions{}, []Backend{b("10.0.0.1"), b("::ffff:10.0.0.1")}, ErrBackend},
		{svc, ServiceOptions{}, []Backend{{}}, ErrBackend},
		{svc, ServiceOptions{Forward: ForwardGUE}, []Backend{b("2001:db8::1")}, ErrBackend},
	}
	for _, c := range bad {
		if err := c.o.Validate(c.svc, c.bs); !errors.Is(err, c.want) {
			t.Errorf("%v %+v %v: %v, want %v", c.svc, c.o, c.bs, err, c.want)
		}
	}
}
