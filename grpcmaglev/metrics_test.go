package grpcmaglev_test

// The policy's metrics as an operator gets them: real servers on loopback,
// a client channel with grpc's OpenTelemetry plugin recording into an
// OpenTelemetry SDK MeterProvider, and what its ManualReader reads.

import (
	"context"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
	"github.com/maglevlb/maglev/grpcmaglev"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/status"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// withOTel returns the dial option of grpc's OpenTelemetry plugin recording
// metrics into a new SDK MeterProvider, shut down at the end of the test,
// and the provider's reader.
func withOTel(t *testing.T, metrics *stats.MetricSet) (grpc.DialOption, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		if err := mp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return opentelemetry.DialOption(opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{
		MeterProvider: mp,
		Metrics:       metrics,
	}}), reader
}

// maglevMetrics is grpc's default metrics and the policy's, as a client
// turns them on.
func maglevMetrics() *stats.MetricSet {
	return opentelemetry.DefaultMetrics().Add(grpcmaglev.MetricPicks, grpcmaglev.MetricSpills, grpcmaglev.MetricRebuilds, grpcmaglev.MetricSlotsMoved)
}

// The policy's instruments, their units and their labels (sorted).
var instruments = map[string]struct {
	unit   string
	labels []string
}{
	"grpc.lb.maglev.picks":       {"{pick}", []string{"grpc.lb.maglev.outcome", "grpc.target"}},
	"grpc.lb.maglev.spills":      {"{pick}", []string{"grpc.target"}},
	"grpc.lb.maglev.rebuilds":    {"{rebuild}", []string{"grpc.target"}},
	"grpc.lb.maglev.slots_moved": {"{slot}", []string{"grpc.target"}},
}

var outcomes = []string{"ok", "no_key", "queued", "failed"}

// A reading holds the policy's counters: "picks/<outcome>", "spills",
// "rebuilds" and "slots_moved".
type reading map[string]int64

// read collects reader and returns the policy's counters. It fails the
// test unless each of the policy's instruments is a cumulative monotonic
// int64 sum with a description and its unit, in the plugin's scope, whose every data point has
// exactly the instrument's labels, grpc.target being target and the
// outcome one of the four; and unless grpc's own per-call metrics are there
// too (the plugin records them beside the policy's).
func read(t *testing.T, reader *sdkmetric.ManualReader, target string) reading {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	r := reading{}
	perCall := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			perCall = perCall || m.Name == "grpc.client.attempt.started"
			name, ok := strings.CutPrefix(m.Name, "grpc.lb.maglev.")
			if !ok {
				continue
			}
			inst, ok := instruments[m.Name]
			if !ok {
				t.Fatalf("unknown instrument %s", m.Name)
			}
			if sm.Scope.Name != "grpc-go" {
				t.Fatalf("%s: instrumentation scope %q; want the plugin's, grpc-go", m.Name, sm.Scope.Name)
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !sum.IsMonotonic || sum.Temporality != metricdata.CumulativeTemporality || m.Unit != inst.unit || m.Description == "" {
				t.Fatalf("%s: %T in %q (%q); want a cumulative monotonic int64 sum in %s, described", m.Name, m.Data, m.Unit, m.Description, inst.unit)
			}
			for _, dp := range sum.DataPoints {
				var keys []string
				for _, kv := range dp.Attributes.ToSlice() {
					keys = append(keys, string(kv.Key))
				}
				if !slices.Equal(keys, inst.labels) {
					t.Fatalf("%s: labels %q; want %q", m.Name, keys, inst.labels)
				}
				if v, _ := dp.Attributes.Value("grpc.target"); v.AsString() != target {
					t.Fatalf("%s: grpc.target %q; want %q", m.Name, v.AsString(), target)
				}
				key := name
				if o, ok := dp.Attributes.Value("grpc.lb.maglev.outcome"); ok {
					if !slices.Contains(outcomes, o.AsString()) {
						t.Fatalf("%s: outcome %q; want one of %q", m.Name, o.AsString(), outcomes)
					}
					key += "/" + o.AsString()
				}
				r[key] = dp.Value
			}
		}
	}
	if !perCall {
		t.Fatal("grpc.client.attempt.started is missing: the plugin recorded no per-call metric")
	}
	return r
}

