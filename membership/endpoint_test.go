package membership_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/membership"
)

func TestHostPort(t *testing.T) {
	for _, tt := range []struct {
		e    membership.Endpoint
		want string
	}{
		{membership.Endpoint{Host: "10.0.0.1", Port: 80}, "10.0.0.1:80"},
		{membership.Endpoint{Host: "2001:db8::1", Port: 8080}, "[2001:db8::1]:8080"},
		{membership.Endpoint{Host: "web.test", Port: 443}, "web.test:443"},
		{membership.Endpoint{Host: "web.test"}, "web.test"},
		{membership.Endpoint{Host: "10.0.0.1"}, "10.0.0.1"},
		{membership.Endpoint{Host: "2001:db8::1"}, "[2001:db8::1]"},
	} {
		if got := tt.e.HostPort(); got != tt.want {
			t.Errorf("%+v: HostPort() = %q, want %q", tt.e, got, tt.want)
		}
	}
}

func TestIP(t *testing.T) {
	for _, tt := range []struct {
		host, port string
		ip         string // "" for none
		ap         string // "" for none
	}{
		{"10.0.0.1", "80", "10.0.0.1", "10.0.0.1:80"},
		{"10.0.0.1", "0", "10.0.0.1", ""},
		{"2001:db8::1", "80", "2001:db8::1", "[2001:db8::1]:80"},
		{"::ffff:10.0.0.3", "80", "10.0.0.3", "10.0.0.3:80"},
		{"fe80::1%eth0", "80", "", ""},
		{"web.test", "80", "", ""},
		{"", "80", "", ""},
		{"010.0.0.1", "80", "", ""},
	} {
		var port uint16
		_, _ = fmt.Sscan(tt.port, &port)
		e := membership.Endpoint{Host: tt.host, Port: port}
		ip, ok := e.IP()
		if got := map[bool]string{true: ip.String(), false: ""}[ok]; got != tt.ip {
			t.Errorf("%q: IP() = %v, %t; want %q", tt.host, ip, ok, tt.ip)
		}
		ap, ok := e.AddrPort()
		if got := map[bool]string{true: ap.String(), false: ""}[ok]; got != tt.ap {
			t.Errorf("%q port %d: AddrPort() = %v, %t; want %q", tt.host, port, ap, ok, tt.ap)
		}
	}
	e := membership.Endpoint{Host: "2001:db8::1", Port: 80}
	if n := testing.AllocsPerRun(100, func() { _, _ = e.AddrPort() }); n != 0 {
		t.Errorf("AddrPort allocates %v times", n)
	}
}

// names renders a list as "NAME=WEIGHT@HOST:PORT ...".
func names(eps []membership.Endpoint) string {
	s := make([]string, len(eps))
	for i, e := range eps {
		s[i] = fmt.Sprintf("%s=%d@%s", e.Name, e.Weight, e.HostPort())
	}
	return strings.Join(s, " ")
}

