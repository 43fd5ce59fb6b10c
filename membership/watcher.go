package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The wait before set is called again after it rejected a list: minRetry,
// doubled after each rejection up to maxRetry, back to minRetry once set
// accepts a list.
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
)

// A Source reads one membership (an etcd prefix, a Service's
// EndpointSlices, a DNS name) for a Watcher. etcdmaglev, k8smaglev and
// this package's DNS watchers are Sources; a new one is a type with these
// two methods.
type Source interface {
	// Run reads the membership until ctx ends, and hands each list of
	// endpoints it reads to update, which takes the slice (the caller
	// must not use it again). It passes the first list as soon as it has
	// it, and then every list that may differ from the one before: a
	// list equal to the last one is harmless (the Watcher drops it), so
	// a source need not compare. A source that cannot reach its registry
	// keeps trying, and passes nothing meanwhile. version is the source's
	// position (etcd's revision; 0 for a source that has none), reported
	// by Watcher.Version. update may be called from any goroutine, one
	// call at a time.
	//
	// Run returns when ctx ends; its error is then ignored. It may return
	// earlier: before its first list, with the reason it cannot read one
	// (Watch returns that error), or after it, when the membership cannot
	// be read any more (its client was closed): the Watcher then stops,
	// keeping the last list. Until the first list, ctx ends when Watch's
	// context does, and context.Cause(ctx) is then that context's error,
	// which the error Run returns should wrap.
	Run(ctx context.Context, update func(eps []Endpoint, version int64)) error

	// String names the source in errors: "DNS web.test:80", "etcd prefix
	// \"services/web/\"".
	String() string
}

// Options are the optional settings of Watch; the zero value is the
// defaults.
type Options struct {
	// Logger receives rejected lists (at Warn), accepted lists (at Info)
	// and a source that stopped on its own (at Warn); nil means no
	// logging.
	Logger *slog.Logger
}

// A Watcher runs a Source, and hands every new list it reads to a set
// function: the one life cycle of every membership watcher in the
// project. It runs two goroutines (the source's Run, and the one that
// calls set), which Close stops.
//
// A Watcher is safe for concurrent use by multiple goroutines.
type Watcher struct {
	src    Source
	set    func([]Endpoint) error
	log    *slog.Logger
	cancel context.CancelCauseFunc
	ran    chan struct{} // closed when Run has returned
	done   chan struct{} // closed when the goroutine that calls set has returned
	wake   chan struct{} // capacity 1: a new list is waiting in next

	mu      sync.Mutex // guards the fields up to the blank line
	next    []Endpoint // the source's latest list, not yet taken; valid when hasNext
	nextVer int64
	hasNext bool
	current []Endpoint // the list set last accepted; written only by the goroutine that calls set (and Watch before it starts)
	version int64      // the source's version of current, or of a later list equal to it
	sets    int
	started bool  // Watch has returned the Watcher
	runErr  error // what Run returned

	// Only the goroutine that calls set (and Watch, before it starts)
	// touches these.
	failed    []Endpoint  // the list set rejected last, while a retry of it is due
	failedVer int64       // its version
	retry     *time.Timer // fires when the retry of failed is due; nil before the first rejection
	retryOn   bool        // a retry is due when retry fires
	backoff   time.Duration
}

