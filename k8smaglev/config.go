package k8smaglev

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ErrNoConfig is wrapped by the error RESTConfig returns when it finds no
// usable client configuration.
var ErrNoConfig = errors.New("k8smaglev: no Kubernetes client config")

// RESTConfig returns the client configuration of a process that watches
// EndpointSlices, found as kubectl finds it: the kubeconfig file named by
// kubeconfig if it is not empty; else, inside a pod (where
// KUBERNETES_SERVICE_HOST is set), the pod's service account
// (rest.InClusterConfig); else the files KUBECONFIG lists, or
// ~/.kube/config, at their current context. It returns an error wrapping
// ErrNoConfig, and client-go's reason, when none gives a configuration.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("%w: in a pod: %w", ErrNoConfig, err)
		}
		return c, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoConfig, err)
	}
	return c, nil
}