// since returns the counters that changed from before to r, and by how
// much.
func (r reading) since(before reading) reading {
	d := reading{}
	for k, v := range r {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// checkDelta fails the test unless exactly the counters in want changed
// between before and after, each by its value in want.
func checkDelta(t *testing.T, what string, before, after, want reading) {
	t.Helper()
	if got := after.since(before); !maps.Equal(got, want) {
		t.Fatalf("%s: the counters changed by %v; want %v", what, got, want)
	}
}

// TestMetrics: through grpc's OpenTelemetry plugin, N keyed RPCs are N
// picks with outcome ok and RPCs with no key picks with outcome no_key;
// the channel's first table is no rebuild; each resolver update that adds
// or removes a server is one rebuild, which moves Diff slots of the
// library's tables before and after; each server that fails is one more;
// with every server down, each fail-fast RPC is one failed pick. Every
// data point carries the channel's target.
func TestMetrics(t *testing.T) {
	ss := startServers(t, 4, 0)
	otel, reader := withOTel(t, maglevMetrics())
	c := newClient(t, endpoints(ss[:3]), serviceConfig(`"requestHashHeader": "x-user"`, false), otel)
	target := c.cc.CanonicalTarget()
	ks := keys(300)
	t3 := tableOf(t, ss[:3])

	// Every key reaches its owner, so every server is READY; picks made
	// while one connected are queued.
	checkRouting(t, c, t3, ks, 1, viaWithKey, nil)
	before := read(t, reader, target)
	delete(before, "picks/queued")
	if want := (reading{"picks/ok": 300}); !maps.Equal(before, want) {
		t.Fatalf("after the first 300 RPCs: %v (queued picks aside); want %v", before, want)
	}

	before = read(t, reader, target)
	checkRouting(t, c, t3, ks, 1, viaHeader, nil)
	checkRouting(t, c, t3, ks[:50], 1, viaWithKey, nil)
	for range 20 {
		if _, err := c.call(context.Background(), "", viaNone); err != nil {
			t.Fatal(err)
		}
	}
	checkDelta(t, "350 keyed RPCs and 20 with no key", before, read(t, reader, target), reading{"picks/ok": 350, "picks/no_key": 20})

	// A resolver update adds a server: its keys wait for it to connect.
	t4 := tableOf(t, ss)
	before = read(t, reader, target)
	c.res.UpdateState(resolver.State{Endpoints: endpoints(ss)})
	checkRouting(t, c, t4, ks, 1, viaWithKey, nil)
	after := read(t, reader, target)
	queued := after["picks/queued"] - before["picks/queued"]
	delete(after, "picks/queued")
	delete(before, "picks/queued")
	checkDelta(t, "a server added, then 300 RPCs", before, after, reading{"picks/ok": 300, "rebuilds": 1, "slots_moved": int64(t3.Diff(t4))})
	t.Logf("adding a server: %d slots moved, %d picks queued", t3.Diff(t4), queued)

	// One removes a server.
	t3 = tableOf(t, ss[1:])
	before = read(t, reader, target)
	c.res.UpdateState(resolver.State{Endpoints: endpoints(ss[1:])})
	checkRouting(t, c, t3, ks, 1, viaWithKey, nil)
	checkDelta(t, "a server removed, then 300 RPCs", before, read(t, reader, target), reading{"picks/ok": 300, "rebuilds": 1, "slots_moved": int64(t4.Diff(t3))})

	// Every server stops: each failure is a rebuild, and, once the client
	// has seen them all, each fail-fast RPC is one failed pick.
	before = read(t, reader, target)
	for _, s := range ss[1:] {
		s.srv.Stop()
	}
	waitAllDown(t, c, ks[0])
	after = read(t, reader, target)
	d := after.since(before)
	if d["rebuilds"] != 3 || !slices.Contains(movesDown(t, ss[1:]), d["slots_moved"]) {
		t.Fatalf("3 servers down one by one: %d rebuilds, %d slots moved; want 3, one of %v (in some order)", d["rebuilds"], d["slots_moved"], movesDown(t, ss[1:]))
	}
	for i, k := range ks[:30] {
		v := []via{viaWithKey, viaHeader, viaNone}[i%3]
		if _, err := c.call(context.Background(), k, v); status.Code(err) != codes.Unavailable {
			t.Fatalf("key %q with every server down: %v; want Unavailable", k, err)
		}
	}
	checkDelta(t, "30 fail-fast RPCs with every server down", after, read(t, reader, target), reading{"picks/failed": 30})
}

// waitAllDown polls with fail-fast RPCs of key until one fails with the
// policy's error for no usable endpoint, failing the test after
// settleTimeout.
func waitAllDown(t *testing.T, c *client, key string) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		_, err := c.call(context.Background(), key, viaWithKey)
		if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "grpcmaglev: no usable endpoint") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v with every server down, a fail-fast RPC got %v", settleTimeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// movesDown returns, for every order in which the servers can fail one by
// one, the slots moved in all as each is taken out of service (the table
// of every server without those down, maglev.Table.Without).
func movesDown(t *testing.T, ss []*server) []int64 {
	var sums []int64
	var walk func(up, down []*server, moved int64)
	walk = func(up, down []*server, moved int64) {
		if len(up) == 0 {
			sums = append(sums, moved)
			return
		}
		from := tableDown(t, ss, down...)
		for _, s := range up {
			next := append(slices.Clone(down), s)
			walk(without(up, s), next, moved+int64(from.Diff(tableDown(t, ss, next...))))
		}
	}
	walk(ss, nil, 0)
	return sums
}

// TestMetricsSpills: with balanceFactor 1.25, RPCs of one hot key held at
// the servers one after another are placed as bounded.Picker places them,
// and the picks that went past the key's owner are spills, as many as the
// library's leases that spilled; each is a pick with outcome ok.
func TestMetricsSpills(t *testing.T) {
	const (
		n, held = 5, 12
		factor  = 1.25
		hot     = "hot-key"
	)
	ss := startServers(t, n, 0)
	otel, reader := withOTel(t, maglevMetrics())
	c := newClient(t, endpoints(ss), serviceConfig(`"balanceFactor": 1.25`, false), otel)
	target := c.cc.CanonicalTarget()
	tb := tableOf(t, ss)
	// One RPC at a time: every key at its owner, and every server READY.
	checkRouting(t, c, tb, keys(100), 1, viaWithKey, nil)

	// The library's placement of the same RPCs, each held while the next
	// is placed.
	sim, err := bounded.New(tb, factor)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	spills := 0
	for range held {
		l := sim.Acquire(hot)
		want = append(want, l.Backend())
		if l.Spilled {
			spills++
		}
	}
	if spills == 0 || spills == held {
		t.Fatalf("the test's load spills %d of %d RPCs; it must spill some and not all", spills, held)
	}

	g := &gate{arrived: make(chan string, held), release: make(chan struct{})}
	for _, s := range ss {
		s.svc.gate.Store(g)
	}
	before := read(t, reader, target)
	var wg sync.WaitGroup
	errs := make(chan error, held)
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.call(context.Background(), hot, viaWithKey)
			errs <- err
		}()
		select {
		case got := <-g.arrived:
			if got != want[i] {
				close(g.release)
				t.Fatalf("RPC %d of %q, %d held: server %s; want %s (the library's placement %v)", i+1, hot, i, got, want[i], want)
			}
		case <-time.After(rpcTimeout):
			close(g.release)
			t.Fatalf("RPC %d of %q reached no server in %v", i+1, hot, rpcTimeout)
		}
	}
	close(g.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkDelta(t, "12 RPCs of a hot key held at once", before, read(t, reader, target), reading{"picks/ok": held, "spills": int64(spills)})
	t.Logf("%d RPCs of a hot key held at once: %d spilled, at %v", held, spills, want)
}

