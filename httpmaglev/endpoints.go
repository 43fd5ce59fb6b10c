package httpmaglev

import (
	"fmt"
	"net/url"

	"github.com/maglevlb/maglev/membership"
)

// FromEndpoints returns the backends of a membership list (what
// etcdmaglev.Watch, k8smaglev.Watch, membership.WatchDNS and WatchSRV hand
// their set functions), in the order of eps: each endpoint is the backend
// named by its Name, at SCHEME://HOST[:PORT] (the endpoint's HostPort),
// with its Weight (0: drained, as in Backend.Weight). SCHEME is the
// endpoint's Meta["scheme"] when its source gives one (an etcd Addr
// https://HOST:PORT), else scheme, "http" or "https". It is the one
// function that makes httpmaglev backends of endpoints. A list in which
// every endpoint is drained gives backends that are all drained: a
// Transport keeps checking them, and routes to none.
//
// It returns a *ConfigError for a scheme other than "http" and "https",
// and an error wrapping ErrBadURL, naming the endpoint, for an endpoint
// whose host is empty or whose Meta scheme is neither. It is O(n) and
// allocates one URL and one weight per endpoint.
func FromEndpoints(scheme string, eps []membership.Endpoint) ([]Backend, error) {
	if scheme != "http" && scheme != "https" {
		return nil, configError("scheme", "%q is neither http nor https", scheme)
	}
	bs := make([]Backend, 0, len(eps))
	for _, e := range eps {
		s := scheme
		if m, ok := e.Meta["scheme"]; ok {
			s = m
		}
		u := &url.URL{Scheme: s, Host: e.HostPort()}
		if e.Host == "" || checkBaseURL(u) != nil {
			return nil, fmt.Errorf("%w: endpoint %q: %v", ErrBadURL, e.Name, u)
		}
		bs = append(bs, Backend{Name: e.Name, URL: u, Weight: new(e.Weight)})
	}
	return bs, nil
}

// SetEndpoints is SetBackends of FromEndpoints("http", eps): the set
// function of a membership watcher that feeds the Transport,
//
//	w, err := etcdmaglev.Watch(ctx, client, "services/web", t.SetEndpoints, etcdmaglev.WatchOptions{})
//
// An endpoint whose source gives a scheme is reached with it.
func (t *Transport) SetEndpoints(eps []membership.Endpoint) error {
	bs, err := FromEndpoints("http", eps)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBackends, err)
	}
	return t.SetBackends(bs)
}
