package etcdmaglev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/maglevlb/maglev/httpmaglev"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryInterval is the wait between attempts to list the prefix again, or
// to watch it again, after etcd failed.
const retryInterval = time.Second

// The wait before set is called again after it failed: minSetRetry, doubled
// after each failure up to maxSetRetry, back to minSetRetry once set
// accepts a list.
const (
	minSetRetry = 100 * time.Millisecond
	maxSetRetry = 5 * time.Second
)

// A Watcher keeps a backend list equal to the endpoints registered under an
// etcd prefix, and hands every new list to its set function. It starts
// from a consistent snapshot (a Get at one revision, then a Watch from the
// next), so no change is missed or applied twice; it resumes watching
// where it left off when etcd comes back after an outage or a restart, and
// lists the prefix again when that revision has been compacted. While
// etcd cannot be reached it does not call set at all: the last list stays
// in force, and the backends never drop to zero because the registry is
// down.
//
// A Watcher is safe for concurrent use by multiple goroutines; it runs
// one goroutine, which Close stops.
type Watcher struct {
	client *clientv3.Client
	key    string // the prefix and "/", as etcd's endpoints.Manager watches
	set    func([]httpmaglev.Backend) error
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// Only the watching goroutine (and Watch, before it starts) writes
	// these.
	byKey   map[string]httpmaglev.Backend // the parsed endpoints, by key
	rev     int64                         // the revision byKey is at
	applied []httpmaglev.Backend          // the list set last accepted
	retry   *time.Timer                   // fires when set failed and is to be called again; nil before the first failure
	retryOn bool                          // a call of set is due when retry fires
	backoff time.Duration                 // the last wait before a retry of set

	mu      sync.Mutex // guards current
	current []httpmaglev.Backend
	curRev  int64
	sets    int
}

// WatchOptions are the optional settings of Watch; the zero value is the
// defaults.
type WatchOptions struct {
	// Logger receives ignored values, lost watches, re-lists and failed
	// sets (at Warn) and accepted lists (at Info); nil means no logging.
	Logger *slog.Logger
}

// Watch lists the endpoints under prefix, calls set with their backends
// (see HTTPBackend), and starts a goroutine that calls set again each time the
// list changes, until Close or until the client is closed. The keys are those an
// endpoints.Manager for the target prefix writes, and etcd's gRPC resolver
// reads for "etcd:///" + prefix: prefix + "/" + anything, each holding the
// JSON of an endpoints.Endpoint. A trailing "/" of prefix is dropped.
//
// set is called from one goroutine at a time, with a list sorted by name
// that it may keep; it is a Transport's SetBackends, or any function. A
// list is passed only when it differs from the last one set accepted (in
// names, URLs or weights): an update that changes no backend causes no
// rebuild. When set fails on a later list, the error is logged at Warn and
// the list is offered again, whether or not etcd changes meanwhile: after
// 100 ms, then after waits that double up to 5 s, until set accepts it or
// Close. A change meanwhile is offered at once, as the list it makes.
//
// A value that names no backend (see HTTPBackend and ErrBadEndpoint) is
// ignored and logged, with its key, at Warn: a new key with such a value
// is left out, and a key that had an endpoint keeps it, as etcd's own
// watcher (and so its gRPC resolver) does. Losses of the watch and
// re-lists are logged at Warn too. Several keys may name one Addr (a
// backend registered again before its old lease ended): it is one
// backend.
//
// ctx bounds the first list only. Watch returns once set has accepted the
// first list, or an error: a *ConfigError (wrapping ErrInvalidConfig), one wrapping
// etcd's error if the first list failed, or one wrapping set's error if
// set failed on the first list; in those cases no goroutine is left
// running. Each list is O(n log n) in the number n of keys, plus what set
// costs.
func Watch(ctx context.Context, client *clientv3.Client, prefix string, set func([]httpmaglev.Backend) error, opts WatchOptions) (*Watcher, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	switch {
	case client == nil:
		return nil, configError("client", "nil client")
	case prefix == "":
		return nil, configError("prefix", "empty prefix")
	case set == nil:
		return nil, configError("set", "nil set function")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{
		client: client,
		key:    prefix + "/",
		set:    set,
		log:    logger.With("prefix", prefix),
		done:   make(chan struct{}),
	}
	if err := w.list(ctx); err != nil {
		return nil, fmt.Errorf("etcdmaglev: list %q: %w", w.key, err)
	}
	list := backendList(w.byKey)
	if err := w.offer(list); err != nil {
		return nil, fmt.Errorf("etcdmaglev: set failed on the first list of %d backends under %q: %w", len(list), w.key, err)
	}
	// The client's context ends when the client is closed: closing the
	// client stops the Watcher, as it stops a Registration's keep-alive.
	w.ctx, w.cancel = context.WithCancel(client.Ctx())
	go w.run()
	return w, nil
}

// Backends returns the list the Watcher last handed to set and set
// accepted (nil before any), sorted by name, as a DNSWatcher's Backends
// does. The slice must not be modified. It is O(1).
func (w *Watcher) Backends() []httpmaglev.Backend {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Revision returns the etcd revision the list Backends returns reflects
// (0 before any). It is O(1).
func (w *Watcher) Revision() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.curRev
}

// Sets returns how many times set has been called. It is O(1).
func (w *Watcher) Sets() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sets
}

