package xdpmaglev

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// layoutHashes holds, for each LAYOUT_VERSION, the specHash of the maps
// of that version, as this test printed it when the version was made. A
// change to a map's type, key, value, flags or inner map changes the
// hash: raise LAYOUT_VERSION in bpf/maps.h, run go generate, and add the
// new version's hash here. Never change an old one: maps pinned by a
// release of that version are what it describes.
var layoutHashes = map[uint32]uint64{
	1: 0xee06cff7b08dbc9c,
	2: 0x1cb335221d20d9ef, // unreleased: made with second chance and the fast table lookup
	3: 0x19916d36771bf420, // unreleased: QUIC-LB (the services' configurations, server IDs, keys, the cache)
}

// TestLayoutVersion fails when the maps' layout changes and
// LAYOUT_VERSION does not, and checks that the hash sees a change of any
// map and none of the sizes the Options set.
func TestLayoutVersion(t *testing.T) {
	spec, err := loadMaglev()
	if err != nil {
		t.Fatal(err)
	}
	got := specHash(spec)
	want, ok := layoutHashes[layoutVersion]
	if !ok {
		t.Fatalf("LAYOUT_VERSION %d has no hash in layoutHashes: add %d: %#x", layoutVersion, layoutVersion, got)
	}
	if got != want {
		t.Fatalf("the maps' layout changed (specHash %#x, and LAYOUT_VERSION %d's is %#x): raise LAYOUT_VERSION in bpf/maps.h, run go generate, and add the new version's hash to layoutHashes", got, layoutVersion, want)
	}
	names := stateMaps(spec)
	var objs maglevObjects
	byName := objs.byName()
	for _, name := range names {
		if _, ok := byName[name]; !ok {
			t.Errorf("map %s is not in maglevMaps: it would not be pinned", name)
		}
	}
	if len(byName) != len(names) {
		t.Errorf("maglevMaps has %d maps, the spec %d state maps %v", len(byName), len(names), names)
	}
	for _, name := range names {
		for what, change := range map[string]func(*ebpf.MapSpec){
			"value size": func(ms *ebpf.MapSpec) { ms.ValueSize++ },
			"key size":   func(ms *ebpf.MapSpec) { ms.KeySize++ },
			"flags":      func(ms *ebpf.MapSpec) { ms.Flags ^= 1 << 30 },
			"type":       func(ms *ebpf.MapSpec) { ms.Type++ },
		} {
			s := spec.Copy()
			change(s.Maps[name])
			if specHash(s) == got {
				t.Errorf("map %s: a change of its %s leaves the hash", name, what)
			}
		}
		s := spec.Copy()
		s.Maps[name].MaxEntries++
		if specHash(s) != got {
			t.Errorf("map %s: a change of its size changes the hash", name)
		}
	}
	s := spec.Copy()
	s.Maps["tables"].InnerMap.ValueSize++
	if specHash(s) == got {
		t.Error("a change of the tables' inner map leaves the hash")
	}
}

// bpffs mounts a BPF filesystem of the test's own, unmounted at its end
// (after the LBs it served: cleanups run last first), and returns a pin
// directory in it.
func bpffs(t testing.TB) string {
	t.Helper()
	needBPF(t)
	mnt := t.TempDir()
	if err := unix.Mount("bpf", mnt, "bpf", 0, ""); err != nil {
		t.Fatalf("mounting a BPF filesystem: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the BPF filesystem: %v", err)
		}
	})
	return filepath.Join(mnt, "l4lb", "eth0")
}

// pinOpts are the Options of the tests' pinned LBs, without an interface
// and without a flood guard (the tests write hundreds of entries at once).
func pinOpts(dir string) Options {
	return Options{PinPath: dir, SourceMAC: lbMAC, Seed: 7, M: 1021, ConntrackSize: 1 << 12, MaxServices: 4, MaxBackends: 16, FloodRate: -1}
}

