package httpmaglev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrDNS is wrapped by the error WatchDNS and WatchSRV return when the
// first lookup fails or names no backend, and by the errors a DNSWatcher
// logs for the later ones. A failure of the set function is not a DNS
// failure: it does not wrap ErrDNS.
var ErrDNS = errors.New("httpmaglev: DNS lookup failed")

// A DNSWatcher keeps a backend list equal to what a DNS name resolves to,
// looking the name up again at an interval, and hands every new list to
// its set function (a Transport's SetBackends, or any function). It is the
// membership of a Kubernetes headless Service, or of any name whose
// records list the backends.
//
// A lookup that fails, or answers no record, changes nothing: the last
// good answer stays in force, so the backends never drop to zero because
// DNS is unreachable. An answer that names the same backends as the last
// one (in any order, with any TTL) causes no call, and so no rebuild.
//
// A DNSWatcher is safe for concurrent use by multiple goroutines; it runs
// one goroutine, which Close stops.
type DNSWatcher struct {
	lookup   func(context.Context) ([]Backend, error)
	what     string // the name, for errors and logs
	interval time.Duration
	set      func([]Backend) error
	log      *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // guards current, lookups and failures
	current []Backend  // the list set last accepted; written only by the watcher's lookups, one at a time
	lookups int
	fails   int
}

// DNSOptions are the optional settings of WatchDNS and WatchSRV; the zero
// value is the defaults.
type DNSOptions struct {
	// Resolver looks the name up; nil means net.DefaultResolver.
	Resolver *net.Resolver

	// Interval is the time between lookups, and each lookup's deadline;
	// 0 means 5s.
	Interval time.Duration

	// Logger receives failed lookups and sets (at Warn) and accepted lists
	// (at Info); nil means no logging.
	Logger *slog.Logger
}

const defaultDNSInterval = 5 * time.Second

// WatchDNS watches the A and AAAA records of the host of hostport
// ("NAME:PORT"): each address IP is the backend http://IP:PORT, named
// "IP:PORT" ("[IP]:PORT" for IPv6), the name gRPC's DNS resolver gives
// the same address, so that grpcmaglev on "dns:///NAME:PORT" computes the
// same table. Weights are equal.
//
// WatchDNS looks the name up with opts.Resolver, with ctx, and calls set
// with the backends (sorted by name, a list set may keep) before it
// returns; it then starts a goroutine that looks the name up every
// opts.Interval, each lookup bounded by the interval, and calls set when
// the backends change, until Close. When set fails on a later list,
// the error is logged and the same list is offered again after the next
// lookup.
//
// It returns a *ConfigError (wrapping ErrInvalidConfig) for a hostport
// that is not NAME:PORT, a negative interval or a nil set; an error
// wrapping ErrDNS if the first lookup fails; and one wrapping set's error
// if set fails on the first list. In those cases no goroutine is left
// running. Each lookup costs one DNS query per address family and
// O(n log n) in the n addresses.
func WatchDNS(ctx context.Context, hostport string, set func([]Backend) error, opts DNSOptions) (*DNSWatcher, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err == nil && host == "" {
		err = errors.New("no host")
	}
	if err == nil {
		err = checkPort(port)
	}
	if err != nil {
		return nil, configError("hostport", "%q is not NAME:PORT: %v", hostport, err)
	}
	r := opts.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	lookup := func(ctx context.Context) ([]Backend, error) {
		ips, err := r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		bs := make([]Backend, 0, len(ips))
		for _, ip := range ips {
			hp := net.JoinHostPort(ip.Unmap().WithZone("").String(), port)
			bs = append(bs, Backend{Name: hp, URL: &url.URL{Scheme: "http", Host: hp}})
		}
		return bs, nil
	}
	return watchDNS(ctx, hostport, lookup, set, opts)
}

