package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/maglevlb/maglev/k8smaglev"
	"github.com/maglevlb/maglev/membership"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
)

// watchK8s feeds the pool the endpoints of svc, one port of a Kubernetes
// Service, from its EndpointSlices of the VIP's address family, once the
// first list has been read (within startTimeout); stop ends it. Each
// endpoint's IP is a member (its port, the Service's targetPort, is not
// used: the backend receives the VIP's packets as they were sent, to the
// VIP's port); a terminating but serving endpoint has weight 0, which
// drains it as weight 0 in etcd does, and one that leaves the list drains
// too. The client configuration is k8smaglev.RESTConfig's: kubeconfig if
// not empty; else in a pod its service account; else $KUBECONFIG or
// ~/.kube/config. While the API server cannot be reached the last list
// stays (the membership.Watcher's promise).
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
	set := func(eps []membership.Endpoint) error { return p.setMembers(members(eps, logger)) }
	w, err := k8smaglev.Watch(ctx, client, svc, set, k8smaglev.WatchOptions{AddressType: at, Logger: logger})
	if err != nil {
		return nil, err
	}
	return func() { _ = w.Close() }, nil // it does not fail
}
