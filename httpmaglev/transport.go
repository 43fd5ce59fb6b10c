package httpmaglev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
)

// A Transport is an http.RoundTripper that sends each request to the
// backend owning its key in a Maglev table of the healthy backends. It
// serves a client, http.Client{Transport: t}, which shards requests
// across the backends, and a reverse proxy,
// httputil.ReverseProxy{Transport: t}.
//
// A Transport is safe for concurrent use by multiple goroutines. RoundTrip
// reads an immutable snapshot through an atomic pointer: it never waits
// for, nor does, a table build, and takes no lock that rebuilds hold.
// SetBackends builds a new table and publishes a new snapshot; health
// checks and passive ejection publish one with the same table without the
// backends out of service (maglev.Table.Without), which moves only their
// keys.
type Transport struct {
	cfg     Config // normalized: Key, Base and Logger are set
	ipOf    func(*http.Request) string
	bounded *bounded.Picker // the shared in-flight counts; nil when bounded loads are off
	probe   *http.Client    // the active health checks' client

	cur       atomic.Pointer[snapshot] // what RoundTrip reads
	_         [64]byte                 // keeps the counters every RoundTrip writes off the line that holds cur
	requests  atomic.Int64             // requests routed to a backend
	retries   atomic.Int64             // requests sent a second time
	noBackend atomic.Int64             // requests that found no healthy backend
	rounds    atomic.Int64             // health rounds started (State.HealthRounds)

	mu      sync.Mutex     // serializes membership changes and publications, across table builds: never taken on the request path
	lifeMu  sync.Mutex     // guards changes of the backends' health (see life); never held together with mu
	scratch backendScratch // SetBackends' memory for checking a list, guarded by mu

	metrics *metrics // the instruments; see docs/metrics.md

	wake   chan struct{} // a passive ejection asks the loop for a rebuild
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop returns
	closed sync.Once
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport for cfg, with cfg.Backends as its
// membership. With active health checks on, it probes every backend once
// before it returns (taking up to HealthTimeout), and each backend's first
// answer decides its health; backends that SetBackends adds later are
// assumed healthy until their first probe. It starts one goroutine for
// health checks and rebuilds; Close stops it.
//
// NewTransport returns a *ConfigError (which wraps ErrInvalidConfig) for
// a bad Config field, or ErrInvalidBackends for bad Backends. It builds the
// first table, as SetBackends does.
func NewTransport(cfg Config) (*Transport, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:  cfg,
		ipOf: ClientIP,
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	if cfg.TrustForwardedFor {
		t.ipOf = ForwardedClientIP
	}
	if cfg.BalanceFactor != 0 {
		if t.bounded, err = bounded.New(nil, cfg.BalanceFactor); err != nil {
			return nil, &ConfigError{Field: "BalanceFactor", Err: err}
		}
	}
	probe := cfg.Base
	if tr, ok := probe.(*http.Transport); ok {
		probe = tr.Clone() // its own pool: probes never wait behind requests
	}
	t.probe = &http.Client{
		Transport: probe,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	members, err := t.members0(cfg.Backends)
	if err != nil {
		return nil, err
	}
	ms, err := t.newMembership(members, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBackends, err)
	}
	s, err := t.serve(ms)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBackends, err)
	}
	t.cur.Store(s)
	if t.metrics, err = newMetrics(t, cfg.MeterProvider); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	if cfg.HealthPath != "" {
		t.round(ctx) // so that the table reflects the first answers
	}
	go t.loop(ctx)
	return t, nil
}

// members0 returns new members for backends, checked and sorted.
func (t *Transport) members0(backends []Backend) ([]*member, error) {
	bs, err := checkBackends(backends)
	if err != nil {
		return nil, err
	}
	members := make([]*member, len(bs))
	for i, b := range bs {
		members[i] = t.newMember(b)
	}
	return members, nil
}

// newMember returns a member for b, a backend checkBackends returned: its
// URL reduced to a copy of its scheme and host, its weight to a copy of
// the weight it has (1 if none is given).
func (t *Transport) newMember(b Backend) *member {
	b.URL = &url.URL{Scheme: b.URL.Scheme, Host: b.URL.Host}
	m := &member{b: b, weight: b.weight()}
	m.b.Weight = &m.weight
	m.life.init(t.cfg.Rise, t.cfg.Fall)
	m.mm.init(b.Name)
	if t.cfg.HealthPath != "" {
		m.health = b.URL.String() + t.cfg.HealthPath
	}
	return m
}

