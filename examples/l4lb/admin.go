package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// status is /debug/maglev's JSON.
type status struct {
	Service string          `json:"service"`
	Attach  string          `json:"attach"`
	Table   tableSummary    `json:"table"`
	Stats   xdpmaglev.Stats `json:"stats"`
}

type tableSummary struct {
	Size     int            `json:"size"`
	Backends []tableBackend `json:"backends"`
}

type tableBackend struct {
	Addr   string `json:"addr"`
	Weight uint32 `json:"weight"`
	Slots  int    `json:"slots"`
}

// handler serves the table's summary and the counters as JSON.
func handler(lb *xdpmaglev.LB, c config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := lb.Stats()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		s := status{Service: c.svc.String(), Attach: lb.Mode().String(), Stats: st}
		if t := lb.Table(c.svc); t != nil {
			s.Table.Size = t.Size()
			counts, weights := t.Counts(), t.Weights()
			for i, name := range t.Backends() {
				s.Table.Backends = append(s.Table.Backends, tableBackend{Addr: name, Weight: weights[i], Slots: counts[i]})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s) // an error is the client gone
	})
}

// promMetrics is where the load balancer's metrics go (xdpmaglev's
// counters, docs/metrics.md): an OpenTelemetry SDK MeterProvider whose
// reader is the OpenTelemetry Prometheus exporter, registered in a
// registry of l4lb's own, which /metrics on the admin listener serves in
// Prometheus's text format, as lbproxy does.
type promMetrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
}

func newPromMetrics() (*promMetrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &promMetrics{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

func (m *promMetrics) close() { _ = m.provider.Shutdown(context.Background()) } // nothing is pushed: no data to lose
