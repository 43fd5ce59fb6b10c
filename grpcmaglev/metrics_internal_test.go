package grpcmaglev

// Tests of what the picker and the balancer record, through a recorder
// that counts, and through the recorders of real channels: grpc's for a
// channel without a stats handler, and grpc's OpenTelemetry plugin's.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	estats "google.golang.org/grpc/experimental/stats"
	"google.golang.org/grpc/stats/opentelemetry"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// countingRecorder adds up what is recorded on each int64 counter, by
// metric name and label values ("grpc.lb.maglev.picks target ok"), and
// fails the test on a label count other than the descriptor's.
type countingRecorder struct {
	estats.UnimplementedMetricsRecorder
	t      testing.TB
	mu     sync.Mutex
	counts map[string]int64
}

func newCountingRecorder(t testing.TB) *countingRecorder {
	return &countingRecorder{t: t, counts: map[string]int64{}}
}

func (r *countingRecorder) RecordInt64Count(h *estats.Int64CountHandle, incr int64, labels ...string) {
	d := h.Descriptor()
	if len(labels) != len(d.Labels)+len(d.OptionalLabels) {
		r.t.Errorf("%s recorded with labels %q; its labels are %q", d.Name, labels, d.Labels)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[strings.Join(append([]string{d.Name}, labels...), " ")] += incr
}

// take returns the counts recorded since the last take.
func (r *countingRecorder) take() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts
	r.counts = map[string]int64{}
	return c
}

// checkRecorded fails the test unless r recorded exactly want since the
// last take.
func checkRecorded(t *testing.T, what string, r *countingRecorder, want map[string]int64) {
	t.Helper()
	if got := r.take(); !maps.Equal(got, want) {
		t.Fatalf("%s: recorded %v; want %v", what, got, want)
	}
}

// metricsBalancer is testBalancer with metrics recorded into a counting
// recorder, for the channel named "target".
func metricsBalancer(t *testing.T, n int, cfg *lbConfig) (*maglevBalancer, []*fakeChild, *countingRecorder) {
	b, kids := testBalancer(t, n, cfg)
	r := newCountingRecorder(t)
	b.metrics = newChannelMetrics(r, "target")
	return b, kids, r
}

// TestMetricsRegistered: the four metrics are in grpc's registry, off by
// default, with their units and labels.
func TestMetricsRegistered(t *testing.T) {
	for _, c := range []struct {
		name, unit string
		labels     []string
	}{
		{MetricPicks, "{pick}", []string{"grpc.target", "grpc.lb.maglev.outcome"}},
		{MetricSpills, "{pick}", []string{"grpc.target"}},
		{MetricRebuilds, "{rebuild}", []string{"grpc.target"}},
		{MetricSlotsMoved, "{slot}", []string{"grpc.target"}},
	} {
		d := estats.DescriptorForMetric(c.name)
		switch {
		case d == nil:
			t.Fatalf("%s is not registered", c.name)
		case d.Type != estats.MetricTypeIntCount || d.Unit != c.unit || d.Default || d.Description == "" ||
			!slices.Equal(d.Labels, c.labels) || len(d.OptionalLabels) != 0:
			t.Fatalf("%s: %+v; want an int64 count in %s, off by default, labels %q", c.name, d, c.unit, c.labels)
		}
		if estats.DefaultMetrics.Metrics()[c.name] {
			t.Fatalf("%s is among grpc's default metrics", c.name)
		}
	}
}

