package grpcmaglev

// Tests of the picker as the balancer builds it (recordFailuresLocked,
// rebuildLocked, newPickerLocked) from the child states endpointsharding
// reports. The children's pickers here answer like pick_first's: a READY
// one returns its stored result, a failed one its stored error.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/maglevlb/maglev"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
)

// storedPicker answers every pick with a stored result or error, as
// pick_first's picker does, and counts its picks.
type storedPicker struct {
	err   error
	picks atomic.Int64
}

func (p *storedPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	p.picks.Add(1)
	return balancer.PickResult{}, p.err
}

// fakeChild is one endpoint's state, for childStates.
type fakeChild struct {
	weight   uint32 // the endpoint's weight attribute; 0 for none
	state    connectivity.State
	picker   *storedPicker
	exitIdle atomic.Int64
}

// testBalancer returns a balancer with no channel (it never publishes) and
// the given config, and n endpoints at 10.0.0.i:80 whose states are set
// with update.
func testBalancer(t testing.TB, n int, cfg *lbConfig) (*maglevBalancer, []*fakeChild) {
	t.Helper()
	b := &maglevBalancer{cfg: cfg, records: resolver.NewEndpointMap[*record]()}
	kids := make([]*fakeChild, n)
	for i := range kids {
		kids[i] = &fakeChild{state: connectivity.Ready, picker: &storedPicker{}}
	}
	return b, kids
}

// update gives b the children's current states and returns the picker it
// builds.
func update(t testing.TB, b *maglevBalancer, kids []*fakeChild) *picker {
	t.Helper()
	setChildren(b, kids)
	return publish(t, b)
}

// setChildren sets b.children to the children's current states, as
// endpointsharding reports them.
func setChildren(b *maglevBalancer, kids []*fakeChild) {
	b.children = b.children[:0]
	for i, k := range kids {
		e := resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr(i)}}}
		if k.weight > 0 {
			e = weight.Set(e, weight.EndpointInfo{Weight: k.weight})
		}
		b.children = append(b.children, endpointsharding.ChildState{
			Endpoint: e,
			State:    balancer.State{ConnectivityState: k.state, Picker: k.picker},
			ExitIdle: func() { k.exitIdle.Add(1) },
		})
	}
}

// publish does what publishLocked does with b.children, and returns the
// picker.
func publish(t testing.TB, b *maglevBalancer) *picker {
	t.Helper()
	if err := b.rebuildLocked(b.recordFailuresLocked()); err != nil {
		t.Fatal(err)
	}
	p, _ := b.newPickerLocked()
	return p.(*picker)
}

func addr(i int) string { return fmt.Sprintf("10.0.%d.%d:80", i/256, i%256) }

// index returns the endpoint number of a table name made by addr.
func index(t testing.TB, name string) int {
	t.Helper()
	var a, b int
	if _, err := fmt.Sscanf(name, "10.0.%d.%d:80", &a, &b); err != nil {
		t.Fatalf("name %q: %v", name, err)
	}
	return a*256 + b
}

func defaultConfig() *lbConfig { return &lbConfig{header: "x-user", size: maglev.DefaultSize} }

func pickKey(p *picker, key string) error {
	_, err := p.Pick(balancer.PickInfo{Ctx: WithKey(context.Background(), key)})
	return err
}