// Watch runs src, and calls set with its first list, in canonical order
// (see Canonical), before it returns; it then calls set again with each
// list src reads that differs from the last one set accepted (by Equal),
// until Close, or until src stops on its own. set is called from one
// goroutine at a time, with a list that it may keep and must not modify;
// it is the consumer's update: a function adapting the endpoints to its
// backends (httpmaglev.Transport's SetEndpoints, ...). A list equal to
// the last one set accepted causes no call, so a registry rewritten as
// it was rebuilds no table; while src reads nothing new, set is not
// called, so the last list stays in force while the registry is down.
//
// When set rejects a later list, the error is logged at Warn and the list
// is offered again, whether or not src reads anything meanwhile: after
// 100 ms, then after waits that double up to 5 s, until set accepts it or
// Close. A list src reads meanwhile that differs from the rejected one is
// offered at once (and, rejected, waits for the next, longer, backoff);
// one equal to it waits for the retry.
//
// ctx bounds the first list only. Watch returns the Watcher once set has
// accepted the first list, or an error: a *ConfigError for a nil src or
// set; src's own error if Run returned before its first list; if ctx ended
// first, Run's error (which wraps ctx's, see Source) or one wrapping ctx's
// error; or one wrapping set's error, naming src, if set rejected the
// first list. In those cases no goroutine is left running. Each list
// costs O(n log n) in its n endpoints, plus what set costs.
func Watch(ctx context.Context, src Source, set func([]Endpoint) error, opts Options) (*Watcher, error) {
	switch {
	case src == nil:
		return nil, configError("src", "nil source")
	case set == nil:
		return nil, configError("set", "nil set function")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rctx, cancel := context.WithCancelCause(context.Background())
	w := &Watcher{
		src:    src,
		set:    set,
		log:    logger,
		cancel: cancel,
		ran:    make(chan struct{}),
		done:   make(chan struct{}),
		wake:   make(chan struct{}, 1),
	}
	unlink := context.AfterFunc(ctx, func() { cancel(ctx.Err()) })
	go w.run(rctx)

	select {
	case <-w.wake:
	case <-w.ran:
	case <-ctx.Done():
	}
	// ctx ended before the first list was taken: when unlink finds the
	// AfterFunc run, or when it stops it before it ran (ctx ended, and the
	// select took that, but the AfterFunc's goroutine had not started), in
	// which case the source must be stopped here.
	if !unlink() || ctx.Err() != nil {
		cancel(ctx.Err())
		<-w.ran
		if err := w.sourceErr(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("membership: %v: no first list: %w", src, ctx.Err())
	}
	eps, ver, ok := w.take()
	if !ok { // Run returned without a list
		<-w.ran
		if err := w.sourceErr(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("membership: %v: the source stopped before its first list", src)
	}
	if err := w.call(eps, ver); err != nil {
		cancel(errors.New("membership: set rejected the first list"))
		<-w.ran
		return nil, fmt.Errorf("membership: %v: set failed on the first list of %d endpoints: %w", src, len(eps), err)
	}
	w.mu.Lock()
	w.started = true
	w.mu.Unlock()
	go w.deliver(rctx)
	return w, nil
}

// Endpoints returns the list set last accepted, in canonical order. The
// slice must not be modified. It is O(1).
func (w *Watcher) Endpoints() []Endpoint {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Version returns the source's version (etcd's revision) of the list
// Endpoints returns, or of a later list the source read that is equal to
// it; 0 for a source that has no versions. It is O(1).
func (w *Watcher) Version() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.version
}

// Sets returns how many times set has been called, the rejected calls
// included. It is O(1).
func (w *Watcher) Sets() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sets
}

// Close stops the source and waits for the Watcher's goroutines to
// return; set is not called after Close returns. A second Close does
// nothing. Close always returns nil.
func (w *Watcher) Close() error {
	w.cancel(nil)
	<-w.ran
	<-w.done
	return nil
}

// run runs the source, and stops the Watcher when it returns.
func (w *Watcher) run(ctx context.Context) {
	defer close(w.ran)
	err := w.src.Run(ctx, w.update)
	w.mu.Lock()
	w.runErr = err
	started := w.started
	w.mu.Unlock()
	if started && ctx.Err() == nil {
		w.log.Warn("membership: the source stopped; keeping the last endpoints", "source", w.src.String(), "err", err)
	}
	w.cancel(errors.New("membership: the source stopped"))
}

// sourceErr returns what Run returned. Run has returned.
func (w *Watcher) sourceErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runErr
}

// update is the function Run hands its lists to.
func (w *Watcher) update(eps []Endpoint, version int64) {
	eps = Canonical(eps)
	w.mu.Lock()
	w.next, w.nextVer, w.hasNext = eps, version, true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is pending: it takes this list
	}
}

// take returns the list update left, if any, and clears it.
func (w *Watcher) take() ([]Endpoint, int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	eps, ver, ok := w.next, w.nextVer, w.hasNext
	w.next, w.hasNext = nil, false
	return eps, ver, ok
}

// call calls set with eps, and makes eps the current list if set accepts
// it.
func (w *Watcher) call(eps []Endpoint, ver int64) error {
	err := w.set(eps)
	w.mu.Lock()
	w.sets++
	if err == nil {
		w.current, w.version = eps, ver
	}
	w.mu.Unlock()
	if err == nil {
		drained := 0
		for _, e := range eps {
			if e.Weight == 0 {
				drained++
			}
		}
		w.log.Info("membership: endpoints set", "endpoints", len(eps), "drained", drained, "version", ver)
	}
	return err
}

// deliver calls set for each new list, and again when a retry is due,
// until ctx ends.
func (w *Watcher) deliver(ctx context.Context) {
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
		case <-w.wake:
			if eps, ver, ok := w.take(); ok {
				w.offer(ctx, eps, ver, false)
			}
		case <-retryC:
			w.retryOn = false
			w.offer(ctx, w.failed, w.failedVer, true)
		}
	}
}

// offer calls set with eps unless it equals the current list, or, when it
// is not the retry, the list set rejected last (whose retry is due later);
// a rejection arms the retry with the next backoff.
func (w *Watcher) offer(ctx context.Context, eps []Endpoint, ver int64, retry bool) {
	if ctx.Err() != nil {
		return
	}
	if Equal(eps, w.current) { // only this goroutine writes current
		w.mu.Lock()
		w.version = ver
		w.mu.Unlock()
		w.settle() // back to the accepted list: nothing to retry
		return
	}
	if !retry && w.failed != nil && Equal(eps, w.failed) {
		w.failedVer = ver
		return
	}
	err := w.call(eps, ver)
	if err == nil {
		w.settle()
		return
	}
	w.failed, w.failedVer = eps, ver
	if w.failed == nil {
		w.failed = []Endpoint{} // rejected, and empty: still a list to retry
	}
	w.backoff = min(max(2*w.backoff, minRetry), maxRetry)
	w.log.Warn("membership: set endpoints failed; retrying", "endpoints", len(eps), "version", ver, "retry_in", w.backoff, "err", err)
	if w.retry == nil {
		w.retry = time.NewTimer(w.backoff)
	} else {
		w.retry.Reset(w.backoff)
	}
	w.retryOn = true
}

// settle forgets the rejected list and its retry, and resets the backoff.
func (w *Watcher) settle() {
	if w.retryOn {
		w.retry.Stop()
		w.retryOn = false
	}
	w.failed = nil
	w.backoff = 0
}