// Close stops the watch and waits for its goroutine to return. set is not
// called after Close returns. Close does not close the client, and always
// returns nil.
func (w *Watcher) Close() error {
	w.cancel()
	<-w.done
	return nil
}

// list reads every key under the prefix at one revision into byKey; the
// caller publishes the backends they name.
func (w *Watcher) list(ctx context.Context) error {
	resp, err := w.client.Get(ctx, w.key, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	old := w.byKey
	w.byKey = make(map[string]httpmaglev.Backend, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if b, ok := old[string(kv.Key)]; ok {
			w.byKey[string(kv.Key)] = b // kept if the new value does not parse
		}
		w.put(string(kv.Key), kv.Value)
	}
	w.rev = resp.Header.Revision
	return nil
}

// put records the backend a key's value names, or, if it names none, logs
// that and leaves the key as it was, as etcd's own watcher does.
func (w *Watcher) put(key string, v []byte) {
	b, err := parseValue(v)
	if err != nil {
		w.log.Warn("etcdmaglev: endpoint ignored", "key", key, "err", err)
		return
	}
	w.byKey[key] = b
}

// offer hands list, the backends byKey names, to set if they differ from
// the last list set accepted, and returns set's error.
func (w *Watcher) offer(list []httpmaglev.Backend) error {
	if w.applied != nil && sameBackends(list, w.applied) {
		w.mu.Lock()
		w.curRev = w.rev
		w.mu.Unlock()
		return nil
	}
	err := w.set(list)
	w.mu.Lock()
	w.sets++
	if err == nil {
		w.current, w.curRev = list, w.rev
	}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	w.applied = list
	w.log.Info("etcdmaglev: backends set", "backends", len(list), "revision", w.rev)
	return nil
}

// publish offers the backends to set and, if set fails, logs that and
// arms the retry timer with the next backoff; if set accepts (or has
// nothing new to accept), it disarms it.
func (w *Watcher) publish() {
	list := backendList(w.byKey)
	err := w.offer(list)
	if err == nil {
		if w.retryOn {
			w.retry.Stop()
			w.retryOn = false
		}
		w.backoff = 0
		return
	}
	w.backoff = min(max(2*w.backoff, minSetRetry), maxSetRetry)
	w.log.Warn("etcdmaglev: set backends failed; retrying", "backends", len(list), "revision", w.rev, "retry_in", w.backoff, "err", err)
	if w.retry == nil {
		w.retry = time.NewTimer(w.backoff)
	} else {
		w.retry.Reset(w.backoff)
	}
	w.retryOn = true
}

// retryC returns the channel that receives when set is to be called again,
// or nil if no call is due.
func (w *Watcher) retryC() <-chan time.Time {
	if !w.retryOn {
		return nil
	}
	return w.retry.C
}

// retrySet calls set again, when the retry timer has fired.
func (w *Watcher) retrySet() {
	w.retryOn = false
	w.publish()
}

// run watches from the revision after the one listed, resuming after
// failures and listing again after a compaction, until Close.
func (w *Watcher) run() {
	defer close(w.done)
	defer func() {
		if w.retry != nil {
			w.retry.Stop()
		}
	}()
	for {
		err := w.watch()
		if w.ctx.Err() != nil {
			return
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			w.log.Warn("etcdmaglev: watch revision compacted; listing again", "revision", w.rev+1)
			for {
				lctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
				err := w.list(lctx)
				cancel()
				if err == nil {
					w.publish()
					break
				}
				if w.ctx.Err() != nil {
					break
				}
				w.log.Warn("etcdmaglev: list failed; keeping the last backends", "err", err)
				if !w.sleep(retryInterval) {
					return
				}
			}
			continue
		}
		w.log.Warn("etcdmaglev: watch lost; keeping the last backends and resuming", "revision", w.rev+1, "err", err)
		if !w.sleep(retryInterval) {
			return
		}
	}
}

// sleep waits d, calling set again meanwhile if a retry is due, and
// reports false if the Watcher was closed meanwhile.
func (w *Watcher) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return false
		case <-t.C:
			return true
		case <-w.retryC():
			w.retrySet()
		}
	}
}

// watch applies the changes after w.rev until the watch fails, and returns
// why. It calls set again meanwhile when a retry is due.
func (w *Watcher) watch() error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
	defer cancel()
	wch := w.client.Watch(ctx, w.key, clientv3.WithPrefix(), clientv3.WithRev(w.rev+1), clientv3.WithProgressNotify())
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-wch:
		case <-w.retryC():
			w.retrySet()
			continue
		}
		if !ok {
			break
		}
		if resp.CompactRevision != 0 {
			return rpctypes.ErrCompacted
		}
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Canceled {
			return errors.New("watch canceled")
		}
		for _, ev := range resp.Events {
			switch ev.Type {
			case clientv3.EventTypePut:
				w.put(string(ev.Kv.Key), ev.Kv.Value)
			case clientv3.EventTypeDelete:
				delete(w.byKey, string(ev.Kv.Key))
			}
		}
		// A response's header may be ahead of its events when a lagging
		// watch is sent its backlog in batches: only an event's revision,
		// or a progress notification's, says all before it has arrived.
		if n := len(resp.Events); n > 0 {
			w.rev = max(w.rev, resp.Events[n-1].Kv.ModRevision)
			w.publish()
		} else if resp.IsProgressNotify() {
			w.rev = max(w.rev, resp.Header.Revision)
		}
	}
	if err := w.ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch channel closed")
}