// SetBackends replaces the membership with backends. A backend that keeps
// its name, URL and weight keeps its health; a new one is assumed healthy
// until its first probe. SetBackends builds and publishes the new table
// before it returns, on the caller's goroutine (requests in flight keep
// the table they started with), and logs the slots that moved. A list with
// the same backends, URLs and weights as the membership changes nothing and
// builds nothing.
//
// SetBackends returns an error wrapping ErrInvalidBackends and the reason
// (maglev.ErrEmptyName, maglev.ErrDuplicateName, ErrBadURL,
// or ErrTable if the table builder fails), and keeps the previous membership, if the
// list is bad. It costs one table build over the N undrained backends
// (maglev.NewWeighted's, about a millisecond at M = 65,537; none if only
// URLs changed), one maglev.Table.Without of it for the backends out of
// service, plus O(N log N + M) to check, merge and compare.
func (t *Transport) SetBackends(backends []Backend) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	bs, err := checkBackendsInto(backends, &t.scratch)
	if err != nil {
		return err
	}
	// A backend that keeps its name, URL and weight keeps its member: one
	// merge of two lists sorted by name.
	old := t.cur.Load().ms
	members := make([]*member, len(bs))
	rest := old.all
	for i, b := range bs {
		for len(rest) > 0 && rest[0].b.Name < b.Name {
			rest = rest[1:]
		}
		if o := rest; len(o) > 0 && o[0].b.Name == b.Name && o[0].weight == b.weight() &&
			o[0].b.URL.Scheme == b.URL.Scheme && o[0].b.URL.Host == b.URL.Host {
			members[i] = rest[0]
			continue
		}
		members[i] = t.newMember(b)
	}
	if slices.Equal(members, old.all) {
		return nil // the same backends, URLs and weights: nothing to rebuild
	}
	ms, err := t.newMembership(members, old)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBackends, err)
	}
	if err := t.publishLocked(ms, rebuildBackends); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBackends, err)
	}
	// The members no longer configured: their probes in flight are
	// ignored. Both lists are sorted by name, and a kept member is the
	// same pointer in both.
	now := members
	for _, m := range old.all {
		for len(now) > 0 && now[0].b.Name < m.b.Name {
			now = now[1:]
		}
		if len(now) == 0 || now[0] != m {
			m.life.removed.Store(true)
		}
	}
	return nil
}

// Close stops the health checks and the rebuilds that passive ejections
// ask for, waits for them to end, and closes the idle connections of the
// Transport it sends through. The table stays as it is: requests still go
// through. Close is safe to call more than once.
func (t *Transport) Close() error {
	t.closed.Do(func() {
		t.cancel()
		<-t.done
		_ = t.metrics.reg.Unregister() // an SDK's error here means it is shut down already
	})
	t.CloseIdleConnections()
	return nil
}

// CloseIdleConnections closes the idle connections of the Transport it
// sends through, and of the health checks' clone of it, if that has a
// CloseIdleConnections method, as http.Client.CloseIdleConnections
// expects.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.cfg.Base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	if t.probe.Transport != t.cfg.Base {
		t.probe.CloseIdleConnections()
	}
}

// Lookup returns the backend key goes to with every backend healthy as the
// current table says and bounded loads off: the owner of key in the table
// the Transport routes by (see Table), hashed with the table's Hasher; an empty key
// means the empty string's owner (RoundTrip would use the client IP).
// ok is false if no backend is healthy. Lookup is O(1) and does not
// allocate; the Backend's URL and Weight must not be modified.
func (t *Transport) Lookup(key string) (b Backend, ok bool) {
	s := t.cur.Load()
	i := s.table.LookupIndex(key)
	if i < 0 {
		return Backend{}, false
	}
	return s.ms.members[i].b, true
}

// Table returns the table the Transport routes by now: the table of the
// configured, undrained backends (see Backend.Weight) with those out of
// service taken out by maglev.Table.Without. Its Backends are therefore
// every undrained backend, and those out of service (ejected, or failing
// their active checks) have weight 0 and own no slot: only their keys
// moved. Tables are immutable: a later change publishes a new one and
// leaves this one as it is. Table is O(1) and does not allocate.
func (t *Transport) Table() *maglev.Table { return t.cur.Load().table }