func TestCanonical(t *testing.T) {
	ep := func(name, host string, port uint16, w uint32) membership.Endpoint {
		return membership.Endpoint{Name: name, Host: host, Port: port, Weight: w}
	}
	for _, tt := range []struct {
		name string
		in   []membership.Endpoint
		want string
	}{
		{"empty", nil, ""},
		{"sorted by name", []membership.Endpoint{ep("b:80", "b", 80, 1), ep("a:80", "a", 80, 1), ep("c:80", "c", 80, 2)},
			"a:80=1@a:80 b:80=1@b:80 c:80=2@c:80"},
		{"no name: named HOST:PORT", []membership.Endpoint{ep("", "2001:db8::1", 80, 1), ep("", "10.0.0.1", 80, 1), ep("", "web", 0, 1)},
			"10.0.0.1:80=1@10.0.0.1:80 [2001:db8::1]:80=1@[2001:db8::1]:80 web=1@web"},
		{"a duplicate name: the greatest weight", []membership.Endpoint{ep("a:80", "a", 80, 0), ep("b:80", "b", 80, 1), ep("a:80", "a", 80, 3), ep("a:80", "a", 80, 1)},
			"a:80=3@a:80 b:80=1@b:80"},
		{"a duplicate name, equal weights: the first", []membership.Endpoint{ep("a", "10.0.0.2", 80, 1), ep("a", "10.0.0.1", 80, 1)},
			"a=1@10.0.0.2:80"},
		{"drained twice: drained", []membership.Endpoint{ep("a:80", "a", 80, 0), ep("a:80", "a", 80, 0)},
			"a:80=0@a:80"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := membership.Canonical(slices.Clone(tt.in))
			if names(got) != tt.want {
				t.Errorf("got %q, want %q", names(got), tt.want)
			}
		})
	}

	// The names and weights kept do not depend on the input's order.
	r := rand.New(rand.NewPCG(1, 2))
	var in []membership.Endpoint
	for i := range 200 {
		in = append(in, ep(fmt.Sprintf("10.0.%d.%d:80", i%7, i%13), "h", 80, uint32(r.IntN(4))))
	}
	want := membership.Canonical(slices.Clone(in))
	key := func(eps []membership.Endpoint) string {
		s := make([]string, len(eps))
		for i, e := range eps {
			s[i] = fmt.Sprintf("%s=%d", e.Name, e.Weight)
		}
		return strings.Join(s, " ")
	}
	if len(want) != 7*13 {
		t.Fatalf("%d endpoints kept of 91 names", len(want))
	}
	for range 20 {
		r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		if got := membership.Canonical(slices.Clone(in)); key(got) != key(want) {
			t.Fatalf("another input order keeps %q, want %q", key(got), key(want))
		}
	}
}

func TestEqual(t *testing.T) {
	base := []membership.Endpoint{
		{Name: "10.0.0.1:80", Host: "10.0.0.1", Port: 80, Weight: 1},
		{Name: "10.0.0.2:80", Host: "10.0.0.2", Port: 80, Weight: 1, Meta: map[string]string{"zone": "a"}},
	}
	change := map[string]func(eps []membership.Endpoint){
		"a name":     func(eps []membership.Endpoint) { eps[0].Name = "a" },
		"a host":     func(eps []membership.Endpoint) { eps[0].Host = "10.0.0.9" },
		"a port":     func(eps []membership.Endpoint) { eps[0].Port = 81 },
		"a weight":   func(eps []membership.Endpoint) { eps[0].Weight = 0 },
		"a meta":     func(eps []membership.Endpoint) { eps[1].Meta = map[string]string{"zone": "b"} },
		"a meta key": func(eps []membership.Endpoint) { eps[0].Meta = map[string]string{"zone": ""} },
	}
	clone := func() []membership.Endpoint {
		eps := slices.Clone(base)
		for i := range eps {
			if eps[i].Meta != nil {
				eps[i].Meta = map[string]string{"zone": "a"}
			}
		}
		return eps
	}
	if !membership.Equal(base, clone()) {
		t.Error("a copy is not equal")
	}
	empty := clone()
	empty[0].Meta = map[string]string{}
	if !membership.Equal(base, empty) {
		t.Error("an empty Meta differs from a nil one")
	}
	if !membership.Equal(nil, []membership.Endpoint{}) {
		t.Error("nil differs from an empty list")
	}
	if membership.Equal(base, base[:1]) {
		t.Error("a shorter list is equal")
	}
	for what, f := range change {
		eps := clone()
		f(eps)
		if membership.Equal(base, eps) {
			t.Errorf("a change of %s: still equal", what)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = membership.Equal(base, empty) }); n != 0 {
		t.Errorf("Equal allocates %v times", n)
	}
}

