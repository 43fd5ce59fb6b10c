package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maglevlb/maglev"
)

// maxReplay is the largest request body the proxy buffers so that it can
// send the request again; a request with a larger body is not retried.
const maxReplay = 1 << 20

// A proxy is an HTTP reverse proxy that routes each request by its key
// through the Maglev table of the healthy backends. Its ServeHTTP is safe
// for concurrent use; the table is swapped under it with an atomic pointer.
type proxy struct {
	cfg       config
	backends  []*backend // all configured backends, sorted by name
	keyOf     keyFunc
	hasher    maglev.Hasher
	rp        *httputil.ReverseProxy
	transport *http.Transport // to the backends
	log       *log.Logger
	health    checker

	cur      atomic.Pointer[snapshot] // what requests read
	loads    *maglev.Bounded          // requests in flight per backend, over cur's table
	mu       sync.Mutex               // serializes rebuilds
	retries  atomic.Int64             // requests sent a second time
	requests atomic.Int64             // requests routed to a backend
}

// route is what ServeHTTP hands, in the request's context, to the
// ReverseProxy's Rewrite and Transport: where the request goes and whether
// it may go a second time.
type route struct {
	snap    *snapshot
	key     string
	index   int    // the key's backend in snap.table
	retry   bool   // the request is idempotent and its body buffered
	backend string // the backend tried last, for error messages
}

type routeKey struct{}

// newProxy returns a proxy over cfg's backends, all assumed healthy until
// the health checker (see start) says otherwise. It logs to logger.
func newProxy(cfg config, logger *log.Logger) (*proxy, error) {
	keyOf, err := parseKey(cfg.Key)
	if err != nil {
		return nil, err
	}
	switch {
	case len(cfg.Backends) == 0:
		return nil, errors.New("lbproxy: no backends")
	case !strings.HasPrefix(cfg.HealthPath, "/"):
		return nil, fmt.Errorf("lbproxy: health path %q does not start with /", cfg.HealthPath)
	case cfg.HealthInterval <= 0:
		return nil, errors.New("lbproxy: health interval must be positive")
	case cfg.HealthTimeout <= 0 || cfg.HealthTimeout > cfg.HealthInterval:
		return nil, errors.New("lbproxy: health timeout must be positive and at most the interval")
	case cfg.Fall < 1 || cfg.Rise < 1:
		return nil, errors.New("lbproxy: fall and rise must be at least 1")
	}
	loads, err := maglev.NewBounded(nil, cfg.BalanceFactor)
	if err != nil {
		return nil, fmt.Errorf("lbproxy: -balance-factor: %w", err)
	}
	p := &proxy{cfg: cfg, keyOf: keyOf, hasher: maglev.XXH3Seed(cfg.Seed), log: logger, loads: loads}
	for _, spec := range cfg.Backends {
		name, u, err := parseBackend(spec)
		if err != nil {
			return nil, err
		}
		p.backends = append(p.backends, &backend{name: name, url: u, health: u.String() + cfg.HealthPath})
	}
	slices.SortFunc(p.backends, func(a, b *backend) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(p.backends); i++ {
		if p.backends[i].name == p.backends[i-1].name {
			return nil, fmt.Errorf("lbproxy: duplicate backend %q", p.backends[i].name)
		}
	}
	s, err := p.newSnapshot(p.backends)
	if err != nil {
		return nil, err
	}
	p.loads.Update(s.table)
	p.cur.Store(s)

	p.transport = &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rt := pr.In.Context().Value(routeKey{}).(*route)
			pr.SetURL(rt.snap.backends[rt.index].url)
			pr.SetXForwarded()
		},
		Transport:    retryTransport{p},
		ErrorHandler: p.badGateway,
		ErrorLog:     logger,
	}
	p.health.init(p)
	return p, nil
}

