package main

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/httpmaglev"
)

// A proxy is lbproxy's HTTP reverse proxy: an httputil.ReverseProxy over
// an httpmaglev.Transport, which routes each request by its key through
// the Maglev table of the healthy backends, checks their health, retries
// and bounds loads. Its ServeHTTP is safe for concurrent use.
type proxy struct {
	cfg     config
	t       *httpmaglev.Transport
	rp      *httputil.ReverseProxy
	log     *log.Logger
	slog    *slog.Logger // log's writer, for the Transport and the membership watchers
	metrics *ops.Metrics // the Transport's metrics, for /metrics
}

// newProxy returns a proxy over cfg's backends, all assumed healthy until
// the health checker, which starts at once, says otherwise. It logs to
// logger. Close stops the health checker.
func newProxy(cfg config, logger *log.Logger) (*proxy, error) {
	keyOf, err := parseKey(cfg.Key)
	if err != nil {
		return nil, err
	}
	if len(cfg.Backends) == 0 && !cfg.Dynamic {
		return nil, errors.New("lbproxy: no backends")
	}
	var backends []httpmaglev.Backend
	for _, spec := range cfg.Backends {
		name, u, err := parseBackend(spec)
		if err != nil {
			return nil, err
		}
		backends = append(backends, httpmaglev.Backend{Name: name, URL: u})
	}
	p := &proxy{cfg: cfg, log: logger, slog: slog.New(slog.NewTextHandler(logger.Writer(), nil))}
	if p.metrics, err = ops.NewMetrics("lbproxy", ops.ReadBuild()); err != nil {
		return nil, err
	}
	idle := cfg.IdlePerBackend
	if idle <= 0 {
		idle = 32
	}
	transport := &http.Transport{ // to the backends, under the Transport
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   idle,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	tc := cfg.HTTP
	tc.Backends, tc.Key, tc.Hasher, tc.Base = backends, keyOf, maglev.XXH3Seed(cfg.Seed), transport
	tc.Logger, tc.MeterProvider = p.slog, p.metrics.Provider
	p.t, err = httpmaglev.NewTransport(tc)
	if err != nil {
		return nil, fmt.Errorf("lbproxy: %w", err)
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The Transport replaces the scheme and host with the backend's.
			pr.SetURL(&url.URL{Scheme: "http", Host: "lbproxy-backend"})
			pr.SetXForwarded()
		},
		Transport:    p.t,
		ErrorHandler: p.errorHandler,
		ErrorLog:     logger,
	}
	return p, nil
}

// ServeHTTP proxies r to the backend that owns its key (see
// httpmaglev.Transport.RoundTrip), or answers 503 if no backend is
// healthy and 502 if the backend (and the retry, if any) failed.
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.rp.ServeHTTP(w, r) }

// close stops the health checker and closes idle connections.
func (p *proxy) close() {
	_ = p.t.Close() // Close never fails
	p.metrics.Close()
}

// errorHandler logs a request the Transport could not send, with the
// backend that failed, and answers it with httpmaglev.ErrorHandler: 503
// "no healthy backend", 400 for the client's own bad body, else 502. The
// answer names no backend: names and addresses are for the admin listener.
func (p *proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() == nil && !errors.Is(err, httpmaglev.ErrNoHealthyBackend) {
		p.log.Printf("lbproxy: %s %s: %v", r.Method, r.URL.Path, err)
	}
	httpmaglev.ErrorHandler(w, r, err)
}
