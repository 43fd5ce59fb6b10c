package k8smaglev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/maglevlb/maglev/httpmaglev"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The wait before set is called again after it failed: minSetRetry, doubled
// after each failure up to maxSetRetry, back to minSetRetry once set
// accepts a list (as etcdmaglev's Watcher waits).
const (
	minSetRetry = 100 * time.Millisecond
	maxSetRetry = 5 * time.Second
)

// reflectorBackoff is the wait between the reflector's attempts to list
// and watch again after the API server failed: 200 ms, doubling up to
// 5 s, with jitter. client-go's default (800 ms up to 30 s) would leave a
// fleet up to a minute behind an API server that restarted.
var reflectorBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: 5 * time.Second}

// A Watcher keeps a list of endpoints equal to the ready (and the
// terminating but serving) endpoints of one port of a Kubernetes Service,
// as its EndpointSlices say, and hands every new list to its set function.
// It runs one client-go Reflector (the list-and-watch core of an informer)
// on the Service's EndpointSlices, into a store of its own: a watch
// event is applied as it arrives, and a relist (after a watch gap the API
// server could not fill) replaces the whole store at once, so set sees
// the difference once, never the halfway states between.
//
// While the API server cannot be reached, the Watcher does not call set:
// the last list stays in force, and the backends never drop to zero
// because the control plane is down. An empty list is passed only when
// the API server says the Service has no ready endpoint.
//
// A Watcher is safe for concurrent use by multiple goroutines; it runs two
// goroutines (the reflector, and the one that calls set), which Close
// stops.
type Watcher struct {
	svc  Service
	at   discoveryv1.AddressType
	set  func([]Endpoint) error
	log  *slog.Logger
	st   *store
	lerr *lastError

	cancel context.CancelFunc
	done   chan struct{} // closed when both goroutines have returned
	refl   chan struct{} // closed when the reflector has returned

	// Only the goroutine that calls set (and Watch, before it starts)
	// touches these.
	applied []Endpoint  // the list set last accepted; nil before any
	retry   *time.Timer // fires when set failed and is to be called again; nil before the first failure
	retryOn bool        // a call of set is due when retry fires
	backoff time.Duration

	mu      sync.Mutex // guards current and sets
	current []Endpoint
	sets    int
}

// WatchOptions are the optional settings of Watch and WatchEndpoints; the
// zero value is the defaults.
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

// Watch is WatchEndpoints with a set function taking httpmaglev backends,
// as HTTPBackends makes them: a Transport's SetBackends, or any
// function. Each backend is named "IP:PORT", at http://IP:PORT, weight 1,
// and a terminating but serving endpoint has weight 0, which drains it:
// no new key goes to it, and the requests already routed to it finish.
func Watch(ctx context.Context, client kubernetes.Interface, svc Service, set func([]httpmaglev.Backend) error, opts WatchOptions) (*Watcher, error) {
	if set == nil {
		return nil, configError("set", "nil set function")
	}
	return WatchEndpoints(ctx, client, svc, func(eps []Endpoint) error { return set(HTTPBackends(eps)) }, opts)
}