// TestPickOwnerStates: a READY owner's picker answers; a CONNECTING owner
// queues the pick; an IDLE owner queues it and is asked to connect once per
// picker; a TRANSIENT_FAILURE endpoint leaves the table.
func TestPickOwnerStates(t *testing.T) {
	b, kids := testBalancer(t, 4, defaultConfig())
	p := update(t, b, kids)
	all := p.table
	key := "k"
	owner := index(t, all.Lookup(key))
	if err := pickKey(p, key); err != nil || kids[owner].picker.picks.Load() != 1 {
		t.Fatalf("READY owner: err %v, owner's picks %d", err, kids[owner].picker.picks.Load())
	}

	kids[owner].state = connectivity.Connecting
	p = update(t, b, kids)
	if p.table != all {
		t.Fatal("a CONNECTING endpoint changed the table")
	}
	for range 3 {
		if err := pickKey(p, key); err != balancer.ErrNoSubConnAvailable {
			t.Fatalf("CONNECTING owner: err %v; want ErrNoSubConnAvailable", err)
		}
	}

	kids[owner].state = connectivity.Idle
	p = update(t, b, kids)
	for range 3 {
		if err := pickKey(p, key); err != balancer.ErrNoSubConnAvailable {
			t.Fatalf("IDLE owner: err %v; want ErrNoSubConnAvailable", err)
		}
	}
	if n := kids[owner].exitIdle.Load(); n != 1 {
		t.Fatalf("IDLE owner asked to connect %d times by 3 picks; want 1", n)
	}

	kids[owner].state = connectivity.TransientFailure
	kids[owner].picker = &storedPicker{err: errors.New("connection refused")}
	p = update(t, b, kids)
	// Out of service, by maglev.Table.Without: only its slots moved.
	want, err := all.Without(addr(owner))
	if err != nil {
		t.Fatal(err)
	}
	if p.table.Diff(want) != 0 || p.table.Counts()[p.table.Index(addr(owner))] != 0 {
		t.Fatalf("table after TRANSIENT_FAILURE: %d slots differ from the table without the failed endpoint", p.table.Diff(want))
	}
	next := index(t, p.table.Lookup(key))
	if err := pickKey(p, key); err != nil || next == owner || kids[next].picker.picks.Load() != 1 {
		t.Fatalf("key of a failed owner: err %v, new owner %d (old %d)", err, next, owner)
	}
}

// TestPickNoUsable: with every endpoint failed, picks fail with
// ErrNoUsableEndpoint wrapping the error of the endpoint that failed last;
// with none at all, with the resolver's.
func TestPickNoUsable(t *testing.T) {
	b, kids := testBalancer(t, 3, defaultConfig())
	errs := []error{errors.New("first"), errors.New("second"), errors.New("third")}
	for _, i := range []int{1, 2, 0} { // endpoint 0 fails last
		kids[i].state = connectivity.TransientFailure
		kids[i].picker = &storedPicker{err: errs[i]}
		update(t, b, kids)
	}
	p := update(t, b, kids)
	for _, ctx := range []context.Context{WithKey(context.Background(), "k"), context.Background()} {
		_, err := p.Pick(balancer.PickInfo{Ctx: ctx})
		if !errors.Is(err, ErrNoUsableEndpoint) || !errors.Is(err, errs[0]) {
			t.Fatalf("every endpoint failed: err %v; want ErrNoUsableEndpoint wrapping %v", err, errs[0])
		}
	}

	b.children = nil
	b.resolverErr = errors.New("no such host")
	if err := b.rebuildLocked(b.recordFailuresLocked()); err != nil {
		t.Fatal(err)
	}
	pp, state := b.newPickerLocked()
	_, err := pp.Pick(balancer.PickInfo{Ctx: context.Background()})
	if state != connectivity.TransientFailure || !errors.Is(err, ErrNoUsableEndpoint) || !errors.Is(err, b.resolverErr) {
		t.Fatalf("no endpoints: state %v, err %v", state, err)
	}
}

// TestPickNoKey: an RPC with no key goes to a READY endpoint; with none
// READY but one connecting it queues, asking IDLE ones to connect.
func TestPickNoKey(t *testing.T) {
	b, kids := testBalancer(t, 3, defaultConfig())
	kids[0].state, kids[1].state = connectivity.Connecting, connectivity.TransientFailure
	p := update(t, b, kids)
	for range 20 {
		if _, err := p.Pick(balancer.PickInfo{Ctx: context.Background()}); err != nil {
			t.Fatal(err)
		}
	}
	if n := kids[2].picker.picks.Load(); n != 20 {
		t.Fatalf("the only READY endpoint got %d of 20 keyless picks", n)
	}
	kids[2].state = connectivity.Idle
	p = update(t, b, kids)
	if _, err := p.Pick(balancer.PickInfo{Ctx: context.Background()}); err != balancer.ErrNoSubConnAvailable {
		t.Fatalf("none READY, one CONNECTING: err %v", err)
	}
	if kids[2].exitIdle.Load() != 1 {
		t.Fatal("a keyless pick with none READY did not ask the IDLE endpoint to connect")
	}
}