// ServeHTTP routes r to the backend that owns its key (or, with bounded
// loads, to the key's first candidate with room), or answers 503 if no
// backend is healthy. The request counts as in flight on its backend until
// ServeHTTP returns. See retryTransport for what happens when that backend
// fails.
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := p.keyOf(r)
	s, lease := p.pick(key)
	if lease.Index < 0 {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "no healthy backend", http.StatusServiceUnavailable)
		return
	}
	defer lease.Release()
	p.requests.Add(1)
	rt := &route{snap: s, key: key, index: lease.Index, retry: idempotent(r) && bufferBody(r)}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, rt)))
}

// pick places a request for key: it returns the snapshot to route by and
// the lease on the request's backend in the snapshot's table. A rebuild
// publishes its table to p.loads just before it stores the snapshot, so a
// lease taken in between is on a table newer than the snapshot just
// loaded; pick then lets the rebuild finish and picks again.
func (p *proxy) pick(key string) (*snapshot, maglev.Lease) {
	for {
		s := p.cur.Load()
		lease := p.loads.Acquire(key)
		if lease.Table == s.table || lease.Index < 0 && s.table.Len() == 0 {
			return s, lease
		}
		lease.Release()
		runtime.Gosched()
	}
}

// idempotent reports whether r may be sent twice: its method is GET, HEAD,
// OPTIONS, PUT, DELETE or TRACE, which RFC 9110 defines as idempotent, or it
// carries an Idempotency-Key (or X-Idempotency-Key) header, by which the
// client promises the server deduplicates it, as net/http's Transport also
// assumes. POST, PATCH and CONNECT without such a header are not retried.
func idempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace:
		return true
	}
	return r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Idempotency-Key") != ""
}

// bufferBody reads r's body into memory, if it has one of at most maxReplay
// bytes, so that it can be sent again; it reports whether it can.
func bufferBody(r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	if r.ContentLength > maxReplay {
		return false
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, maxReplay+1))
	if err != nil || len(buf) > maxReplay {
		// Send what was read, then the rest (or the error), once.
		r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(buf))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	return true
}

type readCloser struct {
	io.Reader
	io.Closer
}

// retryTransport sends a request to its key's backend. If that fails before
// a response arrives (connection refused, reset or closed, or a timeout)
// while the client is still waiting, and the request may be sent twice, it
// is sent once more: to the key's backend in the table without the failed
// one, where the key lands once the health checker drops it. A failure
// after the response has started cannot be retried.
type retryTransport struct{ p *proxy }

func (t retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.p
	rt := req.Context().Value(routeKey{}).(*route)
	rt.backend = rt.snap.backends[rt.index].name
	resp, err := p.transport.RoundTrip(req)
	if err == nil || !rt.retry || req.Context().Err() != nil {
		return resp, err
	}
	table, backends := rt.snap.fallback(p, rt.index)
	j := table.LookupIndex(rt.key)
	if j < 0 {
		return nil, err
	}
	next := backends[j]
	again := req.Clone(req.Context())
	if req.Body != nil && req.GetBody != nil {
		body, berr := req.GetBody()
		if berr != nil {
			return nil, berr
		}
		again.Body = body
	}
	again.URL.Scheme, again.URL.Host, again.Host = next.url.Scheme, next.url.Host, ""
	p.retries.Add(1)
	p.log.Printf("lbproxy: %s %s: backend %s: %v; retrying on %s", req.Method, req.URL.Path, rt.backend, err, next.name)
	rt.backend = next.name
	return p.transport.RoundTrip(again)
}

// badGateway answers 502 for a request whose backend failed.
func (p *proxy) badGateway(w http.ResponseWriter, r *http.Request, err error) {
	rt := r.Context().Value(routeKey{}).(*route)
	if r.Context().Err() == nil {
		p.log.Printf("lbproxy: %s %s: backend %s: %v", r.Method, r.URL.Path, rt.backend, err)
	}
	http.Error(w, "bad gateway: backend "+rt.backend+" failed", http.StatusBadGateway)
}
