package ops

import (
	"context"
	"fmt"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"github.com/maglevlb/maglev/k8smaglev"
	"github.com/maglevlb/maglev/membership"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
)

// k8sSource is -k8s-service NAMESPACE/NAME:PORT: the ready endpoints of
// one port of a Kubernetes Service, from its EndpointSlices, with the
// client configuration k8smaglev.RESTConfig makes of -kubeconfig.
type k8sSource struct {
	service, kubeconfig setting.Of[string]
}

func newK8sSource() *k8sSource {
	return &k8sSource{
		service: setting.New(setting.Setting{Name: "k8s-service", Scope: setting.Source, Own: true, Reload: true,
			Doc: "backends are the ready endpoints of `NAMESPACE/NAME:PORT` (a Kubernetes Service's port, by name or number), from its EndpointSlices"}, "", setting.String),
		kubeconfig: setting.New(setting.Setting{Name: "kubeconfig", Scope: setting.Source, Needs: "k8s-service", Reload: true,
			Doc: "kubeconfig `file` for -k8s-service; empty: in a pod its service account, else $KUBECONFIG or ~/.kube/config"}, "", setting.String),
	}
}

func (k *k8sSource) settings() []*setting.Setting {
	return []*setting.Setting{k.service.Setting, k.kubeconfig.Setting}
}

func (k *k8sSource) given(vs *setting.Values) bool { return k.service.Get(vs) != "" }
func (k *k8sSource) name(*setting.Values) string   { return "-k8s-service" }

func (k *k8sSource) String(vs *setting.Values) string {
	return "Kubernetes service " + k.service.Get(vs)
}

func (k *k8sSource) check(vs *setting.Values) error {
	service := k.service.Get(vs)
	if k.kubeconfig.Get(vs) != "" && service == "" {
		return setting.Errorf(k.kubeconfig.Setting, "-kubeconfig needs -k8s-service")
	}
	if service != "" {
		if _, err := k8smaglev.ParseService(service); err != nil {
			return setting.Errorf(k.service.Setting, "-k8s-service: %w", err)
		}
	}
	return nil
}

func (k *k8sSource) watch(ctx context.Context, vs *setting.Values, set func([]membership.Endpoint) error, opts WatchOptions) (func(), error) {
	svc, err := k8smaglev.ParseService(k.service.Get(vs))
	if err != nil {
		return nil, err
	}
	cfg, err := k8smaglev.RESTConfig(k.kubeconfig.Get(vs))
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