// TestPickMetrics: each pick is counted once, by outcome: ok for a keyed
// pick that got a connection, no_key for a keyless one, queued when the
// owner (or, with no key, every usable endpoint) is connecting, failed with
// nothing usable; the failed picks of an errPicker too.
func TestPickMetrics(t *testing.T) {
	b, kids, r := metricsBalancer(t, 4, defaultConfig())
	p := update(t, b, kids)
	checkRecorded(t, "the first table", r, map[string]int64{})

	const key = "k"
	for range 3 {
		if err := pickKey(p, key); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := p.Pick(balancer.PickInfo{Ctx: context.Background()}); err != nil {
			t.Fatal(err)
		}
	}
	checkRecorded(t, "3 keyed and 2 keyless picks", r, map[string]int64{
		"grpc.lb.maglev.picks target ok":     3,
		"grpc.lb.maglev.picks target no_key": 2,
	})

	owner := index(t, p.table.Lookup(key))
	kids[owner].state = connectivity.Connecting
	p = update(t, b, kids)
	if err := pickKey(p, key); err != balancer.ErrNoSubConnAvailable {
		t.Fatalf("CONNECTING owner: %v", err)
	}
	checkRecorded(t, "a pick whose owner connects", r, map[string]int64{"grpc.lb.maglev.picks target queued": 1})

	for i := range kids {
		kids[i].state = connectivity.Connecting
	}
	p = update(t, b, kids)
	if _, err := p.Pick(balancer.PickInfo{Ctx: context.Background()}); err != balancer.ErrNoSubConnAvailable {
		t.Fatalf("keyless, none READY: %v", err)
	}
	checkRecorded(t, "a keyless pick with every endpoint connecting", r, map[string]int64{"grpc.lb.maglev.picks target queued": 1})

	for i := range kids {
		kids[i].state = connectivity.TransientFailure
		kids[i].picker = &storedPicker{err: errors.New("refused")}
	}
	p = update(t, b, kids)
	r.take() // the rebuilds
	for _, ctx := range []context.Context{WithKey(context.Background(), key), context.Background()} {
		if _, err := p.Pick(balancer.PickInfo{Ctx: ctx}); !errors.Is(err, ErrNoUsableEndpoint) {
			t.Fatalf("every endpoint failed: %v", err)
		}
	}
	checkRecorded(t, "a keyed and a keyless pick with every endpoint failed", r, map[string]int64{"grpc.lb.maglev.picks target failed": 2})

	ep := errPicker{err: errors.New("bad update"), metrics: b.metrics}
	if _, err := ep.Pick(balancer.PickInfo{Ctx: context.Background()}); err != ep.err {
		t.Fatal(err)
	}
	checkRecorded(t, "an errPicker's pick", r, map[string]int64{"grpc.lb.maglev.picks target failed": 1})
}

// TestSpillMetrics: with a balanceFactor, a keyed pick that goes to a later
// candidate than its owner is counted as a spill and as an ok pick; one
// that queues at that candidate is not a spill.
func TestSpillMetrics(t *testing.T) {
	b, kids, r := metricsBalancer(t, 4, boundedConfig(1.25))
	p := update(t, b, kids)
	const key = "hot"
	c := candidatesOf(t, p.table, key)
	// L = 1, 2, 3, 4, 5: the owner, the second candidate, the third, the
	// owner again (capacity 2), the second (as TestBoundedPickSpills).
	var held []balancer.PickResult
	for range 5 {
		_, res := holdPick(t, p, kids, key)
		held = append(held, res)
	}
	checkRecorded(t, "5 picks held, 3 of them spilled", r, map[string]int64{
		"grpc.lb.maglev.picks target ok": 5,
		"grpc.lb.maglev.spills target":   3,
	})

	// With 5 held, the sixth (L = 6, capacity 2) goes to the third
	// candidate, which now connects: the pick queues and is no spill.
	kids[c[2]].state = connectivity.Connecting
	p = update(t, b, kids)
	if err := pickKey(p, key); err != balancer.ErrNoSubConnAvailable {
		t.Fatalf("spill to a CONNECTING candidate: %v", err)
	}
	checkRecorded(t, "a spill to a connecting candidate", r, map[string]int64{"grpc.lb.maglev.picks target queued": 1})
	for _, res := range held {
		res.Done(balancer.DoneInfo{})
	}
}

// TestRebuildMetrics: every rebuild is counted with the slots it moved,
// the Diff of the tables; the first table, and state changes that keep
// the table, are not.
func TestRebuildMetrics(t *testing.T) {
	b, kids, r := metricsBalancer(t, 5, defaultConfig())
	t0 := update(t, b, kids).table
	kids[1].state = connectivity.Connecting
	update(t, b, kids)
	checkRecorded(t, "the first table and a CONNECTING endpoint", r, map[string]int64{})

	kids[1].state = connectivity.TransientFailure
	t1 := update(t, b, kids).table
	kids[1].state = connectivity.Ready
	t2 := update(t, b, kids).table
	if t1 == t0 || t2 == t1 || t0.Diff(t1) == 0 {
		t.Fatal("no rebuild")
	}
	checkRecorded(t, "an endpoint failed and back", r, map[string]int64{
		"grpc.lb.maglev.rebuilds target":    2,
		"grpc.lb.maglev.slots_moved target": int64(t0.Diff(t1) + t1.Diff(t2)),
	})
}

