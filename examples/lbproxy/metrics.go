package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// promMetrics is where the proxy's metrics go: an OpenTelemetry SDK
// MeterProvider whose reader is the OpenTelemetry Prometheus exporter,
// registered in a registry of the proxy's own, which /metrics serves in
// Prometheus's text format.
type promMetrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
}

func newPromMetrics() (*promMetrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("lbproxy: metrics: %w", err)
	}
	return &promMetrics{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

func (m *promMetrics) close() { _ = m.provider.Shutdown(context.Background()) } // nothing is pushed: no data to lose
