package httpmaglev

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/maglevlb/maglev"
	"go.opentelemetry.io/otel/metric"
)

// The errors NewTransport and SetBackends return wrap one of these, so
// that callers can match them with errors.Is. RoundTrip returns
// ErrNoHealthyBackend, an error wrapping ErrRequestBody for the caller's
// own bad body, a *BackendError for a backend's fault, or the error of the
// Transport it sends through as it is (a request that net/http rejects,
// the request's context ending).
var (
	// ErrInvalidConfig is wrapped by every error the package returns for a
	// bad Config field or a bad argument (NewTransport):
	// a *ConfigError naming it. An error about a bad TableSize
	// also wraps maglev.ErrSize, one about a bad
	// BalanceFactor bounded.ErrBalanceFactor.
	ErrInvalidConfig = errors.New("httpmaglev: invalid config")

	// ErrInvalidBackends is wrapped by every error SetBackends (and
	// NewTransport, for Config.Backends) returns for a bad backend list,
	// together with the reason: maglev.ErrEmptyName, maglev.ErrDuplicateName,
	// ErrBadURL or ErrTable.
	ErrInvalidBackends = errors.New("httpmaglev: invalid backends")

	// ErrBadURL means a backend's URL is nil, or is not a base URL
	// http://HOST[:PORT] or https://HOST[:PORT] without user, path,
	// query or fragment.
	ErrBadURL = errors.New("httpmaglev: backend URL must be http(s)://HOST[:PORT]")

	// ErrTable means the table builder (maglev.NewWeighted, or
	// Config.NewTable) failed, or returned a table whose backends are not
	// the ones it was given.
	ErrTable = errors.New("httpmaglev: table build failed")

	// ErrNoHealthyBackend is what RoundTrip returns when no backend is
	// healthy (or none is configured). ErrorHandler answers it with 503.
	ErrNoHealthyBackend = errors.New("httpmaglev: no healthy backend")
)

// A ConfigError reports the Config field or argument that is wrong, and
// why. Its message starts with "httpmaglev: invalid config: " and names the
// field; errors.Is matches it with ErrInvalidConfig and with its reason.
// (Every package of the project reports a bad config or argument with a
// ConfigError of its own of this shape; see docs/conventions.md.)
type ConfigError struct {
	Field string // the Config field or argument: "TableSize", "HealthTimeout", "hostport", ...
	Err   error  // the reason
}

// Error returns "httpmaglev: invalid config: FIELD: REASON", where a reason
// from package maglev or bounded loses its "maglev: " or "bounded: "
// prefix.
func (e *ConfigError) Error() string {
	reason := strings.TrimPrefix(strings.TrimPrefix(e.Err.Error(), "maglev: "), "bounded: ")
	return ErrInvalidConfig.Error() + ": " + e.Field + ": " + reason
}

// Unwrap returns ErrInvalidConfig and the reason, for errors.Is and
// errors.As.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

// configError returns a *ConfigError for field with a formatted reason.
func configError(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}

