// Package k8sresolver is a gRPC resolver of Kubernetes Services: a channel
// on "k8s:///SERVICE.NAMESPACE:PORT" gets the ready endpoints of the
// Service's port from its EndpointSlices, through a k8smaglev Watcher, so
// that grpcmaglev balances over the same set, with the same names
// ("IP:PORT"), as every httpmaglev Transport fed by k8smaglev.Watch, with
// no DNS in between:
//
//	import "github.com/maglevlb/maglev/k8smaglev/k8sresolver"
//
//	conn, err := grpc.NewClient("k8s:///users.prod:grpc",
//		grpc.WithResolvers(k8sresolver.NewBuilder(client, k8sresolver.Options{Logger: logger})),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"maglev": {"requestHashHeader": "x-user"}}]}`),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// PORT is the port's name in the Service, or the endpoints' port number
// (the Service's targetPort), as in k8smaglev.Service.
//
// A terminating endpoint, even one still serving (weight 0 in the
// Watcher's list), is left out of the resolver's state: only grpcmaglev
// drains an endpoint of weight 0, gRPC's own policies read it as 1 (see
// docs/conventions.md), and a resolver serves any policy; a channel that
// loses an address closes its connection gracefully, so RPCs in flight on
// it finish. While the API server is unreachable the last state stays.
package k8sresolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/maglevlb/maglev/k8smaglev"
	"github.com/maglevlb/maglev/membership"
	"google.golang.org/grpc/resolver"
	"k8s.io/client-go/kubernetes"
)

// Scheme is the resolver's URI scheme.
const Scheme = "k8s"

// ErrNoEndpoints is the error reported to the channel while the Service
// has no ready endpoint.
var ErrNoEndpoints = errors.New("k8sresolver: no ready endpoint")

// Options are the optional settings of NewBuilder; the zero value is the
// defaults.
type Options struct {
	// Watch is passed to k8smaglev.Watch: its AddressType picks
	// the family of a dual-stack Service, and its Logger receives the
	// Watcher's logs. Logger, if not nil, overrides Watch.Logger.
	Watch k8smaglev.WatchOptions

	// Logger receives failed first lists (at Warn), besides what Watch
	// logs; nil means no logging.
	Logger *slog.Logger
}

// NewBuilder returns a resolver builder for the scheme "k8s" that reads
// EndpointSlices through client, which needs get, list and watch on
// endpointslices in the Services' namespaces. Pass it to grpc.NewClient
// with grpc.WithResolvers, or register it with resolver.Register.
func NewBuilder(client kubernetes.Interface, opts Options) resolver.Builder {
	if opts.Logger != nil {
		opts.Watch.Logger = opts.Logger
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &builder{client: client, opts: opts}
}

type builder struct {
	client kubernetes.Interface
	opts   Options
}

// Scheme returns "k8s".
func (*builder) Scheme() string { return Scheme }

// ParseTarget parses a target's endpoint, "SERVICE.NAMESPACE:PORT", into
// a k8smaglev.Service. It returns an error wrapping
// k8smaglev.ErrInvalidConfig for anything else.
func ParseTarget(endpoint string) (k8smaglev.Service, error) {
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return k8smaglev.Service{}, &k8smaglev.ConfigError{Package: "k8smaglev", Field: "target", Err: fmt.Errorf("%q is not SERVICE.NAMESPACE:PORT: %w", endpoint, err)}
	}
	name, ns, ok := strings.Cut(host, ".")
	if !ok || strings.Contains(ns, ".") {
		return k8smaglev.Service{}, &k8smaglev.ConfigError{Package: "k8smaglev", Field: "target", Err: fmt.Errorf("%q is not SERVICE.NAMESPACE:PORT", endpoint)}
	}
	return k8smaglev.ParseService(ns + "/" + name + ":" + port)
}

// Build starts watching the target's Service. It returns at once: the
// first list is read in the background, and until it is, the channel
// waits, as it waits for a DNS answer. A first list that fails (within
// 10 s) is reported to the channel and tried again, after waits that
// double from 1 s to 30 s.
func (b *builder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	svc, err := ParseTarget(target.Endpoint())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &k8sResolver{cancel: cancel, done: make(chan struct{})}
	set := func(eps []membership.Endpoint) error {
		var st resolver.State
		for _, e := range eps {
			if e.Weight > 0 {
				st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: e.Name}}})
			}
		}
		if len(st.Endpoints) == 0 {
			cc.ReportError(fmt.Errorf("%w: %s", ErrNoEndpoints, svc))
			return nil
		}
		return cc.UpdateState(st)
	}
	log := b.opts.Logger.With("service", svc.String())
	go func() {
		defer close(r.done)
		wait := time.Second
		for {
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			w, err := k8smaglev.Watch(wctx, b.client, svc, set, b.opts.Watch)
			wcancel()
			if err == nil {
				<-ctx.Done()
				_ = w.Close()
				return
			}
			if ctx.Err() != nil {
				return
			}
			log.Warn("k8sresolver: first list failed; trying again", "retry_in", wait, "err", err)
			cc.ReportError(err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second)
		}
	}()
	return r, nil
}

type k8sResolver struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the watch has ended
}

// ResolveNow does nothing: the watch sends every change as it happens.
func (*k8sResolver) ResolveNow(resolver.ResolveNowOptions) {}

// Close stops the watch and waits for it to end.
func (r *k8sResolver) Close() {
	r.cancel()
	<-r.done
}