// keepingRecorder keeps the labels of the last record, so that they
// escape: what a recorder does with them must not make a pick allocate.
type keepingRecorder struct {
	estats.UnimplementedMetricsRecorder
}

var keptLabels []string

func (keepingRecorder) RecordInt64Count(_ *estats.Int64CountHandle, _ int64, labels ...string) {
	keptLabels = labels
}

// TestMetricsNoAllocs: recording adds no allocation to a pick, through
// grpc's recorder of a channel without a stats handler (what a client
// that does not turn the metrics on gets) and through one that keeps the
// labels it is given.
func TestMetricsNoAllocs(t *testing.T) {
	rec, target := channelRecorder(t)
	for _, m := range []*channelMetrics{newChannelMetrics(rec, target), newChannelMetrics(keepingRecorder{}, target)} {
		b, kids := testBalancer(t, 10, defaultConfig())
		b.metrics = m
		p := update(t, b, kids)
		for _, c := range []struct {
			name string
			ctx  context.Context
		}{
			{"WithKey", WithKey(context.Background(), "user-42")},
			{"no key", context.Background()},
		} {
			info := balancer.PickInfo{FullMethodName: "/svc/Method", Ctx: c.ctx}
			if got := testing.AllocsPerRun(1000, func() { _, _ = p.Pick(info) }); got != 0 {
				t.Errorf("%T, %s: %v allocations a pick; want 0", m.recorder, c.name, got)
			}
		}
		if got := testing.AllocsPerRun(100, func() { m.rebuild(7); m.spill() }); got != 0 {
			t.Errorf("%T: recording a rebuild and a spill: %v allocations; want 0", m.recorder, got)
		}
	}
}

// captureName is a policy that only hands the MetricsRecorder and target
// of the channel it is built for to channelRecorder.
const captureName = "grpcmaglev_test_capture"

type captured struct {
	recorder estats.MetricsRecorder
	target   string
}

var captures = make(chan captured, 1)

type captureBuilder struct{}

func (captureBuilder) Name() string { return captureName }

func (captureBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	captures <- captured{cc.MetricsRecorder(), opts.Target.String()}
	return captureBalancer{}
}

// captureBalancer makes no connection.
type captureBalancer struct{}

func (captureBalancer) UpdateClientConnState(balancer.ClientConnState) error       { return nil }
func (captureBalancer) ResolverError(error)                                        {}
func (captureBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (captureBalancer) Close()                                                     {}
func (captureBalancer) ExitIdle()                                                  {}

func init() { balancer.Register(captureBuilder{}) }

// channelRecorder returns the MetricsRecorder grpc builds a policy with,
// and the target, for a channel dialed with opts (the channel makes no
// connection and is closed at the end of the test).
func channelRecorder(tb testing.TB, opts ...grpc.DialOption) (estats.MetricsRecorder, string) {
	tb.Helper()
	cc, err := grpc.NewClient("passthrough:///recorder", append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"` + captureName + `": {}}]}`),
	}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := cc.Close(); err != nil {
			tb.Error(err)
		}
	})
	cc.Connect()
	select {
	case c := <-captures:
		return c.recorder, c.target
	case <-time.After(10 * time.Second):
		tb.Fatal("the channel built no policy in 10 s")
		return nil, ""
	}
}

// otelRecorder returns the MetricsRecorder of a channel with grpc's
// OpenTelemetry plugin and the policy's metrics on, recording into an
// OpenTelemetry SDK MeterProvider (read by a ManualReader, shut down at
// the end of the test), and the target.
func otelRecorder(tb testing.TB) (estats.MetricsRecorder, string) {
	tb.Helper()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tb.Cleanup(func() {
		if err := mp.Shutdown(context.Background()); err != nil {
			tb.Error(err)
		}
	})
	return channelRecorder(tb, opentelemetry.DialOption(opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{
		MeterProvider: mp,
		Metrics:       opentelemetry.DefaultMetrics().Add(MetricPicks, MetricSpills, MetricRebuilds, MetricSlotsMoved),
	}}))
}
