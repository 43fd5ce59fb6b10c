package grpcmaglev

// Tests of keyed picks with a balanceFactor, through the picker the
// balancer builds from child states (see picker_test.go).

import (
	"context"
	"errors"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
)

func boundedConfig(factor float64) *lbConfig {
	return &lbConfig{header: "x-user", size: maglev.DefaultSize, factor: factor}
}

// candidatesOf returns the endpoint numbers of key's candidates in t, in
// order.
func candidatesOf(tb testing.TB, t *maglev.Table, key string) []int {
	tb.Helper()
	var cs []int
	for i := range t.Candidates(key) {
		cs = append(cs, index(tb, t.Backends()[i]))
	}
	return cs
}

// holdPick picks key and returns the endpoint whose picker answered and the
// result, whose Done the caller calls.
func holdPick(t *testing.T, p *picker, kids []*fakeChild, key string) (int, balancer.PickResult) {
	t.Helper()
	before := make([]int64, len(kids))
	for i, k := range kids {
		before[i] = k.picker.picks.Load()
	}
	res, err := p.Pick(balancer.PickInfo{Ctx: WithKey(context.Background(), key)})
	if err != nil {
		t.Fatalf("pick %q: %v", key, err)
	}
	if res.Done == nil {
		t.Fatalf("pick %q: no Done callback", key)
	}
	for i, k := range kids {
		if k.picker.picks.Load() != before[i] {
			return i, res
		}
	}
	t.Fatalf("pick %q reached no endpoint's picker", key)
	return -1, res
}

func TestParseBalanceFactor(t *testing.T) {
	cfg, err := parseConfig([]byte(`{"balanceFactor": 1.25}`))
	if err != nil || cfg.factor != 1.25 {
		t.Fatalf("parseConfig: factor %v, err %v", cfg.factor, err)
	}
	if cfg, err := parseConfig([]byte(`{}`)); err != nil || cfg.factor != 0 {
		t.Fatalf("parseConfig({}): factor %v, err %v; want 0", cfg.factor, err)
	}
}

// TestBoundedPickSpills: picks held in flight fill a key's candidates in
// Candidates order, each up to its capacity ceil(1.25 × L/4); Done
// releases them.
func TestBoundedPickSpills(t *testing.T) {
	b, kids := testBalancer(t, 4, boundedConfig(1.25))
	p := update(t, b, kids)
	if p.bounded == nil || p.bounded.Table() != p.table {
		t.Fatal("the picker has no Bounded over its table")
	}
	const key = "hot"
	c := candidatesOf(t, p.table, key)
	// L = 1, 2, 3: capacity 1 each, so one pick per candidate; L = 4:
	// capacity 2, so the owner again; L = 5: capacity 2, the next.
	want := []int{c[0], c[1], c[2], c[0], c[1]}
	var held []balancer.PickResult
	for n, w := range want {
		got, res := holdPick(t, p, kids, key)
		if got != w {
			t.Fatalf("pick %d of %q with %d in flight went to endpoint %d; want %d (candidates %v)", n+1, key, n, got, w, c)
		}
		held = append(held, res)
	}
	if s := p.bounded.Stats(); s.InFlight != int64(len(want)) || s.Spilled != 3 {
		t.Fatalf("stats %+v; want %d in flight, 3 spilled", s, len(want))
	}
	for _, res := range held {
		res.Done(balancer.DoneInfo{})
	}
	if n := p.bounded.Stats().InFlight; n != 0 {
		t.Fatalf("%d in flight after every Done", n)
	}
	// With nothing in flight, the key is back at its owner.
	if got, res := holdPick(t, p, kids, key); got != c[0] {
		t.Fatalf("pick with nothing in flight went to %d; want the owner %d", got, c[0])
	} else {
		res.Done(balancer.DoneInfo{})
	}
}

// TestBoundedPickNotReady: a chosen candidate that is not READY, the key's
// owner or a later candidate, makes the pick queue and its lease is
// released; an IDLE one is asked to connect. A child picker's error also
// releases the lease.
func TestBoundedPickNotReady(t *testing.T) {
	b, kids := testBalancer(t, 4, boundedConfig(1.25))
	const key = "hot"
	c := candidatesOf(t, update(t, b, kids).table, key)

	kids[c[0]].state = connectivity.Connecting
	p := update(t, b, kids)
	if err := pickKey(p, key); err != balancer.ErrNoSubConnAvailable {
		t.Fatalf("owner CONNECTING: err %v; want ErrNoSubConnAvailable", err)
	}
	if n := p.bounded.Stats().InFlight; n != 0 {
		t.Fatalf("a queued pick left %d in flight", n)
	}

	// The owner READY and holding one RPC: the next pick's candidate is
	// c[1], which is IDLE.
	kids[c[0]].state = connectivity.Ready
	kids[c[1]].state = connectivity.Idle
	p = update(t, b, kids)
	_, res := holdPick(t, p, kids, key)
	for range 3 {
		if err := pickKey(p, key); err != balancer.ErrNoSubConnAvailable {
			t.Fatalf("spill target IDLE: err %v; want ErrNoSubConnAvailable", err)
		}
	}
	if n := kids[c[1]].exitIdle.Load(); n != 1 {
		t.Fatalf("IDLE spill target asked to connect %d times; want 1", n)
	}
	if n := p.bounded.Stats().InFlight; n != 1 {
		t.Fatalf("%d in flight; want the 1 held", n)
	}
	res.Done(balancer.DoneInfo{})

	// A READY child whose picker fails: the error is returned and the
	// lease released.
	kids[c[1]].state = connectivity.Ready
	boom := errors.New("boom")
	kids[c[0]].picker.err = boom
	p = update(t, b, kids)
	if err := pickKey(p, key); !errors.Is(err, boom) {
		t.Fatalf("child picker failing: err %v", err)
	}
	if n := p.bounded.Stats().InFlight; n != 0 {
		t.Fatalf("a failed pick left %d in flight", n)
	}
}

