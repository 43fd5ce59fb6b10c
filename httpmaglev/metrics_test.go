package httpmaglev_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/httpmaglev"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A meter is a real OpenTelemetry SDK MeterProvider with a ManualReader,
// and what it collected, by instrument and attributes.
type meter struct {
	provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

func newMeter(t testing.TB) *meter {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &meter{provider: mp, reader: r}
}

// collect returns every data point's value, keyed by "instrument{k=v,...}"
// with the attributes sorted, and the units by instrument.
func (m *meter) collect(t testing.TB) (points map[string]int64, units map[string]string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points, units = map[string]int64{}, map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/maglevlb/maglev/httpmaglev" {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, mt := range sm.Metrics {
			units[mt.Name] = mt.Unit
			var dps []metricdata.DataPoint[int64]
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				dps = d.DataPoints
			case metricdata.Gauge[int64]:
				dps = d.DataPoints
			default:
				t.Fatalf("%s: unexpected data %T", mt.Name, mt.Data)
			}
			for _, dp := range dps {
				points[mt.Name+labels(dp.Attributes)] = dp.Value
			}
		}
	}
	return points, units
}

func labels(set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	sort.Strings(kv)
	return "{" + strings.Join(kv, ",") + "}"
}

// TestMetrics reads the Transport's instruments through the real
// OpenTelemetry SDK after real traffic to loopback backends, with exact
// counts: requests by backend and outcome (equal to what each backend
// served), retries and ejections after a backend breaks, rebuilds and the
// slots they moved (Table.Diff), the table's slots, and the backends by
// state. TestMetricsHealth, TestMetricsNoBackend and TestMetricsSpills
// read the rest.
func TestMetrics(t *testing.T) {
	servers := startServers(t, 3)
	m := newMeter(t)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), MeterProvider: m.provider,
		EjectAfter: 2, EjectionTime: time.Hour}, servers)
	client := &http.Client{Transport: tr}
	for _, k := range keys(300) {
		if _, _, err := get(t, client, "http://x", http.MethodGet, k); err != nil {
			t.Fatal(err)
		}
	}
	p, units := m.collect(t)
	for _, s := range servers {
		if got := p["maglev.http.requests{maglev.backend="+s.name+",maglev.outcome=ok}"]; got != s.served.Load() || got == 0 {
			t.Errorf("%s: %d requests ok in the metrics, %d served", s.name, got, s.served.Load())
		}
		if got := p["maglev.http.requests.in_flight{maglev.backend="+s.name+"}"]; got != 0 {
			t.Errorf("%s: %d in flight after every request ended", s.name, got)
		}
	}
	counts := tr.Table().Counts()
	for i, name := range tr.Table().Backends() {
		if got := p["maglev.table.slots{maglev.backend="+name+"}"]; got != int64(counts[i]) {
			t.Errorf("%s owns %d slots, the metric says %d", name, counts[i], got)
		}
	}
	lo, hi := counts[0], counts[0]
	for _, c := range counts {
		lo, hi = min(lo, c), max(hi, c)
	}
	if p["maglev.table.slots.min{}"] != int64(lo) || p["maglev.table.slots.max{}"] != int64(hi) {
		t.Errorf("slots min %d max %d, want %d %d", p["maglev.table.slots.min{}"], p["maglev.table.slots.max{}"], lo, hi)
	}
	if p["maglev.http.backends{maglev.state=healthy}"] != 3 || p["maglev.table.rebuilds{maglev.reason=health}"] != 0 {
		t.Errorf("backends by state and rebuilds at the start: %v", p)
	}
	for name, unit := range map[string]string{"maglev.http.requests": "{request}", "maglev.table.slots": "{slot}", "maglev.http.backends": "{backend}"} {
		if units[name] != unit {
			t.Errorf("%s has unit %q, want %q", name, units[name], unit)
		}
	}

	// s1 drops every request (its health check still passes): its keys
	// fail there, are retried, and it is ejected after two.
	before := tr.Table()
	var onS1 []string
	for _, k := range keys(300) {
		if b, _ := tr.Lookup(k); b.Name == "s1" {
			onS1 = append(onS1, k)
		}
	}
	servers[1].broken.Store(true)
	for _, k := range onS1[:2] {
		if _, _, err := get(t, client, "http://x", http.MethodGet, k); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the ejection's rebuild", func() bool { return tr.State().Healthy == 2 })
	p, _ = m.collect(t)
	for key, want := range map[string]int64{
		"maglev.http.requests{maglev.backend=s1,maglev.outcome=backend_error}": 2,
		"maglev.http.retries{maglev.backend=s1}":                               2,
		"maglev.http.ejections{maglev.backend=s1}":                             1,
		"maglev.table.rebuilds{maglev.reason=ejection}":                        1,
		"maglev.table.slots.moved{}":                                           int64(before.Diff(tr.Table())),
		"maglev.http.backends{maglev.state=ejected}":                           1,
		"maglev.http.backends{maglev.state=healthy}":                           2,
	} {
		if p[key] != want {
			t.Errorf("%s = %d, want %d", key, p[key], want)
		}
	}
	if _, ok := p["maglev.table.slots{maglev.backend=s1}"]; ok {
		t.Error("the ejected s1 still has a slots data point")
	}

}