// pick places a request: it returns the snapshot it routes by, the index
// of the request's backend in its table (-1 if none is healthy), the lease
// on that backend with bounded loads, the key, and for a keyless request
// (no Key, no client IP) the random hash it was spread by. It does not
// allocate when the Key function does not, and takes no lock.
func (t *Transport) pick(req *http.Request) (s *snapshot, i int, lease bounded.Lease, key string, h uint64) {
	s = t.cur.Load()
	if t.cfg.Key != nil {
		key = t.cfg.Key(req)
	}
	if key == "" {
		key = t.ipOf(req)
	}
	if key == "" {
		// No key at all (an http.Client's own request has no client IP):
		// as Envoy does when no hash policy yields a hash, a random one,
		// so that keyless requests spread over the backends in proportion
		// to their slots instead of all landing on the empty key's owner.
		h = rand.Uint64()
		if s.bounded == nil {
			return s, s.table.LookupHashIndex(h), bounded.Lease{}, "", h
		}
		lease = s.bounded.AcquireHash(h)
		return s, lease.Index, lease, "", h
	}
	if s.bounded == nil {
		return s, s.table.LookupIndex(key), bounded.Lease{}, key, 0
	}
	lease = s.bounded.Acquire(key)
	return s, lease.Index, lease, key, 0
}

// RoundTrip sends req to its key's backend and returns the response. It
// never modifies req: it sends a copy whose URL scheme and host are the
// backend's, and whose Host header is the backend's too unless req.Host
// was set to something other than req.URL.Host (as a ReverseProxy
// Director that keeps the incoming Host does).
//
// The key is Config.Key(req), or the client IP if that is empty. With
// bounded loads off the request goes to the key's owner in the table of
// the healthy backends; with a BalanceFactor, to the first of the key's
// candidates below its capacity (see bounded.Picker), holding its place
// there until the response body is closed, the request fails, or its
// context ends. A request with no key at all (no Key, and no client IP,
// as an http.Client's outgoing requests have none) goes to the owner of a
// random slot: keyless requests spread over the backends in proportion
// to their slots, as Envoy spreads requests no hash policy hashes. With no
// healthy backend RoundTrip returns ErrNoHealthyBackend.
//
// Backend faults: only a failure that says something about the backend
// counts toward its passive ejection (Config.EjectAfter, and its Reason)
// or causes a retry: a failed dial or TLS handshake, the connection reset or closed
// before the response headers, a timeout awaiting them (a *net.OpError,
// io.EOF or io.ErrUnexpectedEOF, a TLS error, a net.Error whose Timeout
// is true). The caller's own faults never do: an error reading the
// request body or a body whose length disagrees with ContentLength
// (both returned wrapping ErrRequestBody), the request's context ending,
// a request net/http rejects before it connects. An answer, whatever its
// status, resets the backend's count.
//
// Retries: if the backend fails so while req's context is live, and req
// is idempotent (GET, HEAD, OPTIONS, PUT, DELETE or TRACE, or any method
// with an Idempotency-Key or X-Idempotency-Key header) and its body
// replayable (none, GetBody set, or at most Config.MaxRetryBody bytes,
// which RoundTrip then buffers), it is sent once more: to the owner of the
// key's slot in Table().Without(the failed backend), that is where the
// key lives once that backend is ejected. The first retry away from a
// backend in a snapshot computes that table once (a fraction of a build)
// and keeps the owners of the backend's slots; later ones cost a hash and
// a binary search. A retried request keeps its place in its first
// backend's count. Any other request is sent at most once. A backend
// failure returns a *BackendError naming the backend that failed last.
//
// Answers: with Config.Consecutive5xx on, Consecutive5xx answers in a row
// with a 5xx status eject the backend (Reason5xx); an answer of any other
// status resets that count, a backend fault neither counts nor resets it.
// An answer is returned as it is, whatever its status, never retried.
//
// RoundTrip allocates the request copy, with a request body a wrapper
// that tells the caller's faults from the backend's, and with bounded
// loads a body wrapper; the pick itself does not allocate.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeBody(req)
		return nil, errNilURL
	}
	s, i, lease, key, h := t.pick(req)
	if i < 0 {
		closeBody(req)
		t.noBackend.Add(1)
		return nil, ErrNoHealthyBackend
	}
	t.requests.Add(1)
	m := s.ms.members[i]
	out := outgoing(req, m)
	retry := !t.cfg.DisableRetries && idempotent(req)
	buffered := false
	if retry {
		var err error
		if retry, buffered, err = t.replayable(req, out); err != nil {
			closeBody(req)
			lease.Release()
			return nil, err
		}
	}
	if !buffered {
		checkBody(out)
	}
	resp, err := t.send(out, m)
	if err != nil && retry && faultOf(req, err) != "" {
		if key != "" {
			h = s.table.Hasher().HashString(key)
		}
		if j := s.retryTarget(h, i); j >= 0 {
			next := s.ms.members[j]
			again := outgoing(req, next)
			if out.GetBody != nil {
				body, berr := out.GetBody()
				if berr != nil {
					lease.Release()
					return nil, &BackendError{Backend: m.b.Name, Err: errors.Join(err, berr)}
				}
				// GetBody too, so that net/http can send it again on a
				// fresh connection if a pooled one turns out closed.
				again.Body, again.GetBody = body, out.GetBody
			}
			t.retries.Add(1)
			m.mm.retries.Add(1)
			t.cfg.Logger.Warn("httpmaglev: retrying", "method", req.Method, "path", req.URL.Path,
				"backend", m.b.Name, "err", err, "retry", next.b.Name)
			m = next
			resp, err = t.send(again, m)
		}
	}
	if err != nil {
		lease.Release()
		if faultOf(req, err) == "" {
			return nil, err
		}
		return nil, &BackendError{Backend: m.b.Name, Err: err}
	}
	if s.bounded != nil {
		holdLease(req.Context(), resp, lease)
	}
	return resp, nil
}

