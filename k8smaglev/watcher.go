package k8smaglev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/maglevlb/maglev/membership"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// reflectorBackoff is the wait between the reflector's attempts to list
// and watch again after the API server failed: 200 ms, doubling up to
// 5 s, with jitter. client-go's default (800 ms up to 30 s) would leave a
// fleet up to a minute behind an API server that restarted.
var reflectorBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: 5 * time.Second}

// WatchOptions are the optional settings of Watch; the zero value is the
// defaults.
type WatchOptions struct {
	// AddressType chooses the family of a dual-stack Service: the
	// Watcher reads the EndpointSlices of this address type only.
	// "" means discoveryv1.AddressTypeIPv4; AddressTypeIPv6 is the other
	// choice. (FQDN slices name no address a table can agree on.)
	AddressType discoveryv1.AddressType

	// Logger receives failed sets and re-lists (at Warn) and accepted
	// lists (at Info); nil means no logging. client-go's reflector logs
	// through it too: lost watches at Error, its own steps at levels below
	// Debug.
	Logger *slog.Logger
}

// Watch lists the EndpointSlices of svc (those labelled
// kubernetes.io/service-name=svc.Name in svc.Namespace), calls set with
// the endpoints of svc.Port (see Endpoints for which, and their weights),
// and starts goroutines that call set again each time the list changes,
// until Close: a membership.Watcher (see membership.Watch for what it
// promises about set, retries and Close). An HTTP Transport takes the
// list with its SetEndpoints. The client needs get, list and watch on
// endpointslices in the discovery.k8s.io group, in the namespace.
//
// The Watcher runs one client-go Reflector (the list-and-watch core of an
// informer) on the Service's EndpointSlices, into a store of its own: a
// watch event is applied as it arrives, and a relist (after a watch gap
// the API server could not fill) replaces the whole store at once, so set
// sees the difference once, never the halfway states between. A list
// equal to the last one set accepted (by membership.Equal: another
// slice's change, a label's, a relist that finds what the watch said)
// causes no call. While the API server cannot be reached, set is not
// called: the last list stays in force, and the backends never drop to
// zero because the control plane is down. An empty list is passed only
// when the API server says the Service has no ready endpoint.
//
// ctx bounds the first list only. Watch returns once set has accepted the
// first list, or an error: a *ConfigError (wrapping ErrInvalidConfig), one
// wrapping ErrList if the first list did not complete before ctx ended,
// or one wrapping set's error if set failed on the first list; in those
// cases no goroutine is left running. Each change costs O(n log n) in the
// n endpoints of the Service's slices, plus what set costs.
func Watch(ctx context.Context, client kubernetes.Interface, svc Service, set func([]membership.Endpoint) error, opts WatchOptions) (*membership.Watcher, error) {
	at := opts.AddressType
	if at == "" {
		at = discoveryv1.AddressTypeIPv4
	}
	switch {
	case set == nil:
		return nil, configError("set", "nil set function")
	case client == nil:
		return nil, configError("client", "nil client")
	case at != discoveryv1.AddressTypeIPv4 && at != discoveryv1.AddressTypeIPv6:
		return nil, configError("AddressType", "%q is neither IPv4 nor IPv6", at)
	}
	if err := svc.check(); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("service", svc.String(), "addressType", string(at))
	src := &source{client: client, svc: svc, at: at, log: logger, quiet: opts.Logger == nil, lerr: &lastError{}}
	w, err := membership.Watch(ctx, src, set, membership.Options{Logger: logger})
	if err != nil {
		if strings.HasPrefix(err.Error(), "k8smaglev: ") {
			return nil, err
		}
		return nil, fmt.Errorf("k8smaglev: %w", err)
	}
	return w, nil
}

// A source is the Source of a Watcher: one port of one Service.
type source struct {
	client kubernetes.Interface
	svc    Service
	at     discoveryv1.AddressType
	log    *slog.Logger
	quiet  bool // no Logger given: client-go logs nowhere either
	lerr   *lastError
}

// String returns "Kubernetes service NAMESPACE/NAME:PORT".
func (s *source) String() string { return "Kubernetes service " + s.svc.String() }

