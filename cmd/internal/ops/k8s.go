package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/maglevlb/maglev/k8smaglev"
	"github.com/maglevlb/maglev/membership"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
)

// k8sSource is -k8s-service NAMESPACE/NAME:PORT: the ready endpoints of
// one port of a Kubernetes Service, from its EndpointSlices, with the
// client configuration k8smaglev.RESTConfig makes of -kubeconfig.
type k8sSource struct {
	service, kubeconfig string
}

func (k *k8sSource) register(fs *flag.FlagSet) {
	fs.StringVar(&k.service, "k8s-service", "", "backends are the ready endpoints of `NAMESPACE/NAME:PORT` (a Kubernetes Service's port, by name or number), from its EndpointSlices")
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig `file` for -k8s-service; empty: in a pod its service account, else $KUBECONFIG or ~/.kube/config")
}

func (k *k8sSource) given() bool  { return k.service != "" }
func (k *k8sSource) name() string { return "-k8s-service" }

func (k *k8sSource) String() string { return "Kubernetes service " + k.service }

func (k *k8sSource) check() error {
	if k.kubeconfig != "" && k.service == "" {
		return errors.New("-kubeconfig needs -k8s-service")
	}
	if k.service != "" {
		if _, err := k8smaglev.ParseService(k.service); err != nil {
			return fmt.Errorf("-k8s-service: %w", err)
		}
	}
	return nil
}

func (k *k8sSource) watch(ctx context.Context, set func([]membership.Endpoint) error, opts WatchOptions) (func(), error) {
	svc, err := k8smaglev.ParseService(k.service)
	if err != nil {
		return nil, err
	}
	cfg, err := k8smaglev.RESTConfig(k.kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	at := discoveryv1.AddressTypeIPv4
	if opts.IPv6 {
		at = discoveryv1.AddressTypeIPv6
	}
	w, err := k8smaglev.Watch(ctx, client, svc, set, k8smaglev.WatchOptions{AddressType: at, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	return func() { _ = w.Close() }, nil // it does not fail
}
