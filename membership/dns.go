package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A DNSWatcher is the Watcher of a DNS name (WatchDNS, WatchSRV), with the
// counts of its lookups. It looks the name up again at an interval; a
// lookup that fails, or answers no record, changes nothing: the last good
// answer stays in force, so the backends never drop to zero because DNS
// is unreachable. An answer that names the same endpoints as the last one
// (in any order, with any TTL) causes no call, and so no rebuild.
//
// A DNSWatcher is safe for concurrent use by multiple goroutines.
type DNSWatcher struct {
	*Watcher
	src *dnsSource
}

// DNSOptions are the optional settings of WatchDNS and WatchSRV; the zero
// value is the defaults.
type DNSOptions struct {
	// Resolver looks the name up; nil means net.DefaultResolver.
	Resolver *net.Resolver

	// Interval is the time between lookups, and each later lookup's
	// deadline; 0 means 5s.
	Interval time.Duration

	// Logger receives failed lookups and sets (at Warn) and accepted lists
	// (at Info); nil means no logging.
	Logger *slog.Logger
}

const defaultDNSInterval = 5 * time.Second

// WatchDNS watches the A and AAAA records of the host of hostport
// ("NAME:PORT"): each address IP is the endpoint IP, PORT, named "IP:PORT"
// ("[IP]:PORT" for IPv6), the name gRPC's DNS resolver gives the same
// address, so that grpcmaglev on "dns:///NAME:PORT" computes the same
// table. Every endpoint weighs 1, and has no Meta.
//
// WatchDNS looks the name up with opts.Resolver, bounded by ctx, and calls
// set with the endpoints before it returns; it then looks the name up
// every opts.Interval, each lookup bounded by the interval, and calls set
// when the endpoints change, until Close, as Watch says (a list set
// rejects is retried after a backoff).
//
// It returns a *ConfigError (wrapping ErrInvalidConfig) for a hostport
// that is not NAME:PORT, a negative interval or a nil set; an error
// wrapping ErrDNS if the first lookup fails; and one wrapping set's error
// if set fails on the first list. In those cases no goroutine is left
// running. Each lookup costs one DNS query per address family and
// O(n log n) in the n addresses.
func WatchDNS(ctx context.Context, hostport string, set func([]Endpoint) error, opts DNSOptions) (*DNSWatcher, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err == nil && host == "" {
		err = errors.New("no host")
	}
	var port uint16
	if err == nil {
		port, err = parsePort(p)
	}
	if err != nil {
		return nil, configError("hostport", "%q is not NAME:PORT: %v", hostport, err)
	}
	r := resolver(opts)
	lookup := func(ctx context.Context) ([]Endpoint, error) {
		ips, err := r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		eps := make([]Endpoint, 0, len(ips))
		for _, ip := range ips {
			ap := netip.AddrPortFrom(ip.Unmap().WithZone(""), port)
			eps = append(eps, Endpoint{Name: ap.String(), Host: ap.Addr().String(), Port: port, Weight: 1})
		}
		return eps, nil
	}
	return watchDNS(ctx, "DNS "+hostport, hostport, lookup, set, opts)
}