var errNilURL = errors.New("httpmaglev: nil Request.URL")

// send sends out to m's backend and keeps m's counts of consecutive
// faults and 5xx answers, ejecting it when one reaches its threshold
// (Config.EjectAfter, Config.Consecutive5xx). On the way of a request that
// succeeds it does atomic adds and loads and takes no lock.
func (t *Transport) send(out *http.Request, m *member) (*http.Response, error) {
	m.mm.inFlight.Add(1)
	resp, err := t.cfg.Base.RoundTrip(out)
	m.mm.inFlight.Add(-1)
	l := &m.life
	if err == nil {
		m.mm.ok.Add(1)
		if l.faults.Load() != 0 {
			l.faults.Store(0)
		}
		// The one place that detects consecutive 5xx answers.
		if t.cfg.Consecutive5xx > 0 {
			if resp.StatusCode >= 500 && resp.StatusCode <= 599 {
				if n := l.fives.Add(1); int(n) >= t.cfg.Consecutive5xx && l.phase.Load().ejected == "" {
					t.eject(m, Reason5xx, n, fmt.Errorf("answered %s", resp.Status))
				}
			} else if l.fives.Load() != 0 {
				l.fives.Store(0)
			}
		}
		return resp, nil
	}
	reason := faultOf(out, err)
	if reason == "" {
		m.mm.requestErr.Add(1)
		return nil, err
	}
	m.mm.backendErr.Add(1)
	if t.cfg.EjectAfter > 0 {
		if n := l.faults.Add(1); int(n) >= t.cfg.EjectAfter && l.phase.Load().ejected == "" {
			t.eject(m, reason, n, err)
		}
	}
	return nil, err
}

// ErrRequestBody is wrapped, together with the reason, by the error
// RoundTrip returns when the request's own body fails: its Read returns an
// error (a client that sent a malformed chunked body to a proxy, say), or
// it has more or fewer bytes than the request's ContentLength. Such a
// failure is the caller's: it neither counts toward ejecting the backend
// nor is retried. ErrorHandler answers it with 400.
var ErrRequestBody = errors.New("httpmaglev: bad request body")

// checkBody wraps out's body, if it has one the Transport did not buffer,
// in a checkedBody, and its GetBody to wrap the bodies it returns.
func checkBody(out *http.Request) {
	if out.Body == nil || out.Body == http.NoBody {
		return
	}
	out.Body = &checkedBody{rc: out.Body, length: out.ContentLength}
	if get := out.GetBody; get != nil {
		out.GetBody = func() (io.ReadCloser, error) {
			body, err := get()
			if err != nil || body == nil || body == http.NoBody {
				return body, err
			}
			return &checkedBody{rc: body, length: out.ContentLength}, nil
		}
	}
}

// A checkedBody is a request body as the caller gave it, which marks the
// caller's faults: a read error, or more or fewer bytes than the request's
// ContentLength, come out of Read wrapping ErrRequestBody. (net/http
// returns a body's read error from RoundTrip as it is, and a length that
// disagrees as a plain error.)
type checkedBody struct {
	rc     io.ReadCloser
	read   int64 // bytes read so far
	length int64 // the request's ContentLength; 0 or -1 when unknown
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.read += int64(n)
	switch {
	case b.length > 0 && b.read > b.length:
		return n, fmt.Errorf("%w: more than its ContentLength, %d bytes", ErrRequestBody, b.length)
	case err == io.EOF && b.length > 0 && b.read < b.length:
		return n, fmt.Errorf("%w: %d bytes, its ContentLength %d", ErrRequestBody, b.read, b.length)
	case err != nil && err != io.EOF:
		return n, fmt.Errorf("%w: %w", ErrRequestBody, err)
	}
	return n, err
}

func (b *checkedBody) Close() error { return b.rc.Close() }

