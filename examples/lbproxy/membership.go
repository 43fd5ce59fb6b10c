package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/k8smaglev"
	"github.com/maglevlb/maglev/membership"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"k8s.io/client-go/kubernetes"
)

// startTimeout bounds the first read of the membership from etcd or DNS:
// a proxy that cannot read it at start fails, rather than serve with no
// backends.
const startTimeout = 10 * time.Second

// checkSources reports an error unless the flags name at most one source
// of backends: -backend/-backends-file/-demo, -etcd, -dns, -dns-srv or
// -k8s-service.
func (o *options) checkSources() error {
	var dynamic []string
	if len(o.etcd) > 0 {
		dynamic = append(dynamic, "-etcd")
	}
	if o.dns != "" {
		dynamic = append(dynamic, "-dns")
	}
	if o.dnsSRV != "" {
		dynamic = append(dynamic, "-dns-srv")
	}
	if o.k8sService != "" {
		dynamic = append(dynamic, "-k8s-service")
	}
	switch {
	case len(dynamic) > 1:
		return fmt.Errorf("lbproxy: %s: use one source of backends", strings.Join(dynamic, " and "))
	case len(dynamic) == 1 && (len(o.cfg.Backends) > 0 || o.demo > 0):
		return fmt.Errorf("lbproxy: %s cannot be used with -backend, -backends-file or -demo", dynamic[0])
	case len(o.etcd) > 0 && strings.Trim(o.etcdPrefix, "/") == "":
		return errors.New("lbproxy: -etcd needs -etcd-prefix")
	case len(o.etcd) == 0 && o.etcdPrefix != "":
		return errors.New("lbproxy: -etcd-prefix needs -etcd")
	case o.kubeconfig != "" && o.k8sService == "":
		return errors.New("lbproxy: -kubeconfig needs -k8s-service")
	case o.dnsInterval <= 0:
		return errors.New("lbproxy: -dns-interval must be positive")
	}
	if o.dns != "" {
		if host, port, err := net.SplitHostPort(o.dns); err != nil || host == "" || port == "" {
			return fmt.Errorf("lbproxy: -dns %q: want NAME:PORT", o.dns)
		}
	}
	if o.k8sService != "" {
		if _, err := k8smaglev.ParseService(o.k8sService); err != nil {
			return fmt.Errorf("lbproxy: -k8s-service: %w", err)
		}
	}
	return nil
}

// watch starts feeding the proxy's backends from etcd or DNS, as o says
// (and does nothing for static backends), once the first membership has
// been read; stop ends it.
func (p *proxy) watch(ctx context.Context, o options) (stop func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	switch {
	case len(o.etcd) > 0:
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   o.etcd,
			DialTimeout: 5 * time.Second,
			// The Watcher logs what matters; the client's own warnings
			// would repeat every retry while etcd is down.
			Logger: zap.NewNop(),
			// Reconnect within a second of etcd's return (grpc's default
			// backoff grows to two minutes).
			DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: 5 * time.Second,
			})},
		})
		if err != nil {
			return nil, fmt.Errorf("lbproxy: etcd: %w", err)
		}
		w, err := etcdmaglev.Watch(ctx, c, o.etcdPrefix, p.t.SetEndpoints, etcdmaglev.WatchOptions{Logger: p.slog})
		if err != nil {
			_ = c.Close() // the Watch error is the one to report
			return nil, fmt.Errorf("lbproxy: %w", err)
		}
		return func() { _ = w.Close(); _ = c.Close() }, nil // neither fails
	case o.dns != "":
		w, err := membership.WatchDNS(ctx, o.dns, p.t.SetEndpoints, membership.DNSOptions{Interval: o.dnsInterval, Logger: p.slog})
		if err != nil {
			return nil, fmt.Errorf("lbproxy: %w", err)
		}
		return func() { _ = w.Close() }, nil
	case o.k8sService != "":
		svc, _ := k8smaglev.ParseService(o.k8sService) // checked by checkSources
		cfg, err := k8smaglev.RESTConfig(o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("lbproxy: %w", err)
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("lbproxy: %w", err)
		}
		w, err := k8smaglev.Watch(ctx, c, svc, p.t.SetEndpoints, k8smaglev.WatchOptions{Logger: p.slog})
		if err != nil {
			return nil, fmt.Errorf("lbproxy: %w", err)
		}
		return func() { _ = w.Close() }, nil
	case o.dnsSRV != "":
		w, err := membership.WatchSRV(ctx, o.dnsSRV, p.t.SetEndpoints, membership.DNSOptions{Interval: o.dnsInterval, Logger: p.slog})
		if err != nil {
			return nil, fmt.Errorf("lbproxy: %w", err)
		}
		return func() { _ = w.Close() }, nil
	}
	return func() {}, nil
}