// TestMetricsQueued: an RPC whose key's owner is connecting (a listener
// that accepts connections and never answers) queues, counted as queued,
// and nothing else; it ends when it is canceled.
func TestMetricsQueued(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", 0)
	lis, accepted := blackHole(t)
	otel, reader := withOTel(t, maglevMetrics())
	es := endpoints([]*server{s, {addr: lis.Addr().String()}})
	// The connection to the black hole stays CONNECTING for a minute.
	slow := grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: time.Minute})
	c := newClient(t, es, serviceConfig("", false), otel, slow)
	target := c.cc.CanonicalTarget()
	tb, err := maglev.New([]string{s.addr, lis.Addr().String()}, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	ks := keys(100)
	if got, err := c.call(context.Background(), keyOwnedBy(t, tb, ks, s.addr), viaWithKey); err != nil || got != s.addr {
		t.Fatalf("a key of the server: %q, %v", got, err)
	}
	select {
	case <-accepted:
	case <-time.After(settleTimeout):
		t.Fatal("the client never connected to the black hole")
	}

	before := read(t, reader, target)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.call(ctx, keyOwnedBy(t, tb, ks, lis.Addr().String()), viaWithKey)
		done <- err
	}()
	deadline := time.Now().Add(settleTimeout)
	for read(t, reader, target)["picks/queued"] == before["picks/queued"] {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no queued pick in %v", settleTimeout)
		}
		time.Sleep(pollInterval)
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("the queued RPC, canceled: %v", err)
	}
	d := read(t, reader, target).since(before)
	if d["picks/queued"] < 1 {
		t.Fatalf("queued picks: %d", d["picks/queued"])
	}
	delete(d, "picks/queued")
	if len(d) != 0 {
		t.Fatalf("an RPC queued and canceled changed %v", d)
	}
}

// blackHole returns a listener on 127.0.0.1 that accepts connections and
// never reads or writes, and a channel closed at its first connection.
// The listener and its connections are closed at the end of the test.
func blackHole(t *testing.T) (net.Listener, <-chan struct{}) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if conns = append(conns, conn); len(conns) == 1 {
				close(accepted)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return lis, accepted
}

// TestMetricsOff: a channel with grpc's OpenTelemetry plugin and only its
// default metrics records none of the policy's: they are off by default.
func TestMetricsOff(t *testing.T) {
	ss := startServers(t, 3, 0)
	otel, reader := withOTel(t, opentelemetry.DefaultMetrics())
	c := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user"`, false), otel)
	checkRouting(t, c, tableOf(t, ss), keys(50), 1, viaHeader, nil)
	if r := read(t, reader, c.cc.CanonicalTarget()); len(r) != 0 {
		t.Fatalf("the policy's metrics, not turned on: %v", r)
	}
}
