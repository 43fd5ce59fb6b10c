package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/maglevlb/maglev/k8smaglev"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
)

// watchK8s feeds the pool the endpoints of svc, one port of a Kubernetes
// Service, from its EndpointSlices of the VIP's address family, once the
// first list has been read (within startTimeout); stop ends it. The client
// configuration is k8smaglev.RESTConfig's: kubeconfig if not empty; else
// in a pod its service account; else $KUBECONFIG or ~/.kube/config. While
// the API server cannot be reached the last list stays
// (k8smaglev.Watcher's promise).
func watchK8s(ctx context.Context, svc k8smaglev.Service, kubeconfig string, vip netip.Addr, p *pool, logger *slog.Logger) (stop func(), err error) {
	cfg, err := k8smaglev.RESTConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	at := discoveryv1.AddressTypeIPv4
	if !vip.Unmap().Is4() {
		at = discoveryv1.AddressTypeIPv6
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	set := func(eps []k8smaglev.Endpoint) error { return p.setMembers(k8sMembers(eps, logger)) }
	w, err := k8smaglev.WatchEndpoints(ctx, client, svc, set, k8smaglev.WatchOptions{AddressType: at, Logger: logger})
	if err != nil {
		return nil, err
	}
	return func() { _ = w.Close() }, nil // it does not fail
}

// k8sMembers returns the backends a Kubernetes endpoint list names: each
// endpoint's IP (its port, the Service's targetPort, is not used: the
// backend receives the VIP's packets as they were sent, to the VIP's
// port), with weight 1, or 0 when it is terminating but serving
// (Draining), which drains it as weight 0 in etcd does. An endpoint that
// leaves the list (deleted, or neither ready nor serving) leaves the
// members, and so drains too. Of two endpoints on one IP, a ready one
// wins.
func k8sMembers(eps []k8smaglev.Endpoint, logger *slog.Logger) map[netip.Addr]member {
	m := make(map[netip.Addr]member, len(eps))
	for _, e := range eps {
		ap, err := netip.ParseAddrPort(e.Addr)
		if err != nil || ap.Addr().Zone() != "" {
			logger.Warn("l4lb: endpoint ignored: it is not IP:PORT", "addr", e.Addr)
			continue
		}
		a := ap.Addr().Unmap()
		w := uint32(1)
		if e.Draining {
			w = 0
		}
		if old, dup := m[a]; dup && old.weight >= w {
			continue
		}
		m[a] = member{weight: w}
	}
	return m
}