// WatchSRV watches the SRV records of name (such as
// "_http._tcp.web.default.svc.cluster.local"): each record of the lowest
// priority is the endpoint TARGET, PORT, named "TARGET:PORT" with the
// target's trailing dot dropped; records of higher priorities are backups
// in DNS's sense, and are left out. The records' weights are not the
// endpoints' (every endpoint weighs 1: an SRV weight is a preference among
// equals, and 0 there does not mean drained); Meta has the record's
// "priority" and "weight". A consumer resolves each target when it
// connects (an HTTP Transport, with its own dialer's resolver).
//
// WatchSRV is otherwise as WatchDNS, with one SRV query a lookup; it
// returns a *ConfigError for an empty name.
func WatchSRV(ctx context.Context, name string, set func([]Endpoint) error, opts DNSOptions) (*DNSWatcher, error) {
	if name == "" {
		return nil, configError("name", "empty SRV name")
	}
	r := resolver(opts)
	lookup := func(ctx context.Context) ([]Endpoint, error) {
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, err
		}
		eps := make([]Endpoint, 0, len(srvs))
		for _, s := range srvs {
			if s.Priority != srvs[0].Priority { // sorted by priority
				continue
			}
			target := strings.TrimSuffix(s.Target, ".")
			if target == "" {
				continue // "." means: no service here
			}
			eps = append(eps, Endpoint{
				Name:   net.JoinHostPort(target, strconv.Itoa(int(s.Port))),
				Host:   target,
				Port:   s.Port,
				Weight: 1,
				Meta:   map[string]string{"priority": strconv.Itoa(int(s.Priority)), "weight": strconv.Itoa(int(s.Weight))},
			})
		}
		return eps, nil
	}
	return watchDNS(ctx, "DNS SRV "+name, name, lookup, set, opts)
}

// Lookups returns how many lookups the DNSWatcher has made, and how many
// of them failed (or answered no record). It is O(1).
func (w *DNSWatcher) Lookups() (lookups, failed int) {
	w.src.mu.Lock()
	defer w.src.mu.Unlock()
	return w.src.lookups, w.src.fails
}

func resolver(opts DNSOptions) *net.Resolver {
	if opts.Resolver == nil {
		return net.DefaultResolver
	}
	return opts.Resolver
}

func parsePort(p string) (uint16, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("bad port %q", p)
	}
	return uint16(n), nil
}

func watchDNS(ctx context.Context, what, name string, lookup func(context.Context) ([]Endpoint, error), set func([]Endpoint) error, opts DNSOptions) (*DNSWatcher, error) {
	interval, logger := opts.Interval, opts.Logger
	switch {
	case interval < 0:
		return nil, configError("Interval", "negative: %v", interval)
	case interval == 0:
		interval = defaultDNSInterval
	}
	if set == nil {
		return nil, configError("set", "nil set function")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("dns", name)
	src := &dnsSource{what: what, name: name, lookup: lookup, interval: interval, log: logger}
	w, err := Watch(ctx, src, set, Options{Logger: logger})
	if err != nil {
		return nil, err
	}
	return &DNSWatcher{Watcher: w, src: src}, nil
}

// A dnsSource is the Source of a DNS watcher: a lookup, made again at an
// interval.
type dnsSource struct {
	what     string // for errors: "DNS web.test:80"
	name     string // the name looked up, for errors
	lookup   func(context.Context) ([]Endpoint, error)
	interval time.Duration
	log      *slog.Logger

	mu      sync.Mutex // guards lookups and fails
	lookups int
	fails   int
}

// String returns "DNS NAME:PORT" or "DNS SRV NAME".
func (s *dnsSource) String() string { return s.what }

// Run looks the name up at once, and then every interval, and passes each
// answer that names endpoints; a failed lookup is logged, except the
// first, which is Run's error.
func (s *dnsSource) Run(ctx context.Context, update func([]Endpoint, int64)) error {
	eps, n, err := s.lookupOnce(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", err, context.Cause(ctx))
		}
		return err
	}
	update(eps, int64(n))
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, s.interval)
		eps, n, err := s.lookupOnce(lctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("membership: DNS lookup failed; keeping the last endpoints", "err", err)
			}
			continue
		}
		update(eps, int64(n))
	}
}

// lookupOnce looks the name up once and returns the endpoints and the
// lookup's number, or an error wrapping ErrDNS.
func (s *dnsSource) lookupOnce(ctx context.Context) ([]Endpoint, int, error) {
	eps, err := s.lookup(ctx)
	if err == nil && len(eps) == 0 {
		err = errors.New("no records")
	}
	s.mu.Lock()
	s.lookups++
	n := s.lookups
	if err != nil {
		s.fails++
	}
	s.mu.Unlock()
	if err != nil {
		return nil, n, fmt.Errorf("%w: %s: %w", ErrDNS, s.name, err)
	}
	return eps, n, nil
}
