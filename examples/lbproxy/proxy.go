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
	"strings"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
)

// A proxy is lbproxy's HTTP reverse proxy: an httputil.ReverseProxy over
// an httpmaglev.Transport, which routes each request by its key through
// the Maglev table of the healthy backends, checks their health, retries
// and bounds loads. Its ServeHTTP is safe for concurrent use.
type proxy struct {
	cfg  config
	t    *httpmaglev.Transport
	rp   *httputil.ReverseProxy
	log  *log.Logger
	slog *slog.Logger // log's writer, for the Transport and the membership watchers
}

// newProxy returns a proxy over cfg's backends, all assumed healthy until
// the health checker, which starts at once, says otherwise. It logs to
// logger. Close stops the health checker.
func newProxy(cfg config, logger *log.Logger) (*proxy, error) {
	keyOf, err := parseKey(cfg.Key)
	if err != nil {
		return nil, err
	}
	switch {
	case len(cfg.Backends) == 0 && !cfg.Dynamic:
		return nil, errors.New("lbproxy: no backends")
	case !strings.HasPrefix(cfg.HealthPath, "/"):
		return nil, fmt.Errorf("lbproxy: health path %q does not start with /", cfg.HealthPath)
	case cfg.HealthInterval <= 0:
		return nil, errors.New("lbproxy: health interval must be positive")
	case cfg.HealthTimeout <= 0 || cfg.HealthTimeout > cfg.HealthInterval:
		return nil, errors.New("lbproxy: health timeout must be positive and at most the interval")
	case cfg.Fall < 1 || cfg.Rise < 1:
		return nil, errors.New("lbproxy: fall and rise must be at least 1")
	case cfg.EjectAfter < -1 || cfg.EjectAfter == 0:
		return nil, errors.New("lbproxy: eject-after must be -1 (off) or at least 1")
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
	p.t, err = httpmaglev.NewTransport(httpmaglev.Config{
		Backends:       backends,
		Key:            keyOf,
		TableSize:      cfg.TableSize,
		Hasher:         maglev.XXH3Seed(cfg.Seed),
		BalanceFactor:  cfg.BalanceFactor,
		Transport:      transport,
		HealthPath:     cfg.HealthPath,
		HealthInterval: cfg.HealthInterval,
		HealthTimeout:  cfg.HealthTimeout,
		Fall:           cfg.Fall,
		Rise:           cfg.Rise,
		EjectAfter:     cfg.EjectAfter,
		Logger:         p.slog,
	})
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
func (p *proxy) close() { _ = p.t.Close() } // Close never fails

// errorHandler answers a request the Transport could not send: 503 "no
// healthy backend", or 502 naming the backend that failed.
func (p *proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, httpmaglev.ErrNoHealthyBackend) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "no healthy backend", http.StatusServiceUnavailable)
		return
	}
	backend := "?"
	var be *httpmaglev.BackendError
	if errors.As(err, &be) {
		backend = be.Backend
	}
	if r.Context().Err() == nil {
		p.log.Printf("lbproxy: %s %s: %v", r.Method, r.URL.Path, err)
	}
	http.Error(w, "bad gateway: backend "+backend+" failed", http.StatusBadGateway)
}