// load is Load, failing the test on an error; the LB is closed at the
// end of the test unless released before.
func load(t *testing.T, iface string, opts Options) *LB {
	t.Helper()
	lb, err := Load(iface, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() }) // nothing after Release or Close
	return lb
}

// idOf is a backend's id and cookie.
type idOf struct{ id, cookie uint32 }

// ids returns the id and cookie of each backend of svc, by address.
func ids(lb *LB, svc Service) map[netip.Addr]idOf {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	out := map[netip.Addr]idOf{}
	for a, b := range lb.services[svc].backends {
		out[a] = idOf{b.id, b.cookie}
	}
	return out
}

// forwardedTo runs a SYN from c to svc through the program and returns
// the destination MAC it left with.
func forwardedTo(t *testing.T, lb *LB, svc Service, c netip.AddrPort) string {
	t.Helper()
	v, out := run(t, lb, packet(c, svc.VIP, uint8(svc.Proto), nil))
	if v != xdpTX {
		t.Fatalf("flow from %v: verdict %d, want XDP_TX", c, v)
	}
	return net.HardwareAddr(out[0:6]).String()
}

// TestPinAdopt: an LB releases its pinned maps, a second adopts them.
// The services, tables, backend ids and cookies, counters and connection
// tracking carry over: a flow tracked before goes to the same backend
// after a change of backends that moves it by the table.
func TestPinAdopt(t *testing.T) {
	dir := bpffs(t)
	opts := pinOpts(dir)
	lb := load(t, "", opts)
	if lb.Adopted() {
		t.Fatal("a fresh directory: Adopted")
	}
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	udp := Service{VIP: vip(true, 53), Proto: UDP}
	bs := testBackends(1, 3, false)
	if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := lb.SetService(udp, testBackends(1, 2, true), ServiceOptions{M: 251}); err != nil {
		t.Fatal(err)
	}
	// A backend that left: its id is free, and its cookie must never come back.
	gone := testBackends(9, 1, false)[0]
	if err := lb.SetService(svc, append(slices.Clone(bs), gone), ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	goneID := ids(lb, svc)[gone.Addr]
	if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	const flows = 300
	before := map[uint16]string{}
	for p := range uint16(flows) {
		before[p] = forwardedTo(t, lb, svc, client(false, 20000+p))
	}
	st1, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	ids1, digest, udpDigest := ids(lb, svc), lb.Table(svc).Digest(), lb.Table(udp).Digest()
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}
	if err := lb.SetService(svc, bs, ServiceOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetService after Release: %v, want ErrClosed", err)
	}
	for _, name := range []string{layoutPin, "conntrack4", "tables", "backends"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("after Release: %v", err)
		}
	}

	lb = load(t, "", opts)
	if !lb.Adopted() {
		t.Fatal("the pinned maps were not adopted")
	}
	if got := lb.Services(); len(got) != 2 {
		t.Fatalf("adopted services %v, want 2", got)
	}
	if lb.Table(svc).Digest() != digest || lb.Table(udp).Digest() != udpDigest || lb.Table(udp).Size() != 251 {
		t.Fatal("the adopted tables differ from the released ones")
	}
	if got := ids(lb, svc); !mapsEqual(got, ids1) {
		t.Fatalf("adopted ids and cookies %v, released %v", got, ids1)
	}
	st2, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st2.Forwarded != st1.Forwarded || st2.Conntrack.Inserts != st1.Conntrack.Inserts || st2.Services[0].Packets != st1.Services[0].Packets ||
		!slices.Equal(st2.Services[0].Backends, st1.Services[0].Backends) {
		t.Fatalf("adopted counters %+v, released %+v", st2, st1)
	}

	// Twice the backends: about half the flows' slots move to the new
	// ones, and every tracked flow stays where it was.
	more := testBackends(1, 6, false)
	if err := lb.SetService(svc, more, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	after := ids(lb, svc)
	for a, id := range ids1 {
		if after[a] != id {
			t.Errorf("backend %v: id and cookie %v after SetService, %v before", a, after[a], id)
		}
	}
	for a, id := range after {
		if _, old := ids1[a]; !old && id.cookie <= goneID.cookie {
			t.Errorf("new backend %v has cookie %d, not above %d, the cookie of a backend that left before the restart", a, id.cookie, goneID.cookie)
		}
	}
	moved := 0
	for p := range uint16(flows) {
		c := client(false, 20000+p)
		if got := forwardedTo(t, lb, svc, c); got != before[p] {
			t.Fatalf("flow %v went to %s, and to %s before the restart", c, got, before[p])
		}
		if predict(t, lb, svc, more, c).String() != before[p] {
			moved++
		}
	}
	if moved < flows/4 {
		t.Fatalf("the new table moves %d of %d flows: too few to show conntrack kept them", moved, flows)
	}
	st3, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if hits := st3.Conntrack.Hits - st2.Conntrack.Hits; hits != flows {
		t.Fatalf("%d conntrack hits, want %d", hits, flows)
	}
	// New flows follow the new table.
	for p := range uint16(100) {
		c := client(false, 40000+p)
		if got, want := forwardedTo(t, lb, svc, c), predict(t, lb, svc, more, c).String(); got != want {
			t.Fatalf("new flow %v went to %s, the table names %s", c, got, want)
		}
	}
	t.Logf("adopted 2 services; %d of %d tracked flows kept their backend against the new table, all %d kept", moved, flows, flows)
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close, PinPath: %v, want it gone", err)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// setRecord rewrites the layout record pinned in dir.
func setRecord(t *testing.T, dir string, change func(*maglevLayoutRecord)) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, layoutPin), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	var rec maglevLayoutRecord
	if err := m.Lookup(uint32(0), &rec); err != nil {
		t.Fatal(err)
	}
	change(&rec)
	if err := m.Put(uint32(0), rec); err != nil {
		t.Fatal(err)
	}
}