// WatchSRV watches the SRV records of name (such as
// "_http._tcp.web.default.svc.cluster.local"): each record of the lowest
// priority is the backend http://TARGET:PORT, named "TARGET:PORT" with
// the target's trailing dot dropped; records of higher priorities are
// backups in DNS's sense, and are left out, and the records' weights are
// not used (weights are equal). The Transport resolves each target when
// it connects, with its own dialer's resolver.
//
// WatchSRV is otherwise as WatchDNS, with one SRV query a lookup; it
// returns a *ConfigError for an empty name.
func WatchSRV(ctx context.Context, name string, set func([]Backend) error, opts DNSOptions) (*DNSWatcher, error) {
	if name == "" {
		return nil, configError("name", "empty SRV name")
	}
	r := opts.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	lookup := func(ctx context.Context) ([]Backend, error) {
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, err
		}
		bs := make([]Backend, 0, len(srvs))
		for _, s := range srvs {
			if s.Priority != srvs[0].Priority { // sorted by priority
				continue
			}
			target := strings.TrimSuffix(s.Target, ".")
			if target == "" {
				continue // "." means: no service here
			}
			hp := net.JoinHostPort(target, strconv.Itoa(int(s.Port)))
			bs = append(bs, Backend{Name: hp, URL: &url.URL{Scheme: "http", Host: hp}})
		}
		return bs, nil
	}
	return watchDNS(ctx, name, lookup, set, opts)
}

func checkPort(port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

func watchDNS(ctx context.Context, what string, lookup func(context.Context) ([]Backend, error), set func([]Backend) error, opts DNSOptions) (*DNSWatcher, error) {
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
	w := &DNSWatcher{
		lookup:   lookup,
		what:     what,
		interval: interval,
		set:      set,
		log:      logger.With("dns", what),
		done:     make(chan struct{}),
	}
	bs, err := w.lookupOnce(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.offer(bs); err != nil {
		return nil, fmt.Errorf("httpmaglev: DNS %s: set failed on the first list of %d backends: %w", what, len(bs), err)
	}
	ctx, w.cancel = context.WithCancel(context.Background())
	go w.run(ctx)
	return w, nil
}

// Backends returns the list set last accepted (nil before any), sorted by
// name. The slice must not be modified. It is O(1).
func (w *DNSWatcher) Backends() []Backend {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Lookups returns how many lookups the DNSWatcher has made, and how many
// of them failed (or answered no record). It is O(1).
func (w *DNSWatcher) Lookups() (lookups, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lookups, w.fails
}

// Close stops the lookups and waits for the goroutine to return; set is
// not called after Close returns. Close always returns nil.
func (w *DNSWatcher) Close() error {
	w.cancel()
	<-w.done
	return nil
}

func (w *DNSWatcher) run(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, w.interval)
		bs, err := w.lookupOnce(lctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("httpmaglev: DNS lookup failed; keeping the last backends", "err", err)
			}
			continue
		}
		if err := w.offer(bs); err != nil {
			// current is unchanged: the next lookup offers the list again.
			w.log.Warn("httpmaglev: set backends failed", "backends", len(bs), "err", err)
		}
	}
}

// lookupOnce looks the name up once and returns the backends, sorted by
// name, or an error wrapping ErrDNS.
func (w *DNSWatcher) lookupOnce(ctx context.Context) ([]Backend, error) {
	bs, err := w.lookup(ctx)
	if err == nil && len(bs) == 0 {
		err = errors.New("no records")
	}
	w.mu.Lock()
	w.lookups++
	if err != nil {
		w.fails++
	}
	w.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDNS, w.what, err)
	}
	slices.SortFunc(bs, func(a, b Backend) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(bs, func(a, b Backend) bool { return a.Name == b.Name }), nil
}

// offer hands bs to set if they differ from the list set last accepted,
// and returns set's error.
func (w *DNSWatcher) offer(bs []Backend) error {
	// Only the lookups write current, one at a time: offer may read it
	// without the lock.
	if w.current != nil && slices.EqualFunc(bs, w.current, func(a, b Backend) bool { return a.Name == b.Name }) {
		return nil
	}
	if err := w.set(bs); err != nil {
		return err
	}
	w.mu.Lock()
	w.current = bs
	w.mu.Unlock()
	w.log.Info("httpmaglev: backends set from DNS", "backends", len(bs))
	return nil
}