// TestRebuildOnlyOnUsableChange: the table is rebuilt when the usable set,
// a weight or the config changes, and not for other state changes; a failed
// endpoint is taken out of service (maglev.Table.Without: only its slots
// move) and rejoins only when READY, taking back exactly its slots.
func TestRebuildOnlyOnUsableChange(t *testing.T) {
	b, kids := testBalancer(t, 5, defaultConfig())
	t0 := update(t, b, kids).table
	kids[1].state = connectivity.Connecting
	kids[2].state = connectivity.Idle
	if update(t, b, kids).table != t0 {
		t.Fatal("rebuilt for CONNECTING and IDLE")
	}
	kids[3].state = connectivity.TransientFailure
	t1 := update(t, b, kids).table
	want, err := t0.Without(addr(3))
	if err != nil {
		t.Fatal(err)
	}
	if t1 == t0 || t1.Diff(want) != 0 || t0.Diff(t1) != t0.Counts()[t0.Index(addr(3))] {
		t.Fatalf("the failed endpoint is not out of service alone: %d slots differ from t0.Without, %d moved", t1.Diff(want), t0.Diff(t1))
	}
	kids[3].state = connectivity.Connecting // back, its health check pending
	if update(t, b, kids).table != t1 {
		t.Fatal("rebuilt for a failed endpoint that is not READY yet")
	}
	kids[3].state = connectivity.Ready
	t2 := update(t, b, kids).table
	if t2 == t1 || t2.Diff(t0) != 0 {
		t.Fatal("the endpoint's return did not restore the first table")
	}
	kids[2].weight = 3
	t3 := update(t, b, kids).table
	if t3 == t2 || t3.Counts()[t3.Index(addr(2))] < 2*t3.Counts()[t3.Index(addr(1))] {
		t.Fatal("a new weight did not rebuild the table with it")
	}
	b.cfg = &lbConfig{header: "x-user", size: maglev.DefaultSize, seed: 7}
	if t4 := update(t, b, kids).table; t4 == t3 || t4.Diff(t3) == 0 {
		t.Fatal("a new seed did not rebuild the table")
	}
}

// TestPickAllocs: a pick with a WithKey key or no key allocates nothing; one
// reading a single header value allocates only grpc's copy of the values.
func TestPickAllocs(t *testing.T) {
	b, kids := testBalancer(t, 10, defaultConfig())
	p := update(t, b, kids)
	for _, c := range []struct {
		name string
		ctx  context.Context
		want float64
	}{
		{"WithKey", WithKey(context.Background(), "user-42"), 0},
		{"no key", context.Background(), 0},
		{"header", metadata.AppendToOutgoingContext(context.Background(), "x-user", "user-42"), 1},
	} {
		info := balancer.PickInfo{FullMethodName: "/svc/Method", Ctx: c.ctx}
		if got := testing.AllocsPerRun(1000, func() { _, _ = p.Pick(info) }); got != c.want {
			t.Errorf("%s: %v allocations a pick; want %v", c.name, got, c.want)
		}
	}
}

var sinkResult balancer.PickResult