// TestBoundedRebuild: each picker acquires on its own table, through
// counts the channel keeps across rebuilds: the endpoints that stay keep
// their in-flight counts; RPCs picked before a rebuild release into them;
// a picker older than the rebuild still places RPCs on its own table, in
// the same counts; a state change that keeps the table keeps the picker's
// Bounded; a changed factor starts new counts, and factor 0 has none.
func TestBoundedRebuild(t *testing.T) {
	b, kids := testBalancer(t, 5, boundedConfig(1.25))
	const key = "hot"
	p0 := update(t, b, kids)
	c := candidatesOf(t, p0.table, key)
	e0, r0 := holdPick(t, p0, kids, key)
	e1, r1 := holdPick(t, p0, kids, key)
	if e0 != c[0] || e1 != c[1] {
		t.Fatalf("held picks at %d, %d; want %d, %d", e0, e1, c[0], c[1])
	}

	gone := c[len(c)-1]
	kids[gone].state = connectivity.TransientFailure
	p1 := update(t, b, kids)
	if p1.table == p0.table || p1.bounded.Table() != p1.table || p0.bounded.Table() != p0.table {
		t.Fatal("after the rebuild, a picker's Bounded is not over its own table")
	}
	loadsOf := func(bd *bounded.Picker) map[string]int64 {
		loads := map[string]int64{}
		for _, l := range bd.Loads(nil) {
			loads[l.Backend] = l.InFlight
		}
		return loads
	}
	if loads := loadsOf(p1.bounded); loads[addr(c[0])] != 1 || loads[addr(c[1])] != 1 || p1.bounded.Stats().InFlight != 2 {
		t.Fatalf("after the rebuild: loads %v, %d in flight; want 1 at %s and %s", loads, p1.bounded.Stats().InFlight, addr(c[0]), addr(c[1]))
	}
	// The old picker still picks from its own table, and its RPC is
	// counted with the others: L = 3 gives each of 5 candidates capacity
	// 1, so the key's third candidate in p0's table takes it.
	e2, r2 := holdPick(t, p0, kids, key)
	if e2 != c[2] || p1.bounded.Stats().InFlight != 3 || loadsOf(p1.bounded)[addr(c[2])] != 1 {
		t.Fatalf("pick through the old picker went to %d; want %d, counted in the channel's 3 in flight (%d, loads %v)", e2, c[2], p1.bounded.Stats().InFlight, loadsOf(p1.bounded))
	}
	for _, r := range []balancer.PickResult{r0, r1, r2} {
		r.Done(balancer.DoneInfo{})
	}
	for _, l := range p1.bounded.Loads(nil) {
		if l.InFlight != 0 {
			t.Fatalf("after the picks' Done: %+v", l)
		}
	}

	kids[c[0]].state = connectivity.Connecting
	if p := update(t, b, kids); p.table != p1.table || p.bounded != p1.bounded {
		t.Fatal("a state change that keeps the table made a new Bounded")
	}
	kids[c[0]].state = connectivity.Ready
	_, r3 := holdPick(t, update(t, b, kids), kids, key)
	b.cfg = boundedConfig(2)
	p2 := update(t, b, kids)
	if p2.bounded.Factor() != 2 || p2.bounded.Table() != p2.table || p2.bounded.Stats().InFlight != 0 {
		t.Fatalf("a new factor: factor %v, %d in flight; want new counts at factor 2 over the table", p2.bounded.Factor(), p2.bounded.Stats().InFlight)
	}
	r3.Done(balancer.DoneInfo{}) // released into the old counts
	if n := p2.bounded.Stats().InFlight; n != 0 {
		t.Fatalf("an RPC picked before the new factor changed its counts: %d in flight", n)
	}
	b.cfg = boundedConfig(0)
	if p3 := update(t, b, kids); p3.bounded != nil || pickKey(p3, key) != nil {
		t.Fatal("factor 0 left a Bounded")
	}
}

// TestBoundedPickAllocs: with a factor, a WithKey pick and its Done
// allocate one Done closure; a keyless pick nothing.
func TestBoundedPickAllocs(t *testing.T) {
	b, kids := testBalancer(t, 10, boundedConfig(1.25))
	p := update(t, b, kids)
	for _, c := range []struct {
		name string
		ctx  context.Context
		want float64
	}{
		{"WithKey", WithKey(context.Background(), "user-42"), 1},
		{"no key", context.Background(), 0},
	} {
		info := balancer.PickInfo{FullMethodName: "/svc/Method", Ctx: c.ctx}
		got := testing.AllocsPerRun(1000, func() {
			res, err := p.Pick(info)
			if err != nil {
				t.Fatal(err)
			}
			if res.Done != nil {
				res.Done(balancer.DoneInfo{})
			}
		})
		if got != c.want {
			t.Errorf("%s: %v allocations a pick; want %v", c.name, got, c.want)
		}
	}
	if n := p.bounded.Stats().InFlight; n != 0 {
		t.Fatalf("%d in flight after every Done", n)
	}
}