// TestPinRefused: pins Load cannot adopt are refused with the error that
// says why, and changed nothing; Rebuild replaces them.
func TestPinRefused(t *testing.T) {
	dir := bpffs(t)
	opts := pinOpts(dir)
	svc := Service{VIP: vip(false, 80), Proto: TCP}

	notBPF := opts
	notBPF.PinPath = filepath.Join(t.TempDir(), "pins")
	if _, err := Load("", notBPF); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "not in a BPF filesystem") {
		t.Fatalf("PinPath outside bpffs: %v, want ErrOptions", err)
	}
	if _, err := os.Stat(notBPF.PinPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("PinPath outside bpffs was made: %v", err)
	}

	lb := load(t, "", opts)
	if err := lb.SetService(svc, testBackends(1, 3, false), ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("", opts); !errors.Is(err, ErrInUse) {
		t.Fatalf("a second LB on the same PinPath: %v, want ErrInUse", err)
	}
	if _, err := Detach(dir); !errors.Is(err, ErrInUse) {
		t.Fatalf("Detach while an LB holds it: %v, want ErrInUse", err)
	}
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		opts   func(*Options)
		record func(*maglevLayoutRecord)
		want   error
		text   string
	}{
		{"ConntrackSize", func(o *Options) { o.ConntrackSize = 1 << 13 }, nil, ErrPinned, "Options.ConntrackSize"},
		{"MaxBackends", func(o *Options) { o.MaxBackends = 32 }, nil, ErrPinned, "Options.MaxBackends"},
		{"MaxServices", func(o *Options) { o.MaxServices = 8 }, nil, ErrPinned, "Options.MaxServices"},
		{"version", nil, func(r *maglevLayoutRecord) { r.Version++ }, ErrLayout, fmt.Sprintf("layout version %d", layoutVersion+1)},
		{"half made", nil, func(r *maglevLayoutRecord) { r.Version = 0 }, ErrLayout, "half made"},
		{"maps", nil, func(r *maglevLayoutRecord) { r.Spec ^= 1 }, ErrLayout, "without raising LAYOUT_VERSION"},
		{"interface", nil, func(r *maglevLayoutRecord) { r.Ifindex = 7 }, ErrPinned, "made for interface index 7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := opts
			if c.opts != nil {
				c.opts(&o)
			}
			var saved maglevLayoutRecord
			if c.record != nil {
				setRecord(t, dir, func(r *maglevLayoutRecord) { saved = *r; c.record(r) })
				defer setRecord(t, dir, func(r *maglevLayoutRecord) { *r = saved })
			}
			_, err := Load("", o)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("Load: %v, want an error wrapping %v that says %q", err, c.want, c.text)
			}
		})
	}
	// Refused, nothing changed: the service is there still.
	lb = load(t, "", opts)
	if !lb.Adopted() || len(lb.Services()) != 1 {
		t.Fatalf("after the refusals: adopted %v, services %v", lb.Adopted(), lb.Services())
	}
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}

	// Rebuild: new, empty maps of the new size, pinned in the old ones' place.
	setRecord(t, dir, func(r *maglevLayoutRecord) { r.Version++ })
	o := opts
	o.Rebuild, o.ConntrackSize = true, 1<<13
	lb = load(t, "", o)
	if lb.Adopted() || len(lb.Services()) != 0 || lb.objs.Conntrack4.MaxEntries() != 1<<13 {
		t.Fatalf("rebuilt: adopted %v, services %v, conntrack of %d", lb.Adopted(), lb.Services(), lb.objs.Conntrack4.MaxEntries())
	}
	if err := lb.SetService(svc, testBackends(1, 2, false), ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}
	o.Rebuild = false
	if lb = load(t, "", o); !lb.Adopted() || len(lb.Services()) != 1 {
		t.Fatalf("after the rebuild: adopted %v, services %v", lb.Adopted(), lb.Services())
	}
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}

	// Pins that are not xdpmaglev's are left alone, Rebuild or not.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	other, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close() }()
	if err := other.Pin(filepath.Join(dir, "theirs")); err != nil {
		t.Fatal(err)
	}
	o.Rebuild = true
	if _, err := Load("", o); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "not pins of xdpmaglev") {
		t.Fatalf("Load on another's pins: %v, want ErrLayout", err)
	}
	if _, err := Detach(dir); !errors.Is(err, ErrLayout) {
		t.Fatalf("Detach of another's pins: %v, want ErrLayout", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "theirs")); err != nil {
		t.Fatalf("another's pin: %v", err)
	}
	if err := other.Unpin(); err != nil {
		t.Fatal(err)
	}
}

// TestDetachUnattached: Detach removes what a released LB left, and says
// what; twice, nothing.
func TestDetachUnattached(t *testing.T) {
	dir := bpffs(t)
	lb := load(t, "", pinOpts(dir))
	if err := lb.SetService(Service{VIP: vip(false, 80), Proto: TCP}, testBackends(1, 3, false), ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	unpinned := newLB(t, Options{})
	if err := unpinned.Release(); !errors.Is(err, ErrOptions) {
		t.Fatalf("Release without PinPath: %v, want ErrOptions", err)
	}
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}
	if err := lb.Release(); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
	removed, err := Detach(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := loadMaglev()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, name := range stateMaps(spec) {
		want = append(want, filepath.Join(dir, name))
	}
	slices.Sort(removed)
	if !slices.Equal(removed, want) {
		t.Fatalf("Detach removed %v, want %v", removed, want)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Detach, PinPath: %v", err)
	}
	if removed, err := Detach(dir); err != nil || removed != nil {
		t.Fatalf("Detach again: %v, %v; want nothing", removed, err)
	}
}