// TestMetricsHealth: a backend whose health check fails is counted as a
// transition down, then up, with a rebuild for health each time.
func TestMetricsHealth(t *testing.T) {
	servers := startServers(t, 3)
	m := newMeter(t)
	tr := newTransport(t, httpmaglev.Config{MeterProvider: m.provider,
		HealthPath: "/healthz", HealthInterval: 50 * time.Millisecond, HealthTimeout: 40 * time.Millisecond}, servers)
	servers[2].down.Store(true)
	waitFor(t, "s2 down", func() bool { return tr.State().Healthy == 2 })
	p, _ := m.collect(t)
	if p["maglev.http.backends{maglev.state=down}"] != 1 {
		t.Errorf("backends down: %d, want 1", p["maglev.http.backends{maglev.state=down}"])
	}
	servers[2].down.Store(false)
	waitFor(t, "s2 up", func() bool { return tr.State().Healthy == 3 })
	p, _ = m.collect(t)
	for key, want := range map[string]int64{
		"maglev.http.health.transitions{maglev.backend=s2,maglev.state=down}": 1,
		"maglev.http.health.transitions{maglev.backend=s2,maglev.state=up}":   1,
		"maglev.table.rebuilds{maglev.reason=health}":                         2,
	} {
		if p[key] != want {
			t.Errorf("%s = %d, want %d", key, p[key], want)
		}
	}
}

// TestMetricsNoBackend: a request with no healthy backend is counted with
// outcome no_backend, and drained backends are counted by state.
func TestMetricsNoBackend(t *testing.T) {
	servers := startServers(t, 2)
	m := newMeter(t)
	tr := newTransport(t, httpmaglev.Config{MeterProvider: m.provider}, servers, 1, 0)
	if err := tr.SetBackends(nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		if _, err := tr.RoundTrip(req); err == nil {
			t.Fatal("a request with no backend succeeded")
		}
	}
	p, _ := m.collect(t)
	if got := p["maglev.http.requests{maglev.outcome=no_backend}"]; got != 3 {
		t.Errorf("%d requests with no backend counted, want 3: %v", got, p)
	}
	if err := tr.SetBackends(backendsOf(servers, 1, 0)); err != nil {
		t.Fatal(err)
	}
	p, _ = m.collect(t)
	if p["maglev.http.backends{maglev.state=drained}"] != 1 || p["maglev.http.backends{maglev.state=healthy}"] != 1 {
		t.Errorf("backends by state with one drained: %v", p)
	}
	if got := p["maglev.table.rebuilds{maglev.reason=backends set}"]; got != 2 {
		t.Errorf("%d rebuilds for backends set, want 2", got)
	}
}

// TestMetricsSpills: with bounded loads, requests placed past a full first
// candidate are counted by that candidate, as State counts them.
func TestMetricsSpills(t *testing.T) {
	servers := startServers(t, 3)
	for _, s := range servers {
		s.gate = make(chan struct{})
	}
	m := newMeter(t)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), MeterProvider: m.provider, BalanceFactor: 1}, servers)
	client := &http.Client{Transport: tr}
	const n = 6
	done := make(chan error, n)
	for range n {
		go func() {
			_, _, err := get(t, client, "http://x", http.MethodGet, "hot")
			done <- err
		}()
	}
	waitFor(t, "every request in flight", func() bool {
		in := int64(0)
		for _, s := range servers {
			in += s.inflight.Load()
		}
		return in == n
	})
	st := tr.State()
	p, _ := m.collect(t)
	total := int64(0)
	for _, b := range st.Backends {
		if got := p[fmt.Sprintf("maglev.bounded.spills{maglev.backend=%s}", b.Name)]; got != int64(b.Spilled) {
			t.Errorf("%s: %d spills in the metrics, %d in State", b.Name, got, b.Spilled)
		}
		total += int64(b.Spilled)
		if got := p["maglev.http.requests.in_flight{maglev.backend="+b.Name+"}"]; got != b.InFlight {
			t.Errorf("%s: %d in flight in the metrics, %d in State", b.Name, got, b.InFlight)
		}
	}
	if total == 0 {
		t.Error("no request spilled: the hot key should fill its backend")
	}
	for _, s := range servers {
		close(s.gate)
	}
	for range n {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