// outgoing returns a shallow copy of req addressed to m's backend.
func outgoing(req *http.Request, m *member) *http.Request {
	out := new(http.Request)
	*out = *req
	u := *req.URL
	u.Scheme, u.Host = m.b.URL.Scheme, m.b.URL.Host
	out.URL = &u
	if req.Host == "" || req.Host == req.URL.Host {
		out.Host = ""
	}
	return out
}

// idempotent reports whether req may be sent twice: its method is GET,
// HEAD, OPTIONS, PUT, DELETE or TRACE, which RFC 9110 defines as
// idempotent, or it carries an Idempotency-Key (or X-Idempotency-Key)
// header, by which the client promises the server deduplicates it, as
// net/http's Transport also assumes.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace:
		return true
	}
	return nonEmpty(req.Header["Idempotency-Key"]) || nonEmpty(req.Header["X-Idempotency-Key"])
}

func nonEmpty(v []string) bool { return len(v) > 0 && v[0] != "" }

// replayable makes out's body replayable, if req's is: none, or with
// GetBody, or of at most MaxRetryBody bytes, which it buffers. It reports
// whether out can be sent twice, and whether it buffered the body. A body
// too large is sent once, whole: what was read ahead, then the rest. An
// error reading the body, or a body whose length disagrees with its
// ContentLength, is returned wrapping ErrRequestBody: a body cut short is
// never sent. A body of unknown length is read ahead up to MaxRetryBody+1
// bytes before the request is sent, so a full-duplex stream, whose writer
// waits for the answer, needs DisableRetries.
func (t *Transport) replayable(req, out *http.Request) (retry, buffered bool, err error) {
	if req.Body == nil || req.Body == http.NoBody || req.GetBody != nil {
		return true, false, nil
	}
	limit := t.cfg.MaxRetryBody
	if req.ContentLength > limit {
		return false, false, nil
	}
	buf, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	switch {
	case err != nil:
		return false, false, fmt.Errorf("%w: reading it: %w", ErrRequestBody, err)
	case int64(len(buf)) > limit:
		out.Body = readCloser{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}
		return false, false, nil
	case req.ContentLength > 0 && int64(len(buf)) != req.ContentLength:
		return false, false, fmt.Errorf("%w: %d bytes, its ContentLength %d", ErrRequestBody, len(buf), req.ContentLength)
	}
	_ = req.Body.Close() // read to the end; RoundTrip must close it
	out.Body = io.NopCloser(bytes.NewReader(buf))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	return true, true, nil
}

// A readCloser reads from one reader and closes another: a body read
// ahead, followed by its rest.
type readCloser struct {
	io.Reader
	io.Closer
}

// closeBody closes req's body, as RoundTrip must even when it fails.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close() // the request is not sent; nothing to report
	}
}

// A releaser releases a lease once: when the response body is closed or
// the request's context ends, whichever comes first.
type releaser struct {
	done  atomic.Bool
	lease bounded.Lease
	stop  func() bool // stops the context.AfterFunc; set before the body is returned
}

// release releases the lease if it is the first call.
func (r *releaser) release() {
	if r.done.CompareAndSwap(false, true) {
		r.lease.Release()
	}
}

// closed releases the lease when the body is closed, and stops the
// context.AfterFunc that would have.
func (r *releaser) closed() {
	r.release()
	r.stop()
}

// holdLease makes resp hold lease until its body is closed or ctx ends.
// The releaser lives in the body that wraps resp's: one allocation, plus
// the context.AfterFunc's where ctx can end.
func holdLease(ctx context.Context, resp *http.Response, lease bounded.Lease) {
	if resp.Body == nil {
		lease.Release()
		return
	}
	var r *releaser
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
		// An upgraded connection (101): ReverseProxy writes to the body.
		b := &leaseRWBody{ReadWriteCloser: rwc}
		r, resp.Body = &b.r, b
	} else {
		b := &leaseBody{ReadCloser: resp.Body}
		r, resp.Body = &b.r, b
	}
	r.lease = lease
	r.stop = neverStarted
	if ctx.Done() != nil { // a context that can end: release then too
		r.stop = context.AfterFunc(ctx, r.release)
	}
}

// neverStarted is the stop function of a context that never ends.
func neverStarted() bool { return false }

type leaseBody struct {
	io.ReadCloser
	r releaser
}

func (b *leaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.r.closed()
	return err
}

type leaseRWBody struct {
	io.ReadWriteCloser
	r releaser
}

func (b *leaseRWBody) Close() error {
	err := b.ReadWriteCloser.Close()
	b.r.closed()
	return err
}