// TestArguments: the watchers' bad arguments are *ConfigErrors naming
// them, and start nothing.
func TestArguments(t *testing.T) {
	set := func([]membership.Endpoint) error { return nil }
	var ce *membership.ConfigError
	if w, err := membership.Watch(t.Context(), nil, set, membership.Options{}); w != nil || !errors.As(err, &ce) || ce.Field != "src" {
		t.Errorf("Watch with a nil source = %v, %v; want a ConfigError for src", w, err)
	}
	for _, hp := range []string{"", "web.test", ":80", "web.test:", "web.test:http", "web.test:0", "web.test:65536"} {
		if w, err := membership.WatchDNS(t.Context(), hp, set, membership.DNSOptions{Interval: time.Second}); w != nil || !errors.Is(err, membership.ErrInvalidConfig) {
			t.Errorf("WatchDNS(%q) = %v, %v; want ErrInvalidConfig", hp, w, err)
		}
	}
	if w, err := membership.WatchSRV(t.Context(), "", set, membership.DNSOptions{Interval: time.Second}); w != nil || !errors.Is(err, membership.ErrInvalidConfig) {
		t.Errorf("WatchSRV(\"\") = %v, %v; want ErrInvalidConfig", w, err)
	}
	// A negative interval (0 is the default) and a nil set: each a
	// *ConfigError naming the option or argument.
	if w, err := membership.WatchDNS(t.Context(), "web.test:80", set, membership.DNSOptions{Interval: -time.Second}); w != nil || !errors.As(err, &ce) || ce.Field != "Interval" {
		t.Errorf("WatchDNS interval -1s = %v, %v; want a ConfigError for Interval", w, err)
	}
	if w, err := membership.WatchDNS(t.Context(), "web.test:80", nil, membership.DNSOptions{Interval: time.Second}); w != nil || !errors.As(err, &ce) || ce.Field != "set" {
		t.Errorf("WatchDNS with nil set = %v, %v; want a ConfigError for set", w, err)
	}
	if !strings.HasPrefix(ce.Error(), "membership: invalid config: set: ") {
		t.Errorf("ConfigError %q", ce)
	}
}

// TestConfigErrorPackage: a ConfigError reported by another package
// (etcdmaglev, k8smaglev) starts with that package's name, and matches
// ErrInvalidConfig and its reason.
func TestConfigErrorPackage(t *testing.T) {
	reason := errors.New("empty Addr")
	var err error = &membership.ConfigError{Package: "etcdmaglev", Field: "Addr", Err: reason}
	if got, want := err.Error(), "etcdmaglev: invalid config: Addr: empty Addr"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, membership.ErrInvalidConfig) || !errors.Is(err, reason) {
		t.Errorf("%v matches not both ErrInvalidConfig and its reason", err)
	}
}

// idle is a source that never lists anything and returns when its context
// ends, as a source that cannot reach its server does.
type idle struct{}

func (idle) String() string { return "idle" }

func (idle) Run(ctx context.Context, _ func([]membership.Endpoint, int64)) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

// TestWatchContextEnds: Watch returns an error wrapping the context's as
// soon as its context ends before a first list, however that end races
// with Watch's own wait (a context already done on entry is the race's
// narrowest case: Watch hung in it when its context.AfterFunc had not yet
// run), and the source is stopped.
func TestWatchContextEnds(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 2000 {
		w, err := membership.Watch(done, idle{}, func([]membership.Endpoint) error { return nil }, membership.Options{})
		if w != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("try %d: Watch = %v, %v; want an error wrapping context.Canceled", i, w, err)
		}
	}
	// A context cancelled while Watch waits: the window between its Done
	// channel closing and its AfterFuncs being started is a few
	// instructions wide, so many tries, each cancelled from another
	// goroutine.
	for i := range 20000 {
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		w, err := membership.Watch(ctx, idle{}, func([]membership.Endpoint) error { return nil }, membership.Options{})
		if w != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("try %d: Watch = %v, %v; want an error wrapping context.Canceled", i, w, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := membership.Watch(ctx, idle{}, func([]membership.Endpoint) error { return nil }, membership.Options{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Watch with a deadline: %v", err)
	}
}