// Run runs the reflector into a store that hands each new list to update,
// until ctx ends. If the first list has not completed by then, it returns
// an error wrapping ErrList, ctx's cause and the API server's last error.
func (s *source) Run(ctx context.Context, update func([]membership.Endpoint, int64)) error {
	st := newStore(s.log, func(all []*discoveryv1.EndpointSlice) {
		update(endpoints(all, s.svc.Port, s.at), 0)
	})
	selector := discoveryv1.LabelServiceName + "=" + s.svc.Name
	slicesAPI := s.client.DiscoveryV1().EndpointSlices(s.svc.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			l, err := slicesAPI.List(ctx, o)
			s.lerr.record(err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			wi, err := slicesAPI.Watch(ctx, o)
			s.lerr.record(err)
			return wi, err
		},
	}
	// client-go logs through logr: hand it the Logger, so that its
	// reports of lost watches go where the Watcher's own go.
	lg := logr.FromSlogHandler(s.log.Handler())
	if s.quiet {
		lg = logr.Discard()
	}
	backoff := reflectorBackoff
	r := cache.NewReflectorWithOptions(lw, &discoveryv1.EndpointSlice{}, st, cache.ReflectorOptions{
		Name:    "k8smaglev " + s.svc.Namespace + "/" + s.svc.Name,
		Logger:  &lg,
		Backoff: &backoff,
	})
	r.RunWithContext(klog.NewContext(ctx, lg))
	if !st.synced() {
		if last := s.lerr.get(); last != nil {
			return fmt.Errorf("%w of %s: %w; last error: %w", ErrList, s.svc, context.Cause(ctx), last)
		}
		return fmt.Errorf("%w of %s: %w", ErrList, s.svc, context.Cause(ctx))
	}
	return ctx.Err()
}

// A store is the reflector's store: the Service's EndpointSlices by
// namespace/name. After each change, from the first Replace (the first
// list) on, it hands every slice to changed.
type store struct {
	log     *slog.Logger
	changed func([]*discoveryv1.EndpointSlice)

	mu     sync.Mutex // guards slices and listed
	slices map[string]*discoveryv1.EndpointSlice
	listed bool
}

var _ cache.ReflectorStore = (*store)(nil)

func newStore(log *slog.Logger, changed func([]*discoveryv1.EndpointSlice)) *store {
	return &store{log: log, changed: changed, slices: make(map[string]*discoveryv1.EndpointSlice)}
}

// synced reports whether the first list has completed.
func (s *store) synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listed
}

// signal hands the stored slices to changed, once the first list is in.
func (s *store) signal() {
	s.mu.Lock()
	if !s.listed {
		s.mu.Unlock()
		return
	}
	all := make([]*discoveryv1.EndpointSlice, 0, len(s.slices))
	for _, es := range s.slices {
		all = append(all, es)
	}
	s.mu.Unlock()
	s.changed(all)
}

func sliceKey(obj any) (string, *discoveryv1.EndpointSlice, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return "", nil, fmt.Errorf("k8smaglev: store given a %T, not an EndpointSlice", obj)
	}
	return es.Namespace + "/" + es.Name, es, nil
}

// Add records a slice the watch reports.
func (s *store) Add(obj any) error { return s.put(obj) }

// Update records a slice the watch reports changed.
func (s *store) Update(obj any) error { return s.put(obj) }

func (s *store) put(obj any) error {
	k, es, err := sliceKey(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.slices[k] = es
	s.mu.Unlock()
	s.signal()
	return nil
}

// Delete forgets a slice the watch reports deleted.
func (s *store) Delete(obj any) error {
	k, _, err := sliceKey(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.slices, k)
	s.mu.Unlock()
	s.signal()
	return nil
}

// Replace replaces every slice with a list's, at once.
func (s *store) Replace(list []any, _ string) error {
	m := make(map[string]*discoveryv1.EndpointSlice, len(list))
	for _, obj := range list {
		k, es, err := sliceKey(obj)
		if err != nil {
			return err
		}
		m[k] = es
	}
	s.mu.Lock()
	s.slices = m
	again := s.listed
	s.listed = true
	s.mu.Unlock()
	if again {
		s.log.Warn("k8smaglev: EndpointSlices listed again", "slices", len(m))
	}
	s.signal()
	return nil
}

// Resync does nothing: the Reflector runs with no resync period.
func (s *store) Resync() error { return nil }

// lastError keeps the API server's last error, for the error of a first
// list that does not complete.
type lastError struct {
	mu  sync.Mutex
	err error
}

func (l *lastError) record(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

func (l *lastError) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
