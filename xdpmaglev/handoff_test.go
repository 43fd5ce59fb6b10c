package xdpmaglev

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestHandoffJSON: a handoff's JSON form gives back the handoff, its
// slots packed; parseService reads what Service.String writes; every bad
// form is refused with ErrHandoff.
func TestHandoffJSON(t *testing.T) {
	for _, s := range []Service{{VIP: vip(false, 80), Proto: TCP}, {VIP: vip(true, 443), Proto: UDP}} {
		got, err := parseService(s.String())
		if err != nil || got != s {
			t.Errorf("parseService(%q) = %v, %v", s.String(), got, err)
		}
	}
	for _, bad := range []string{"", "tcp", "sctp/198.19.0.1:80", "tcp/198.19.0.1", "tcp/198.19.0.1:0", "udp/[2001:db8::1%eth0]:53"} {
		if _, err := parseService(bad); !errors.Is(err, ErrService) {
			t.Errorf("parseService(%q): %v, want ErrService", bad, err)
		}
	}

	bs := encapBackends(4, false)
	bs[2].Down = true
	bs[3].Weight = 3
	h := Handoff{Service: Service{VIP: vip(false, 80), Proto: TCP}, M: 251, Backends: bs,
		Hops: []netip.Addr{bs[0].Addr, bs[1].Addr}, Slots: make([]uint32, 251), Until: time.Date(2026, 12, 7, 4, 0, 0, 5, time.UTC)}
	h.Slots[0], h.Slots[7], h.Slots[250] = 2, 1, 2
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var back Handoff
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !reflect.DeepEqual(back, h) {
		t.Errorf("round trip:\n got %+v\nwant %+v\n%s", back, h, b)
	}
	// Without second hops: no slots, no until.
	plain := Handoff{Service: h.Service, M: 251, Backends: bs[:2]}
	if b, err = json.Marshal(plain); err != nil || strings.Contains(string(b), "slots") || strings.Contains(string(b), "until") {
		t.Errorf("a handoff without second hops: %s, %v", b, err)
	}
	back = Handoff{}
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, plain) {
		t.Errorf("round trip without second hops: %+v, %v", back, err)
	}
	// A large table with one slot in four moved packs into about two
	// octets a moved slot.
	big := Handoff{Service: h.Service, M: 65537, Backends: bs, Hops: []netip.Addr{bs[1].Addr}, Slots: make([]uint32, 65537), Until: h.Until}
	for i := 0; i < len(big.Slots); i += 4 {
		big.Slots[i] = 1
	}
	if b, err = json.Marshal(big); err != nil || len(b) > 3*65537/4+500 {
		t.Errorf("a table of 65,537 slots, a quarter moved: %d octets, %v", len(b), err)
	}

	// A backend written as an IPv4-mapped IPv6 address is its IPv4 one,
	// Down or not; twice so, it is refused.
	mapped := Handoff{Service: h.Service, M: 251, Backends: []Backend{{Addr: netip.MustParseAddr("::ffff:198.18.64.10"), Weight: 1, Down: true}, bs[1]}}
	if tbl, err := mapped.table(); err != nil || tbl.Index("198.18.64.10") < 0 || tbl.Counts()[tbl.Index("198.18.64.10")] != 0 {
		t.Errorf("a mapped Down backend: %v", err)
	}
	mapped.Backends = append(mapped.Backends, bs[0])
	if _, err := mapped.table(); !errors.Is(err, ErrHandoff) {
		t.Errorf("a backend twice, once mapped: %v", err)
	}

	good := string(must(json.Marshal(h)))
	slots := regexp.MustCompile(`"slots":"[^"]*"`)
	if !slots.MatchString(good) {
		t.Fatalf("no slots in %s", good)
	}
	for _, c := range []struct{ name, from, to string }{
		{"version", `"v":1`, `"v":2`},
		{"service", `"service":"` + h.Service.String() + `"`, `"service":"tcp/198.19.0.1"`},
		{"size", `"m":251`, `"m":250`},
		{"backend", `"addr":"198.18.64.10"`, `"addr":"198.18.64.999"`},
		{"a backend twice", `"addr":"198.18.64.11"`, `"addr":"198.18.64.10"`},
		{"second hops' size", `"prev_m":251`, `"prev_m":252`},
		{"no hops", `"hops":["198.18.64.10","198.18.64.11"],`, ``},
		{"slots past the end", `"prev_m":251`, `"prev_m":241`},
		{"a hop out of range", `"hops":["198.18.64.10","198.18.64.11"]`, `"hops":["198.18.64.10"]`},
		{"a hop invalid", `"hops":["198.18.64.10"`, `"hops":["fe80::1%eth0"`},
		{"a hop of 0", "", `"slots":"AAA="`},
		{"slots cut short", "", `"slots":"gA=="`},
		{"slots not base64", "", `"slots":"!"`},
	} {
		bad := slots.ReplaceAllString(good, c.to)
		if c.from != "" {
			if !strings.Contains(good, c.from) {
				t.Fatalf("%s: %s has no %s", c.name, good, c.from)
			}
			bad = strings.Replace(good, c.from, c.to, 1)
		}
		var got Handoff
		if err := json.Unmarshal([]byte(bad), &got); !errors.Is(err, ErrHandoff) {
			t.Errorf("%s: %v, want ErrHandoff\n%s", c.name, err, bad)
		}
	}
	var got Handoff
	if err := got.UnmarshalJSON([]byte("{")); !errors.Is(err, ErrHandoff) {
		t.Errorf("not JSON: %v, want ErrHandoff", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// handoffStep is one change of TestHandoff's service.
type handoffStep struct {
	name string
	bs   []Backend
}

// TestHandoff: a load balancer (the first) goes through changes of a GUE
// service with second chance; at each, two fresh load balancers take its
// handoff, one from before the change (another table: they make the
// change themselves) and one from after (the same table), through the
// JSON form, and every packet of 300 flows leaves all three the same,
// byte for byte, second hops and all; a third, with no handoff, sends
// the moved flows without one (the test measures). The window's end
// carries over with the same table; a second hop that is no backend of
// the new table is none.
func TestHandoff(t *testing.T) {
	packetsOnly(t)
	f := newFixtureNet(t)
	for _, c := range []struct {
		v6 bool
		ct ConntrackMode
	}{{false, ConntrackOff}, {true, ConntrackOff}, {false, ConntrackOn}} {
		t.Run(fmt.Sprintf("v6=%v/conntrack=%v", c.v6, c.ct), func(t *testing.T) {
			first, before, after, none := fixtureLB(t, f, Options{FloodRate: -1}), fixtureLB(t, f, Options{FloodRate: -1}), fixtureLB(t, f, Options{FloodRate: -1}), fixtureLB(t, f, Options{FloodRate: -1})
			svc := Service{VIP: vip(c.v6, 80), Proto: TCP}
			opts := ServiceOptions{Forward: ForwardGUE, Source: source(c.v6), SecondChance: time.Minute, Conntrack: c.ct, M: 1021}
			all := encapBackends(5, c.v6)
			down := slices.Clone(all[:4])
			down[1].Down = true
			heavy := slices.Clone(all[:4])
			heavy[0].Weight = 3
			steps := []handoffStep{
				{"three", all[:3]}, {"a fourth joins", all[:4]}, {"one down", down}, {"the down one back, a fifth", all},
				{"one leaves", all[1:5]}, {"weights", heavy},
			}
			port := uint16(1000)
			controlled := false
			for _, st := range steps {
				hBefore := viaJSON(t, first.Handoffs(), "before")
				if err := first.SetService(svc, st.bs, opts); err != nil {
					t.Fatal(err)
				}
				hAfter := viaJSON(t, first.Handoffs(), "after")
				for _, x := range []struct {
					lb *LB
					hs []Handoff
				}{{before, hBefore}, {after, hAfter}, {none, nil}} {
					_ = x.lb.DeleteService(svc) // new again: it takes a handoff
					if err := x.lb.SetHandoffs(x.hs); err != nil {
						t.Fatal(err)
					}
					if err := x.lb.SetService(svc, st.bs, opts); err != nil {
						t.Fatal(err)
					}
					want := ""
					if len(x.hs) > 0 {
						want = x.hs[0].From
					}
					if got := from(x.lb, svc); got != want {
						t.Errorf("%s: SecondHops' from %q, want %q", st.name, got, want)
					}
				}
				if got, want := after.Handoffs(), first.Handoffs(); !sameHandoffs(got, want, 0) {
					t.Errorf("%s: the handoff taken with the same table gives back\n%+v\nnot\n%+v", st.name, got, want)
				}
				withHop, differs := 0, 0
				for range 300 {
					port++
					in := packet(client(c.v6, port), svc.VIP, 6, []byte("data"))
					v, want := f.run(t, first.objs.XdpMaglev, in)
					if v != xdpTX {
						t.Fatalf("%s: port %d: verdict %d", st.name, port, v)
					}
					if bytes.Contains(want, []byte{'M', 'G', 1, 1}) {
						withHop++
					}
					for name, lb := range map[string]*LB{"before": before, "after": after} {
						if v, got := f.run(t, lb.objs.XdpMaglev, in); v != xdpTX || !bytes.Equal(got, want) {
							t.Fatalf("%s: port %d, the LB with the handoff from %s the change: verdict %d\n got % x\nwant % x", st.name, port, name, v, got, want)
						}
					}
					if _, got := f.run(t, none.objs.XdpMaglev, in); !bytes.Equal(got, want) {
						differs++
					}
				}
				if st.name == "three" && withHop != 0 {
					t.Errorf("%s: %d flows with a second hop before any change", st.name, withHop)
				}
				if st.name != "three" && (withHop == 0 || differs != withHop) {
					t.Errorf("%s: %d flows with a second hop, %d otherwise without the handoff: the test shows nothing", st.name, withHop, differs)
				}
				controlled = controlled || differs > 0
			}
			if !controlled {
				t.Error("no flow needed the handoff")
			}
		})
	}

	// A handoff for a service without second chance, or of another
	// service, is not taken; a bad one is refused whole.
	lb := fixtureLB(t, f, Options{FloodRate: -1})
	svc := Service{VIP: vip(false, 81), Proto: TCP}
	h := Handoff{Service: svc, M: 251, Backends: encapBackends(3, false), From: "peer"}
	other := h
	other.Service = Service{VIP: vip(false, 82), Proto: TCP}
	if err := lb.SetHandoffs([]Handoff{h, other}); err != nil {
		t.Fatal(err)
	}
	if err := lb.SetService(svc, encapBackends(4, false), ServiceOptions{Forward: ForwardGUE, Source: source(false), M: 251}); err != nil {
		t.Fatal(err)
	}
	if until, from := lb.SecondHops(svc); from != "" || !until.IsZero() || len(lb.Handoffs()) != 0 {
		t.Errorf("a service without second chance took %q (until %v), hands off %v", from, until, lb.Handoffs())
	}
	bad := h
	bad.Slots, bad.Hops = make([]uint32, 251), []netip.Addr{h.Backends[0].Addr}
	bad.Slots[3] = 2
	for _, b := range []Handoff{bad, {Service: svc, M: 100, Backends: h.Backends}, {Service: Service{}, M: 251}} {
		if err := lb.SetHandoffs([]Handoff{h, b}); !errors.Is(err, ErrHandoff) {
			t.Errorf("%+v: %v, want ErrHandoff", b, err)
		}
	}
}

// from is the From of the handoff svc took.
func from(lb *LB, svc Service) string {
	_, f := lb.SecondHops(svc)
	return f
}

// viaJSON returns hs through their JSON form, each From from.
func viaJSON(t *testing.T, hs []Handoff, from string) []Handoff {
	t.Helper()
	b, err := json.Marshal(hs)
	if err != nil {
		t.Fatal(err)
	}
	var out []Handoff
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		out[i].From = from
	}
	return out
}

// sameHandoffs reports whether a and b are the same but for From, their
// Untils at most slack apart.
func sameHandoffs(a, b []Handoff, slack time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.From, y.From = "", ""
		if d := x.Until.Sub(y.Until); d > slack || d < -slack || x.Until.IsZero() != y.Until.IsZero() {
			return false
		}
		x.Until, y.Until = time.Time{}, time.Time{}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// TestSecondChanceNoChange: setting a service's backends again, or
// changing its options but not its table, is no change: the window of
// its second hops does not start again.
func TestSecondChanceNoChange(t *testing.T) {
	lb := newLB(t, Options{})
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	opts := ServiceOptions{Forward: ForwardGUE, Source: source(false), SecondChance: time.Minute, M: 251}
	for _, n := range []int{3, 4} {
		if err := lb.SetService(svc, encapBackends(n, false), opts); err != nil {
			t.Fatal(err)
		}
	}
	h := lb.Handoffs()
	if len(h) != 1 || h[0].Until.IsZero() || h[0].Slots == nil {
		t.Fatalf("after a change: %+v", h)
	}
	time.Sleep(10 * time.Millisecond)
	opts2 := opts
	opts2.GUEPort = 6081
	for _, o := range []ServiceOptions{opts, opts2} {
		if err := lb.SetService(svc, encapBackends(4, false), o); err != nil {
			t.Fatal(err)
		}
		if got := lb.Handoffs(); !sameHandoffs(got, h, 0) {
			t.Errorf("the same table again (GUE port %d): %+v\nwas %+v", o.GUEPort, got, h)
		}
	}
}

// TestHandoffPinned: an LB that adopts pinned maps reads the second hops
// back, and hands off what the LB before it did.
func TestHandoffPinned(t *testing.T) {
	dir := bpffs(t)
	opts := pinOpts(dir)
	lb := load(t, "", opts)
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	so := ServiceOptions{Forward: ForwardGUE, Source: source(false), SecondChance: time.Minute, Conntrack: ConntrackOff}
	for _, n := range []int{3, 4} {
		if err := lb.SetService(svc, encapBackends(n, false), so); err != nil {
			t.Fatal(err)
		}
	}
	want := lb.Handoffs()
	if len(want) != 1 || want[0].Slots == nil {
		t.Fatalf("before: %+v", want)
	}
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}
	lb = load(t, "", opts)
	// The pinned window's end is in whole seconds of the monotonic clock,
	// rounded up.
	if got := lb.Handoffs(); !sameHandoffs(got, want, 2*time.Second) {
		t.Errorf("adopted:\n%+v\nwant\n%+v", got, want)
	}
}

// FuzzHandoff: any bytes a peer or a state file may hold: a JSON form
// is read, or refused with ErrHandoff, never a panic; one read writes
// back the same handoff.
func FuzzHandoff(f *testing.F) {
	bs := encapBackends(3, false)
	h := Handoff{Service: Service{VIP: vip(false, 80), Proto: TCP}, M: 251, Backends: bs, Hops: []netip.Addr{bs[1].Addr}, Slots: make([]uint32, 251), Until: time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)}
	h.Slots[3], h.Slots[200] = 1, 1
	f.Add(must(json.Marshal(h)))
	f.Add([]byte(`{"v":1,"service":"udp/[2001:db8::1]:53","m":7,"backends":[{"addr":"2001:db8::11","weight":0}]}`))
	f.Add([]byte(`{"v":1,"service":"tcp/198.19.0.1:80","m":7,"backends":[],"hops":["198.18.0.1"],"prev_m":7,"slots":"AAEFAQ=="}`))
	f.Add([]byte(`{"v":1,"service":"tcp/198.19.0.1:80","m":7,"backends":null,"hops":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Handoff
		if err := json.Unmarshal(b, &h); err != nil {
			if !errors.Is(err, ErrHandoff) && json.Valid(b) {
				t.Fatalf("%q: %v, not ErrHandoff", b, err)
			}
			return
		}
		again, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var h2 Handoff
		if err := json.Unmarshal(again, &h2); err != nil || !sameHandoffs([]Handoff{h}, []Handoff{h2}, 0) {
			t.Fatalf("%q read, written %s, read again %+v, %v", b, again, h2, err)
		}
	})
}
