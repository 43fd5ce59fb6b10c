package pool

import (
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool/pooltest"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// The tests of this file run the pool on a fake data plane
// (pooltest.DataPlane): no privileges, namespace or XDP program.

var _ DataPlane = (*pooltest.DataPlane)(nil)

var webSvc = xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}

func addr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}) }

// sets returns the backends of the updates of calls from the i-th on,
// one "addr=weight[/down] ..." line per update.
func sets(calls []pooltest.Call, i int) []string {
	var out []string
	for _, c := range calls[i:] {
		line := c.Op + ":"
		for _, b := range c.Backends {
			line += " " + b.Addr.String() + "=" + string(rune('0'+b.Weight))
			if b.Down {
				line += "/down"
			}
		}
		out = append(out, line)
	}
	return out
}

// await waits up to 5 s for cond.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("no %s in 5 s", what)
}

// TestApplyOnFake: a reload's members reach the data plane once, an
// unchanged list writes nothing, and an update the data plane refuses is
// kept in the status and tried again a second later, until it succeeds.
func TestApplyOnFake(t *testing.T) {
	dp := &pooltest.DataPlane{}
	p := New(dp, config.Service{Name: "web", Svc: webSvc, Timeout: time.Minute}, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	if err := p.SetMembers(map[netip.Addr]Member{addr(1): {Weight: 1}, addr(2): {Weight: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMembers(map[netip.Addr]Member{addr(1): {Weight: 1}, addr(2): {Weight: 2}}); err != nil {
		t.Fatal(err)
	}
	if got, want := sets(dp.Calls(), 0), []string{"set: 198.18.0.1=1 198.18.0.2=2"}; !slices.Equal(got, want) {
		t.Fatalf("updates %q, want %q (the same members twice: one update)", got, want)
	}
	if p.Updates() != 1 || p.Table() == nil || p.Status().Digest == "" {
		t.Errorf("after one update: %d updates, table %v, status %+v", p.Updates(), p.Table(), p.Status())
	}

	refused := errors.New("refused")
	dp.FailSet(refused)
	if err := p.SetMembers(map[netip.Addr]Member{addr(1): {Weight: 1}}); !errors.Is(err, refused) {
		t.Fatalf("SetMembers with the data plane refusing: %v", err)
	}
	if st := p.Status(); st.Error != "refused" || len(st.Backends) != 2 {
		t.Errorf("status after a refused update: %+v, want its error and the 2 backends the data plane holds", st)
	}
	n := len(dp.Calls())
	dp.FailSet(nil)
	await(t, "retry", func() bool { return p.Status().Error == "" })
	if got := sets(dp.Calls(), n); len(got) != 1 || got[0] != "set: 198.18.0.1=1 198.18.0.2=0" {
		t.Errorf("the retry's updates %q, want 198.18.0.2 draining", got)
	}
}

// TestDrainOnFake: a drained backend stays in the service with weight 0
// for the drain timeout, then leaves it; undrained it is live again; an
// address that is no backend changes nothing.
func TestDrainOnFake(t *testing.T) {
	dp := &pooltest.DataPlane{}
	p := New(dp, config.Service{Name: "web", Svc: webSvc, Timeout: 200 * time.Millisecond}, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	if err := p.SetMembers(map[netip.Addr]Member{addr(1): {Weight: 1}, addr(2): {Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Drain(addr(9), true); ok || err != nil || len(dp.Calls()) != 1 {
		t.Fatalf("Drain of no backend: %v, %v, %d updates", ok, err, len(dp.Calls()))
	}
	start := time.Now()
	if ok, err := p.Drain(addr(2), true); !ok || err != nil {
		t.Fatalf("Drain: %v, %v", ok, err)
	}
	state := func(a netip.Addr) string {
		for _, b := range p.Status().Backends {
			if b.Addr == a.String() {
				return b.State
			}
		}
		return ""
	}
	if s := state(addr(2)); s != "draining" {
		t.Errorf("drained backend's state %q, want draining", s)
	}
	await(t, "drain timeout", func() bool { return len(dp.Calls()) == 3 })
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("the drain ended after %v, before its timeout", took)
	}
	if s := state(addr(2)); s != "drained" {
		t.Errorf("state after the drain timeout %q, want drained", s)
	}
	if ok, err := p.Drain(addr(2), false); !ok || err != nil {
		t.Fatalf("undrain: %v, %v", ok, err)
	}
	want := []string{"set: 198.18.0.1=1 198.18.0.2=1", "set: 198.18.0.1=1 198.18.0.2=0", "set: 198.18.0.1=1", "set: 198.18.0.1=1 198.18.0.2=1"}
	if got := sets(dp.Calls(), 0); !slices.Equal(got, want) {
		t.Errorf("updates %q, want %q", got, want)
	}
}

// TestApplyAllOnFake: new pools are applied in one batch; if the batch
// fails, each pool applies on its own, and a pool the data plane refuses
// too keeps its error.
func TestApplyAllOnFake(t *testing.T) {
	dns := xdpmaglev.Service{Proto: xdpmaglev.UDP, VIP: netip.MustParseAddrPort("198.19.0.2:53")}
	pools := func(dp *pooltest.DataPlane) []*Pool {
		var ps []*Pool
		for i, s := range []xdpmaglev.Service{webSvc, dns} {
			p := New(dp, config.Service{Svc: s, Timeout: time.Minute}, nil, slog.New(slog.DiscardHandler))
			t.Cleanup(p.Close)
			p.Stage(map[netip.Addr]Member{addr(i + 1): {Weight: 1}})
			ps = append(ps, p)
		}
		return ps
	}
	dp := &pooltest.DataPlane{}
	if err := ApplyAll(dp, pools(dp)); err != nil {
		t.Fatal(err)
	}
	if got, want := sets(dp.Calls(), 0), []string{"batch: 198.18.0.1=1", "batch: 198.18.0.2=1"}; !slices.Equal(got, want) {
		t.Errorf("updates %q, want %q", got, want)
	}

	dp = &pooltest.DataPlane{}
	dp.FailBatch(xdpmaglev.ErrFull)
	if err := ApplyAll(dp, pools(dp)); err != nil {
		t.Fatal(err)
	}
	if got, want := sets(dp.Calls(), 0), []string{"batch: 198.18.0.1=1", "batch: 198.18.0.2=1", "set: 198.18.0.1=1", "set: 198.18.0.2=1"}; !slices.Equal(got, want) {
		t.Errorf("the batch refused: updates %q, want %q", got, want)
	}
	if got := dp.Services(); len(got) != 2 {
		t.Errorf("services %v, want both", got)
	}

	dp = &pooltest.DataPlane{}
	dp.FailBatch(xdpmaglev.ErrFull)
	dp.FailSet(xdpmaglev.ErrFull)
	ps := pools(dp)
	if err := ApplyAll(dp, ps); !errors.Is(err, xdpmaglev.ErrFull) {
		t.Fatalf("every update refused: %v, want ErrFull", err)
	}
	for _, p := range ps {
		if p.Status().Error == "" {
			t.Errorf("%v: no error in its status", p.Service())
		}
	}
}

// TestHealthOnFake: the backends the health check has down reach the
// data plane Down, the Announcer is told, and with every backend down
// the pool fails open on the last table it applied.
func TestHealthOnFake(t *testing.T) {
	dp := &pooltest.DataPlane{}
	h, an := &fakeHealth{down: map[netip.Addr]bool{}}, &fakeAnnouncer{}
	p := New(dp, config.Service{Name: "web", Svc: webSvc, Timeout: time.Minute}, an, slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	p.SetHealth(h)
	if err := p.SetMembers(map[netip.Addr]Member{addr(1): {Weight: 1}, addr(2): {Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	h.down[addr(1)] = true
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	if !an.healthy || an.why != "1 backend in service" {
		t.Errorf("one backend up: told healthy %v, %q", an.healthy, an.why)
	}
	h.down[addr(2)] = true
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	want := []string{"set: 198.18.0.1=1 198.18.0.2=1", "set: 198.18.0.1=1/down 198.18.0.2=1"}
	if got := sets(dp.Calls(), 0); !slices.Equal(got, want) {
		t.Errorf("updates %q, want %q (failing open: the last table kept)", got, want)
	}
	if !p.Status().FailOpen || !h.failOpen || an.healthy {
		t.Errorf("every backend down: status fail open %v, health told %v, announced healthy %v", p.Status().FailOpen, h.failOpen, an.healthy)
	}
}

// TestDownBySource: a member its source gives Down (a Kubernetes node out
// of service) is Down in the data plane whatever the health check says,
// without a check too, and failing open keeps it Down; given back, it
// comes back up.
func TestDownBySource(t *testing.T) {
	dp := &pooltest.DataPlane{}
	h, an := &fakeHealth{down: map[netip.Addr]bool{}}, &fakeAnnouncer{}
	p := New(dp, config.Service{Name: "web", Svc: webSvc, Timeout: time.Minute}, an, slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	members := func(down2 bool) map[netip.Addr]Member {
		return map[netip.Addr]Member{addr(1): {Weight: 1}, addr(2): {Weight: 1, Down: down2}}
	}
	if err := p.SetMembers(members(true)); err != nil { // no health check yet
		t.Fatal(err)
	}
	p.SetHealth(h)
	h.down[addr(1)] = true // every backend not given Down is down: failing open
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	if !p.Status().FailOpen {
		t.Errorf("the one backend not given Down down by its check: not failing open")
	}
	if err := p.SetMembers(members(false)); err != nil {
		t.Fatal(err)
	}
	want := []string{"set: 198.18.0.1=1 198.18.0.2=1/down", "set: 198.18.0.1=1/down 198.18.0.2=1"}
	if got := sets(dp.Calls(), 0); !slices.Equal(got, want) {
		t.Errorf("updates %q, want %q", got, want)
	}
	if p.Status().FailOpen {
		t.Errorf("one backend up by its check: still failing open")
	}
}
