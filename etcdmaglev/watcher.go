package etcdmaglev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/maglevlb/maglev/membership"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryInterval is the wait between attempts to list the prefix again, or
// to watch it again, after etcd failed.
const retryInterval = time.Second

// WatchOptions are the optional settings of Watch; the zero value is the
// defaults.
type WatchOptions struct {
	// Logger receives ignored values, lost watches, re-lists and failed
	// sets (at Warn) and accepted lists (at Info); nil means no logging.
	Logger *slog.Logger
}

// Watch lists the endpoints under prefix, calls set with them (see
// Endpoint), and starts goroutines that call set again each time the list
// changes, until Close or until the client is closed: a membership.Watcher
// (see membership.Watch for what it promises about set, retries and
// Close) whose Version is the etcd revision of its list. The keys are
// those an endpoints.Manager for the target prefix writes, and etcd's gRPC
// resolver reads for "etcd:///" + prefix: prefix + "/" + anything, each
// holding the JSON of an endpoints.Endpoint. A trailing "/" of prefix is
// dropped. An HTTP Transport takes the list with its SetEndpoints.
//
// The Watcher starts from a consistent snapshot (a Get at one revision,
// then a Watch from the next), so no change is missed or applied twice;
// it resumes watching where it left off when etcd comes back after an
// outage or a restart, and lists the prefix again when that revision has
// been compacted. While etcd cannot be reached it does not call set: the
// last list stays in force, and the backends never drop to zero because
// the registry is down. A list equal to the last one set accepted (by
// membership.Equal: an endpoint written again as it was, a second key for
// an Addr present) causes no call.
//
// A value that names no endpoint (see Endpoint and ErrBadEndpoint) is
// ignored and logged, with its key, at Warn: a new key with such a value
// is left out, and a key that had an endpoint keeps it, as etcd's own
// watcher (and so its gRPC resolver) does. Losses of the watch and
// re-lists are logged at Warn too. Several keys may name one Addr (a
// backend registered again before its old lease ended): it is one
// endpoint, by membership.Canonical's rule.
//
// ctx bounds the first list only. Watch returns once set has accepted the
// first list, or an error: a *ConfigError (wrapping ErrInvalidConfig), one
// wrapping etcd's error (or ctx's) if the first list failed, or one
// wrapping set's error if set failed on the first list; in those cases no
// goroutine is left running. Each list is O(n log n) in the number n of
// keys, plus what set costs.
func Watch(ctx context.Context, client *clientv3.Client, prefix string, set func([]membership.Endpoint) error, opts WatchOptions) (*membership.Watcher, error) {
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
	logger = logger.With("prefix", prefix)
	src := &source{client: client, key: prefix + "/", log: logger}
	w, err := membership.Watch(ctx, src, set, membership.Options{Logger: logger})
	if err != nil {
		if strings.HasPrefix(err.Error(), "etcdmaglev: ") {
			return nil, err
		}
		return nil, fmt.Errorf("etcdmaglev: %w", err)
	}
	return w, nil
}

// A source is the Source of a Watcher: one prefix of one client.
type source struct {
	client *clientv3.Client
	key    string // the prefix and "/", as etcd's endpoints.Manager watches
	log    *slog.Logger

	// Only Run's goroutine touches these.
	byKey map[string]membership.Endpoint // the parsed endpoints, by key
	rev   int64                          // the revision byKey is at
}

// String returns `etcd prefix "PREFIX/"`.
func (s *source) String() string { return fmt.Sprintf("etcd prefix %q", s.key) }

// Run lists the prefix, hands the list to update, and watches from the
// revision after the one listed, resuming after failures and listing
// again after a compaction, until ctx ends or the client is closed.
func (s *source) Run(ctx context.Context, update func([]membership.Endpoint, int64)) error {
	// The client's context ends when the client is closed: closing the
	// client stops the Watcher, as it stops a Registration's keep-alive.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.client.Ctx(), cancel)()
	if err := s.list(ctx); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, context.Cause(ctx))
		}
		return fmt.Errorf("etcdmaglev: list %q: %w", s.key, err)
	}
	update(endpointList(s.byKey), s.rev)
	for {
		err := s.watch(ctx, update)
		if ctx.Err() != nil {
			return s.stopped(ctx)
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			s.log.Warn("etcdmaglev: watch revision compacted; listing again", "revision", s.rev+1)
			for {
				lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
				err := s.list(lctx)
				lcancel()
				if err == nil {
					update(endpointList(s.byKey), s.rev)
					break
				}
				if ctx.Err() != nil {
					return s.stopped(ctx)
				}
				s.log.Warn("etcdmaglev: list failed; keeping the last endpoints", "err", err)
				if !sleep(ctx, retryInterval) {
					return s.stopped(ctx)
				}
			}
			continue
		}
		s.log.Warn("etcdmaglev: watch lost; keeping the last endpoints and resuming", "revision", s.rev+1, "err", err)
		if !sleep(ctx, retryInterval) {
			return s.stopped(ctx)
		}
	}
}

// stopped returns Run's error once ctx has ended: the client's closing,
// if that ended it.
func (s *source) stopped(ctx context.Context) error {
	if s.client.Ctx().Err() != nil {
		return errors.New("etcdmaglev: the etcd client was closed")
	}
	return ctx.Err()
}

// sleep waits d, and reports false if ctx ended meanwhile.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// list reads every key under the prefix at one revision into byKey.
func (s *source) list(ctx context.Context) error {
	resp, err := s.client.Get(ctx, s.key, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	old := s.byKey
	s.byKey = make(map[string]membership.Endpoint, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if e, ok := old[string(kv.Key)]; ok {
			s.byKey[string(kv.Key)] = e // kept if the new value does not parse
		}
		s.put(string(kv.Key), kv.Value)
	}
	s.rev = resp.Header.Revision
	return nil
}

// put records the endpoint a key's value names, or, if it names none,
// logs that and leaves the key as it was, as etcd's own watcher does.
func (s *source) put(key string, v []byte) {
	e, err := parseValue(v)
	if err != nil {
		s.log.Warn("etcdmaglev: endpoint ignored", "key", key, "err", err)
		return
	}
	s.byKey[key] = e
}

// watch applies the changes after s.rev, handing each new list to update,
// until the watch fails, and returns why.
func (s *source) watch(ctx context.Context, update func([]membership.Endpoint, int64)) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.client.Watch(ctx, s.key, clientv3.WithPrefix(), clientv3.WithRev(s.rev+1), clientv3.WithProgressNotify())
	for resp := range wch {
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
				s.put(string(ev.Kv.Key), ev.Kv.Value)
			case clientv3.EventTypeDelete:
				delete(s.byKey, string(ev.Kv.Key))
			}
		}
		// A response's header may be ahead of its events when a lagging
		// watch is sent its backlog in batches: only an event's revision,
		// or a progress notification's, says all before it has arrived.
		if n := len(resp.Events); n > 0 {
			s.rev = max(s.rev, resp.Events[n-1].Kv.ModRevision)
			update(endpointList(s.byKey), s.rev)
		} else if resp.IsProgressNotify() {
			s.rev = max(s.rev, resp.Header.Revision)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch channel closed")
}