// BaseURL returns u reduced to its scheme and host if it is a backend URL
// the Transport accepts: http://HOST[:PORT] or https://HOST[:PORT], with at
// most a "/" path and no user, query or fragment. Otherwise it returns an
// error wrapping ErrBadURL. Membership sources (etcdmaglev, a command's
// flags) use it to check one backend at a time, with the Transport's rule.
func BaseURL(u *url.URL) (*url.URL, error) {
	if err := checkBaseURL(u); err != nil {
		return nil, err
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// checkBaseURL returns nil if u is a URL BaseURL accepts, and an error
// wrapping ErrBadURL otherwise, without allocating for a good one.
func checkBaseURL(u *url.URL) error {
	if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawPath != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("%w: %v", ErrBadURL, u)
	}
	return nil
}

// A BackendError is the error RoundTrip returns when the request's backend
// (or, for a retried request, the retry's) failed before answering. It
// names the backend that failed last and wraps the transport's error.
type BackendError struct {
	Backend string // the backend's name
	Err     error  // the transport's error
}

// Error returns "httpmaglev: backend NAME: ERR".
func (e *BackendError) Error() string {
	return "httpmaglev: backend " + e.Backend + ": " + e.Err.Error()
}

// Unwrap returns the transport's error.
func (e *BackendError) Unwrap() error { return e.Err }

// A Backend is one server requests may go to.
type Backend struct {
	// Name is the backend's name in the Maglev table, which hashes names:
	// a backend that keeps its name keeps its keys when its address
	// changes. Empty means URL.Host.
	Name string

	// URL is the backend's base URL, http://HOST[:PORT] or
	// https://HOST[:PORT] (a trailing "/" is allowed): a request's scheme
	// and host are replaced by these.
	URL *url.URL

	// Weight is the backend's share of the keys, relative to the others'.
	// nil, no weight given, weighs 1: a list that gives none is
	// unweighted, and its table is maglev.New's. A weight of 0 drains the
	// backend, as in maglev.NewWeighted and every package of this project
	// (docs/conventions.md): it stays configured and health-checked and
	// its requests in flight finish, but it is out of the table, so no new
	// key goes to it. Give one as new(uint32(3)), or as the address of a
	// variable; the Transport reads it when the list is set, and keeps its
	// own copy.
	Weight *uint32
}

// weight returns b's weight: *Weight, or 1 if none is given.
func (b Backend) weight() uint32 {
	if b.Weight == nil {
		return 1
	}
	return *b.Weight
}

// Config configures a Transport. The zero value of every field but
// Backends is a usable default; a Transport with no backends answers
// every request with ErrNoHealthyBackend until SetBackends gives it some.
type Config struct {
	// Backends is the initial membership, as for SetBackends.
	Backends []Backend

	// Key returns the key a request is routed by: requests with the same
	// key go to the same backend while membership and health are stable.
	// An empty key, and a nil Key, mean the client IP (see ClientIP and
	// TrustForwardedFor): a request without its key is routed, never
	// rejected. HeaderKey, CookieKey and QueryKey make common Keys. Key
	// is called once per RoundTrip, from many goroutines at once.
	Key func(*http.Request) string

	// TrustForwardedFor makes the client IP the first address of the
	// request's X-Forwarded-For header, when it has one (see
	// ForwardedClientIP). Only set it behind a proxy that sets the header:
	// a client can write any X-Forwarded-For it likes. It is not the same
	// as Key: ForwardedClientIP, which keys every request by that address:
	// it changes only the fallback, for requests whose Key is empty (a
	// HeaderKey's requests without the header, say).
	TrustForwardedFor bool

	// TableSize is the table's size M, a prime no larger than
	// maglev.MaxSize; 0 means maglev.DefaultSize (65,537).
	TableSize int

	// Hasher hashes backend names and keys; nil means maglev.XXH3().
	Hasher maglev.Hasher

	// NewTable, if set, builds the table instead of maglev.NewWeighted
	// (maglev.New for equal weights) with Hasher: a hook for a builder that
	// follows other rules, such as an Envoy-compatible one in another
	// module. It is given the configured, undrained backends, sorted by
	// name, with their weights (1 for a backend given none), and
	// TableSize; Hasher is not passed, since the table carries its own, and
	// keys are hashed with the table's Hasher(). It must return a table
	// over exactly those names, or an error. It runs when the membership
	// changes (NewTransport, SetBackends), on that caller's goroutine, one
	// call at a time. Failures never call it: the backends out of service
	// are taken out of its table with maglev.Table.Without, and retries go
	// where that table sends their keys (see Transport.Table).
	NewTable func(backends []maglev.Backend, size int) (*maglev.Table, error)

	// BalanceFactor turns on bounded loads: 0 is off, otherwise it must be
	// finite and at least 1 (Envoy's users set 1.25); see bounded.New.
	BalanceFactor float64

	// Base sends the requests to the backends (as http.Client's and
	// oauth2's wrapping transports call the one they wrap); nil means a
	// clone of http.DefaultTransport (made at NewTransport). Health checks send
	// through a clone of it made at NewTransport when it is an
	// *http.Transport: the same dialer, TLS and proxy settings, with a pool
	// of its own, so that probes never wait behind requests for a
	// connection (MaxConnsPerHost, say). Any other RoundTripper is shared
	// by the probes.
	Base http.RoundTripper

	// HealthPath is the path the active health check GETs on each backend,
	// such as "/healthz"; a 2xx answer passes. "" turns active checks off:
	// then only passive ejection takes backends out.
	HealthPath string

	// HealthInterval is the time between health rounds, which probe every
	// backend at once; 0 means 1s.
	HealthInterval time.Duration

	// HealthTimeout bounds one probe; 0 means half the interval. It must
	// not exceed HealthInterval.
	HealthTimeout time.Duration

	// Fall consecutive failed probes take a healthy backend out of the
	// table; Rise consecutive passed probes put it (or a passively ejected
	// one) back. 0 means 2 for each.
	Fall, Rise int

	// EjectAfter consecutive failed requests to a backend eject it from
	// the table until Rise probes pass, or, with active checks off, for
	// EjectionTime; its Reason is the kind of the last failure. 0 means 3; -1 turns passive ejection off. Only the
	// backend's faults count: a failed dial or TLS handshake, the
	// connection reset or closed before the response headers, a timeout
	// awaiting them; never the caller's (its request body failing or
	// disagreeing with ContentLength, its context ending, a request
	// net/http rejects). See Transport.RoundTrip. Passive ejection never
	// takes out more than half the configured backends.
	EjectAfter int

	// Consecutive5xx answers in a row with a 5xx status from a backend
	// eject it (Reason5xx), as Envoy's outlier detection's consecutive_5xx
	// does; 0 (the default) is off. An answer of any other status resets
	// the count; a backend fault (see EjectAfter) neither counts nor resets
	// it. The ejection backs off, is readmitted and is capped as
	// EjectAfter's is.
	Consecutive5xx int

	// EjectionTime is the base of passive ejection's backoff, as in
	// Envoy's outlier detection: the n-th consecutive ejection of a
	// backend lasts n·EjectionTime with active checks off, and with them
	// on at least (n-1)·EjectionTime and until Rise probes pass; each
	// EjectionTime a readmitted backend stays in takes one from n. 0 means
	// 10s.
	EjectionTime time.Duration

	// MaxEjectionTime caps one ejection's backoff; 0 means 300s (Envoy's
	// max_ejection_time), or EjectionTime if that is longer. It must not
	// be below EjectionTime.
	MaxEjectionTime time.Duration

	// MaxRetryBody is the largest request body RoundTrip buffers so that
	// an idempotent request can be sent again; 0 means 1 MiB, -1 buffers
	// nothing (only requests without a body, or with GetBody, are then
	// retried).
	MaxRetryBody int64

	// DisableRetries turns retries off: every request is sent once.
	DisableRetries bool

	// Logger receives rebuilds (at Info), ejections, health changes and
	// retries (at Warn); nil means no logging.
	Logger *slog.Logger

	// MeterProvider receives the Transport's metrics (see docs/metrics.md):
	// requests by backend and outcome, retries, ejections, health
	// transitions, rebuilds and the slots they moved, requests in flight,
	// bounded-load spills, and the table's slots per backend. nil means
	// the global MeterProvider (otel.GetMeterProvider), which records
	// nothing until the application installs an SDK, as otelhttp does.
	MeterProvider metric.MeterProvider
}

// Defaults of the Config fields whose zero value means a default.
const (
	defaultInterval     = time.Second
	defaultFallRise     = 2
	defaultEjectAfter   = 3
	defaultEjectionTime = 10 * time.Second
	defaultMaxEjection  = 300 * time.Second
	defaultMaxRetryBody = 1 << 20
)

// normalize checks c and fills in its defaults. It does not look at
// c.Backends. It is O(√TableSize), for the prime check.
func (c Config) normalize() (Config, error) {
	bad := configError
	if c.TableSize == 0 {
		c.TableSize = maglev.DefaultSize
	}
	if err := maglev.CheckSize(c.TableSize); err != nil {
		return c, &ConfigError{Field: "TableSize", Err: err}
	}
	if c.Hasher == nil {
		c.Hasher = maglev.XXH3()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Base == nil {
		c.Base = http.DefaultTransport.(*http.Transport).Clone()
	}
	if c.HealthPath != "" && (!strings.HasPrefix(c.HealthPath, "/") || strings.ContainsAny(c.HealthPath, " \t\r\n")) {
		return c, bad("HealthPath", "%q is not an absolute path", c.HealthPath)
	}
	switch {
	case c.HealthInterval < 0:
		return c, bad("HealthInterval", "negative: %v", c.HealthInterval)
	case c.HealthInterval == 0:
		c.HealthInterval = defaultInterval
	}
	switch {
	case c.HealthTimeout < 0 || c.HealthTimeout > c.HealthInterval:
		return c, bad("HealthTimeout", "%v is not in (0, HealthInterval %v]", c.HealthTimeout, c.HealthInterval)
	case c.HealthTimeout == 0:
		c.HealthTimeout = c.HealthInterval / 2
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"Fall", &c.Fall}, {"Rise", &c.Rise}} {
		switch {
		case *f.v < 0:
			return c, bad(f.name, "negative: %d", *f.v)
		case *f.v == 0:
			*f.v = defaultFallRise
		}
	}
	switch {
	case c.EjectAfter < -1:
		return c, bad("EjectAfter", "%d is neither -1 (off) nor positive", c.EjectAfter)
	case c.EjectAfter == 0:
		c.EjectAfter = defaultEjectAfter
	}
	if c.Consecutive5xx < 0 {
		return c, bad("Consecutive5xx", "negative: %d", c.Consecutive5xx)
	}
	switch {
	case c.EjectionTime < 0:
		return c, bad("EjectionTime", "negative: %v", c.EjectionTime)
	case c.EjectionTime == 0:
		c.EjectionTime = defaultEjectionTime
	}
	switch {
	case c.MaxEjectionTime < 0 || (c.MaxEjectionTime > 0 && c.MaxEjectionTime < c.EjectionTime):
		return c, bad("MaxEjectionTime", "%v is below EjectionTime %v", c.MaxEjectionTime, c.EjectionTime)
	case c.MaxEjectionTime == 0:
		c.MaxEjectionTime = max(defaultMaxEjection, c.EjectionTime)
	}
	switch {
	case c.MaxRetryBody < -1 || c.MaxRetryBody == math.MaxInt64:
		return c, bad("MaxRetryBody", "%d is neither -1 (none) nor in [0, MaxInt64)", c.MaxRetryBody)
	case c.MaxRetryBody == 0:
		c.MaxRetryBody = defaultMaxRetryBody
	case c.MaxRetryBody == -1:
		c.MaxRetryBody = 0
	}
	return c, nil
}

// checkBackends validates a backend list and returns it sorted by name,
// each Name filled in. The URLs are still the caller's: a member made of
// one copies what it keeps (see Transport.newMember), so that a list that
// changes little allocates little. It is O(n log n) and makes at most
// three allocations: the names, the sort's order and the sorted list.
func checkBackends(backends []Backend) ([]Backend, error) {
	return checkBackendsInto(backends, new(backendScratch))
}

// A backendScratch is the memory checkBackendsInto works in, and the list
// it returns: a caller that checks list after list (SetBackends, under
// Transport.mu) keeps one, so that a membership change allocates nothing
// here once its lists stop growing.
type backendScratch struct {
	names []string
	order []int32
	out   []Backend
}

// checkBackendsInto is checkBackends in sc's memory: the list it returns
// is sc's, valid until the next call with sc.
func checkBackendsInto(backends []Backend, sc *backendScratch) ([]Backend, error) {
	bad := func(i int, b Backend, reason error) error {
		name := b.Name
		if name == "" && b.URL != nil {
			name = b.URL.Host
		}
		return fmt.Errorf("%w: backend %d (%q): %w", ErrInvalidBackends, i, name, reason)
	}
	names := slices.Grow(sc.names[:0], len(backends))[:len(backends)]
	sc.names = names
	for i, b := range backends {
		u := b.URL
		if b.Name == "" && (u == nil || u.Host == "") {
			return nil, bad(i, b, maglev.ErrEmptyName) // neither a Name nor a URL host
		}
		if err := checkBaseURL(u); err != nil {
			return nil, bad(i, b, ErrBadURL)
		}
		names[i] = b.Name
		if b.Name == "" {
			names[i] = u.Host
		}
	}
	// Sorted by name through an order of indexes over the names: swapping
	// 4-byte indexes instead of backends, which hold pointers, and reading
	// the names from one dense slice, is several times faster at thousands
	// of backends. Lists from a membership source often come sorted.
	var order []int32
	if !slices.IsSorted(names) {
		order = slices.Grow(sc.order[:0], len(names))[:len(names)]
		sc.order = order
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortFunc(order, func(a, b int32) int { return strings.Compare(names[a], names[b]) })
	}
	out := slices.Grow(sc.out[:0], len(backends))[:len(backends)]
	sc.out = out
	for i := range out {
		j := i
		if order != nil {
			j = int(order[i])
		}
		out[i] = backends[j]
		out[i].Name = names[j]
	}
	for i := 1; i < len(out); i++ {
		if out[i].Name == out[i-1].Name {
			return nil, fmt.Errorf("%w: backend %q: %w", ErrInvalidBackends, out[i].Name, maglev.ErrDuplicateName)
		}
	}
	return out, nil
}