// WatchEndpoints lists the EndpointSlices of svc (those labelled
// kubernetes.io/service-name=svc.Name in svc.Namespace), calls set with
// their endpoints (see Endpoint), and starts goroutines that call set
// again each time the list changes, until Close. The client needs get,
// list and watch on endpointslices in the discovery.k8s.io group, in the
// namespace.
//
// set is called from one goroutine at a time, with a list sorted by Addr,
// each address once, that it may keep. A list is passed only when it
// differs from the last one set accepted: an update that changes no
// endpoint (another slice's, a label's, a relist that finds what the
// watch said) causes no call. When set fails on a later list, the error
// is logged at Warn and the list is offered again, whether or not the
// Service changes meanwhile: after 100 ms, then after waits that double up
// to 5 s, until set accepts it or Close. A change meanwhile is offered at
// once.
//
// ctx bounds the first list only. WatchEndpoints returns once set has
// accepted the first list, or an error: a *ConfigError (wrapping
// ErrInvalidConfig), one wrapping ErrList if the first list did not
// complete before ctx ended, or one wrapping set's error if set failed on
// the first list; in those cases no goroutine is left running. Each
// change costs O(n log n) in the n endpoints of the Service's slices,
// plus what set costs.
func WatchEndpoints(ctx context.Context, client kubernetes.Interface, svc Service, set func([]Endpoint) error, opts WatchOptions) (*Watcher, error) {
	at := opts.AddressType
	if at == "" {
		at = discoveryv1.AddressTypeIPv4
	}
	switch {
	case client == nil:
		return nil, configError("client", "nil client")
	case set == nil:
		return nil, configError("set", "nil set function")
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
	w := &Watcher{
		svc:  svc,
		at:   at,
		set:  set,
		log:  logger.With("service", svc.String(), "addressType", string(at)),
		st:   newStore(),
		lerr: &lastError{},
		done: make(chan struct{}),
		refl: make(chan struct{}),
	}

	selector := discoveryv1.LabelServiceName + "=" + svc.Name
	slicesAPI := client.DiscoveryV1().EndpointSlices(svc.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			l, err := slicesAPI.List(ctx, o)
			w.lerr.record(err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			wi, err := slicesAPI.Watch(ctx, o)
			w.lerr.record(err)
			return wi, err
		},
	}
	// client-go logs through logr: hand it the Logger, so that its
	// reports of lost watches go where the Watcher's own go.
	w.st.log = w.log
	lg := logr.FromSlogHandler(w.log.Handler())
	if opts.Logger == nil {
		lg = logr.Discard()
	}
	backoff := reflectorBackoff
	r := cache.NewReflectorWithOptions(lw, &discoveryv1.EndpointSlice{}, w.st, cache.ReflectorOptions{
		Name:    "k8smaglev " + svc.Namespace + "/" + svc.Name,
		Logger:  &lg,
		Backoff: &backoff,
	})
	rctx, cancel := context.WithCancel(klog.NewContext(context.Background(), lg))
	w.cancel = cancel
	go func() {
		defer close(w.refl)
		r.RunWithContext(rctx)
	}()

	select {
	case <-w.st.synced:
	case <-ctx.Done():
		cancel()
		<-w.refl
		if last := w.lerr.get(); last != nil {
			return nil, fmt.Errorf("%w of %s: %w; last error: %w", ErrList, svc, ctx.Err(), last)
		}
		return nil, fmt.Errorf("%w of %s: %w", ErrList, svc, ctx.Err())
	}
	list := w.st.endpoints(svc.Port, at)
	if err := w.offer(list); err != nil {
		cancel()
		<-w.refl
		return nil, fmt.Errorf("k8smaglev: %s: set failed on the first list of %d endpoints: %w", svc, len(list), err)
	}
	go w.run(rctx)
	return w, nil
}

// Endpoints returns the list set last accepted, sorted by Addr. The slice
// must not be modified. It is O(1).
func (w *Watcher) Endpoints() []Endpoint {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Backends returns HTTPBackends(w.Endpoints()): the list a Watch's set
// function last accepted, sorted by name. It is O(n).
func (w *Watcher) Backends() []httpmaglev.Backend {
	return HTTPBackends(w.Endpoints())
}

// Sets returns how many times set has been called. It is O(1).
func (w *Watcher) Sets() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sets
}

// Close stops the watch and waits for the Watcher's goroutines to return.
// set is not called after Close returns. Close does not close the client,
// and always returns nil.
func (w *Watcher) Close() error {
	w.cancel()
	<-w.refl
	<-w.done
	return nil
}

// offer hands list to set if it differs from the last list set accepted,
// and returns set's error.
func (w *Watcher) offer(list []Endpoint) error {
	if w.applied != nil && slices.Equal(list, w.applied) {
		return nil
	}
	err := w.set(list)
	w.mu.Lock()
	w.sets++
	if err == nil {
		w.current = list
	}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	w.applied = list
	draining := 0
	for _, e := range list {
		if e.Draining {
			draining++
		}
	}
	w.log.Info("k8smaglev: endpoints set", "endpoints", len(list), "draining", draining)
	return nil
}

// publish offers the store's endpoints to set and, if set fails, logs
// that and arms the retry timer with the next backoff; if set accepts (or
// has nothing new to accept), it disarms it.
func (w *Watcher) publish() {
	list := w.st.endpoints(w.svc.Port, w.at)
	if err := w.offer(list); err != nil {
		w.backoff = min(max(2*w.backoff, minSetRetry), maxSetRetry)
		w.log.Warn("k8smaglev: set endpoints failed; retrying", "endpoints", len(list), "retry_in", w.backoff, "err", err)
		if w.retry == nil {
			w.retry = time.NewTimer(w.backoff)
		} else {
			w.retry.Reset(w.backoff)
		}
		w.retryOn = true
		return
	}
	if w.retryOn {
		w.retry.Stop()
		w.retryOn = false
	}
	w.backoff = 0
}

// run calls set for each change of the store, and again when a retry is
// due, until ctx ends.
func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	defer func() {
		if w.retry != nil {
			w.retry.Stop()
		}
	}()
	for {
		var retryC <-chan time.Time
		if w.retryOn {
			retryC = w.retry.C
		}
		select {
		case <-ctx.Done():
			return
		case <-w.st.changed:
			w.publish()
		case <-retryC:
			w.retryOn = false
			w.publish()
		}
	}
}

// A store is the reflector's store: the Service's EndpointSlices by
// namespace/name. It signals changed after each change, and closes synced
// at the first Replace (the first list).
type store struct {
	changed chan struct{} // capacity 1: a pending signal stands for any number of changes
	synced  chan struct{}

	log *slog.Logger

	mu     sync.Mutex // guards slices and listed
	slices map[string]*discoveryv1.EndpointSlice
	listed bool
}

var _ cache.ReflectorStore = (*store)(nil)

func newStore() *store {
	return &store{
		changed: make(chan struct{}, 1),
		synced:  make(chan struct{}),
		slices:  make(map[string]*discoveryv1.EndpointSlice),
		log:     slog.New(slog.DiscardHandler),
	}
}

func (s *store) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
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
	first := !s.listed
	s.listed = true
	s.mu.Unlock()
	if first {
		close(s.synced)
	} else {
		s.log.Warn("k8smaglev: EndpointSlices listed again", "slices", len(m))
	}
	s.signal()
	return nil
}

// Resync does nothing: the Reflector runs with no resync period.
func (s *store) Resync() error { return nil }

// endpoints returns the endpoints of port in the stored slices of address
// type at.
func (s *store) endpoints(port string, at discoveryv1.AddressType) []Endpoint {
	s.mu.Lock()
	all := make([]*discoveryv1.EndpointSlice, 0, len(s.slices))
	for _, es := range s.slices {
		all = append(all, es)
	}
	s.mu.Unlock()
	return endpoints(all, port, at)
}

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
