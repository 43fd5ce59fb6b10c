package etcdmaglev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// A Registration is a backend's endpoint, registered under an etcd lease
// that it keeps alive. A backend that stops without Deregister (a crash, a
// lost machine) stops renewing the lease, and etcd deletes its key when
// the TTL runs out: every Watcher, and every gRPC client on etcd's
// resolver, then drops it.
//
// A Registration is safe for concurrent use by multiple goroutines; it
// runs one goroutine, for the keep-alive, which Deregister stops, as does
// closing the client (the key then stays until the TTL runs out).
type Registration struct {
	client *clientv3.Client
	em     endpoints.Manager
	key    string
	ep     endpoints.Endpoint
	ttl    int64 // seconds, as asked
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex // guards lease
	lease clientv3.LeaseID
	once  sync.Once
	err   error // Deregister's result
}

// RegisterOptions are the optional settings of Register; the zero value is
// the defaults.
type RegisterOptions struct {
	// TTL is the lease's time to live: how long after a crash the key
	// stays. It is rounded up to whole seconds; 0 means 10s, and it must
	// otherwise be at least 1s. etcd raises it to its own minimum (about
	// 1.5 election timeouts: 2s with the default settings). Shorter TTLs
	// drop a crashed backend sooner, for more keep-alive traffic (one
	// renewal every TTL/3).
	TTL time.Duration

	// Logger receives lost leases and registrations (at Warn); nil means
	// no logging.
	Logger *slog.Logger
}

const defaultTTL = 10 * time.Second

// Register writes ep under the key prefix + "/" + ep.Addr, in the format of
// etcd's endpoints.Manager (what a Watcher and etcd's gRPC resolver read),
// attached to a new lease of opts.TTL, and starts a goroutine that keeps the
// lease alive. If the lease is lost anyway (etcd unreachable for longer
// than the TTL), the goroutine registers the endpoint again, under a new
// lease, as soon as etcd answers.
//
// ctx bounds the registration only. Register returns a *ConfigError
// (wrapping ErrInvalidConfig) for a nil client, an empty prefix or Addr,
// or a TTL under a second, and etcd's error if the lease or the key could
// not be written (then nothing is left registered or running).
func Register(ctx context.Context, client *clientv3.Client, prefix string, ep endpoints.Endpoint, opts RegisterOptions) (*Registration, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	ttl, logger := opts.TTL, opts.Logger
	if ttl == 0 {
		ttl = defaultTTL
	}
	switch {
	case client == nil:
		return nil, configError("client", "nil client")
	case prefix == "":
		return nil, configError("prefix", "empty prefix")
	case ep.Addr == "":
		return nil, configError("Addr", "empty Addr")
	case ttl < time.Second:
		return nil, configError("TTL", "%v under 1s", ttl)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	em, err := endpoints.NewManager(client, prefix)
	if err != nil {
		return nil, fmt.Errorf("etcdmaglev: %w", err)
	}
	r := &Registration{
		client: client,
		em:     em,
		key:    prefix + "/" + ep.Addr,
		ep:     ep,
		ttl:    int64((ttl + time.Second - 1) / time.Second),
		log:    logger.With("key", prefix+"/"+ep.Addr),
		done:   make(chan struct{}),
	}
	if err := r.register(ctx); err != nil {
		return nil, err
	}
	// Closing the client ends the keep-alive too, as a crash would.
	r.ctx, r.cancel = context.WithCancel(client.Ctx())
	go r.keepAlive()
	return r, nil
}

// Key returns the key the endpoint is registered under. It is O(1).
func (r *Registration) Key() string { return r.key }

// Lease returns the lease the key is attached to now. It is O(1).
func (r *Registration) Lease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// register grants a lease and writes the key under it.
func (r *Registration) register(ctx context.Context) error {
	g, err := r.client.Grant(ctx, r.ttl)
	if err != nil {
		return fmt.Errorf("etcdmaglev: grant lease: %w", err)
	}
	if err := r.em.AddEndpoint(ctx, r.key, r.ep, clientv3.WithLease(g.ID)); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_, _ = r.client.Revoke(rctx, g.ID) // the lease would expire anyway
		cancel()
		return fmt.Errorf("etcdmaglev: put %q: %w", r.key, err)
	}
	r.mu.Lock()
	r.lease = g.ID
	r.mu.Unlock()
	return nil
}

// keepAlive renews the lease until Deregister, and registers again if the
// lease is lost.
func (r *Registration) keepAlive() {
	defer close(r.done)
	for {
		ch, err := r.client.KeepAlive(r.ctx, r.Lease())
		if err == nil {
			for range ch { // each renewal; the channel closes when the lease is lost
			}
		}
		if r.ctx.Err() != nil {
			return
		}
		r.log.Warn("etcdmaglev: lease lost; registering again", "err", err)
		for {
			ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
			err := r.register(ctx)
			cancel()
			if err == nil {
				r.log.Info("etcdmaglev: registered again", "lease", int64(r.Lease()))
				break
			}
			if r.ctx.Err() != nil {
				return
			}
			r.log.Warn("etcdmaglev: registering again failed", "err", err)
			t := time.NewTimer(time.Second)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// Deregister stops the keep-alive, deletes the key (if it is still the
// Registration's own, under its lease) and revokes the lease. Watchers drop
// the backend as soon as they see the deletion, which is the order a
// graceful shutdown wants: Deregister first, then keep serving for a
// drain period (the requests already on their way, and those of proxies
// that have not yet seen the deletion), then stop the server, as with
// http.Server.Shutdown.
//
// ctx bounds the deletion and the revocation. Deregister returns etcd's
// error if either failed (a lease not revoked still ends with its TTL).
// Calls after the first return the first one's result.
func (r *Registration) Deregister(ctx context.Context) error {
	r.once.Do(func() {
		r.cancel()
		<-r.done
		lease := r.Lease()
		_, err := r.client.Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(r.key), "=", lease)).
			Then(clientv3.OpDelete(r.key)).
			Commit()
		if err != nil {
			r.err = fmt.Errorf("etcdmaglev: delete %q: %w", r.key, err)
		}
		// A lease already gone (it expired during an outage, or a failed
		// registration revoked it) is what Revoke was for.
		if _, err := r.client.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) && r.err == nil {
			r.err = fmt.Errorf("etcdmaglev: revoke lease: %w", err)
		}
	})
	return r.err
}