// BenchmarkPick measures one pick through the picker the balancer builds,
// over READY endpoints whose pickers return a stored result (as
// pick_first's READY picker does): the key, one hash, one table index.
// With a balanceFactor (factor=1.25) it is the pick and its Done: the
// lease's Acquire and Release, and the Done closure. One pick is in flight
// at a time, so every key goes to its owner.
//
// Each case runs three times in a row, with the pick's metrics recorded
// into: nothing (metrics=none, a picker with no channelMetrics, as before
// the policy had metrics); grpc's MetricsRecorder of a channel without a
// stats handler (metrics=off: what a client that does not turn the metrics
// on gets); that of a channel with grpc's OpenTelemetry plugin and the
// policy's metrics on, into an SDK MeterProvider (metrics=on).
func BenchmarkPick(b *testing.B) {
	recorders := []struct {
		name    string
		metrics *channelMetrics
	}{
		{"none", nil},
		{"off", newChannelMetrics(channelRecorder(b))},
		{"on", newChannelMetrics(otelRecorder(b))},
	}
	for _, n := range []int{10, 1000} {
		for _, factor := range []float64{0, 1.25} {
			cfg := defaultConfig()
			cfg.factor = factor
			bal, kids := testBalancer(b, n, cfg)
			p := update(b, bal, kids)
			for _, c := range []struct {
				name string
				ctx  context.Context
			}{
				{"WithKey", WithKey(context.Background(), "user-1234567")},
				{"header", metadata.AppendToOutgoingContext(context.Background(), "x-user", "user-1234567")},
				{"header2", metadata.AppendToOutgoingContext(context.Background(), "x-user", "user-1234567", "x-user", "eu")},
				{"nokey", context.Background()},
			} {
				for _, rec := range recorders {
					b.Run(fmt.Sprintf("n=%d/factor=%v/%s/metrics=%s", n, factor, c.name, rec.name), func(b *testing.B) {
						p.metrics = rec.metrics
						b.ReportAllocs()
						info := balancer.PickInfo{FullMethodName: "/svc/Method", Ctx: c.ctx}
						var r balancer.PickResult
						for b.Loop() {
							r, _ = p.Pick(info)
							if r.Done != nil {
								r.Done(balancer.DoneInfo{})
							}
						}
						sinkResult = r
					})
				}
			}
		}
	}
}

// BenchmarkPickParallel is BenchmarkPick's WithKey case from every
// GOMAXPROCS goroutine at once, each with a key of its own: with a
// balanceFactor, the picks share the channel's count of RPCs in flight.
func BenchmarkPickParallel(b *testing.B) {
	for _, factor := range []float64{0, 1.25} {
		b.Run(fmt.Sprintf("n=10/factor=%v/WithKey", factor), func(b *testing.B) {
			cfg := defaultConfig()
			cfg.factor = factor
			bal, kids := testBalancer(b, 10, cfg)
			p := update(b, bal, kids)
			var id atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				info := balancer.PickInfo{FullMethodName: "/svc/Method", Ctx: WithKey(context.Background(), fmt.Sprintf("user-%d", id.Add(1)))}
				for pb.Next() {
					r, _ := p.Pick(info)
					if r.Done != nil {
						r.Done(balancer.DoneInfo{})
					}
				}
			})
		})
	}
}

var sinkPicker *picker

// BenchmarkRebuild measures what one endpoint's failure or return costs the
// balancer, off the pick path: a maglev.Table.Without of the table over
// every endpoint at the default size, the Diff for the log line, and the
// new picker.
func BenchmarkRebuild(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			bal, kids := testBalancer(b, n, defaultConfig())
			update(b, bal, kids)
			b.ReportAllocs()
			var p *picker
			for i := 0; b.Loop(); i++ {
				kids[0].state = []connectivity.State{connectivity.TransientFailure, connectivity.Ready}[i%2]
				p = update(b, bal, kids)
			}
			sinkPicker = p
		})
	}
}

// BenchmarkStateUpdate measures what a state change that keeps the table
// costs the balancer: one endpoint going between READY and CONNECTING, as
// on a reconnection, takes the records' update, the check that the usable
// set is unchanged, and a new picker, with no rebuild. The children's
// states are built once, so that only the balancer's work is measured.
func BenchmarkStateUpdate(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			bal, kids := testBalancer(b, n, defaultConfig())
			t0 := update(b, bal, kids).table
			b.ReportAllocs()
			var p *picker
			for i := 0; b.Loop(); i++ {
				bal.children[0].State.ConnectivityState = []connectivity.State{connectivity.Connecting, connectivity.Ready}[i%2]
				p = publish(b, bal)
			}
			if p.table != t0 {
				b.Fatal("a state change rebuilt the table")
			}
			sinkPicker = p
		})
	}
}
