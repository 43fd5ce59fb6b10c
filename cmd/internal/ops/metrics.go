package ops

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Metrics are a program's metrics for Prometheus: an OpenTelemetry SDK
// MeterProvider whose reader is the OpenTelemetry Prometheus exporter,
// registered in a registry of the program's own, and the handler that
// serves that registry in Prometheus's text format (/metrics).
type Metrics struct {
	Provider *sdkmetric.MeterProvider
	Handler  http.Handler
}

// NewMetrics returns the metrics, empty: the libraries' instruments are
// made from Provider.
func NewMetrics() (*Metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &Metrics{
		Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		Handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// Close shuts the provider down. Nothing is pushed, so no data is lost.
func (m *Metrics) Close() { _ = m.Provider.Shutdown(context.Background()) }
