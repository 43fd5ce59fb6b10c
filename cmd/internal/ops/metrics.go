package ops

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Metrics are a program's metrics for Prometheus: an OpenTelemetry SDK
// MeterProvider whose reader is the OpenTelemetry Prometheus exporter,
// registered in a registry of the program's own, and the handler that
// serves that registry in Prometheus's text format (/metrics).
//
// The registry holds, beside the provider's instruments, the Prometheus
// client's Go runtime and process collectors (go_* and process_*) and
// PROG_build_info, a gauge of 1 labelled with what the build says of
// itself (Build's labels: version, revision, modified, commit_time,
// goversion); the provider's resource, which the exporter serves as
// target_info, names the program (service.name) and its build in one word
// (service.version, Build.Short).
type Metrics struct {
	Provider *sdkmetric.MeterProvider
	Handler  http.Handler
}

// NewMetrics returns the metrics of the program prog ("l4lb") built as b,
// with no instrument yet: the libraries' instruments are made from
// Provider.
func NewMetrics(prog string, b Build) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        strings.ReplaceAll(prog, "-", "_") + "_build_info",
		Help:        "A metric with a constant '1' value labelled by the version (a release, or devel), the commit, whether its tree was modified, the commit's time and the Go version " + prog + " was built from.",
		ConstLabels: b.labels(),
	})
	info.Set(1)
	if err := reg.Register(info); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", prog), attribute.String("service.version", b.Short())))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &Metrics{
		Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res)),
		Handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// Close shuts the provider down. Nothing is pushed, so no data is lost.
func (m *Metrics) Close() { _ = m.Provider.Shutdown(context.Background()) }
