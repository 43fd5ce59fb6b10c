package k8smaglev

import (
	"cmp"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev/httpmaglev"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// A Service names the backends a Watcher follows: the endpoints of one
// port of one Kubernetes Service.
type Service struct {
	Namespace string // the Service's namespace; "" is an error, not "default"
	Name      string // the Service's name

	// Port is the port's name in the Service (and so in its
	// EndpointSlices), or a number: the endpoints' port, which is the
	// Service's targetPort, not its port. A Service with one unnamed port
	// is reached by number.
	Port string
}

// ParseService parses "NAMESPACE/NAME:PORT", the form lbproxy's
// -k8s-service flag takes. It returns a *ConfigError for anything else.
func ParseService(s string) (Service, error) {
	ns, rest, ok := strings.Cut(s, "/")
	if !ok {
		return Service{}, configError("service", "%q is not NAMESPACE/NAME:PORT", s)
	}
	name, port, ok := strings.Cut(rest, ":")
	if !ok {
		return Service{}, configError("service", "%q is not NAMESPACE/NAME:PORT", s)
	}
	svc := Service{Namespace: ns, Name: name, Port: port}
	if err := svc.check(); err != nil {
		return Service{}, err
	}
	return svc, nil
}

// String returns "NAMESPACE/NAME:PORT".
func (s Service) String() string { return s.Namespace + "/" + s.Name + ":" + s.Port }

// check returns a *ConfigError for a Service whose fields Kubernetes
// would not accept.
func (s Service) check() error {
	if errs := validation.IsDNS1123Label(s.Namespace); len(errs) > 0 {
		return configError("Service.Namespace", "%q: %s", s.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1035Label(s.Name); len(errs) > 0 {
		return configError("Service.Name", "%q: %s", s.Name, strings.Join(errs, "; "))
	}
	if n, err := strconv.Atoi(s.Port); err == nil {
		if n < 1 || n > 65535 {
			return configError("Service.Port", "%d is not a port number", n)
		}
		return nil
	}
	if errs := validation.IsValidPortName(s.Port); len(errs) > 0 {
		return configError("Service.Port", "%q is neither a port number nor a port name: %s", s.Port, strings.Join(errs, "; "))
	}
	return nil
}

// An Endpoint is one backend of a Service, as its EndpointSlices say.
type Endpoint struct {
	// Addr is "IP:PORT" ("[IP]:PORT" for IPv6, in RFC 5952 form): the
	// name every Watcher, httpmaglev.WatchDNS on the Service's headless
	// name, and gRPC's resolvers give the backend.
	Addr string

	// Draining is true for an endpoint that is terminating but still
	// serving (its pod is being deleted, and still passes its readiness
	// probe): it takes no new keys, but the requests already routed to
	// it finish.
	Draining bool
}

// endpoints returns the endpoints of port in slices of the address type
// at, sorted by Addr, each once. An endpoint is in the list when it is
// ready (a nil Ready counts as ready, as the API says), or when it is
// terminating and serving (Draining). An address listed in several slices
// (as while the EndpointSlice controller moves it) is one endpoint, ready
// if any slice says so. Only an endpoint's first address is used, as
// kube-proxy does. Slices of another address type, and endpoints without
// the port, are left out. It is O(n log n) in the n endpoints.
func endpoints(slices_ []*discoveryv1.EndpointSlice, port string, at discoveryv1.AddressType) []Endpoint {
	num, err := strconv.Atoi(port)
	byNumber := err == nil
	state := make(map[string]bool) // Addr -> ready (false: draining)
	for _, s := range slices_ {
		if s.AddressType != at {
			continue
		}
		var p int32
		for _, sp := range s.Ports {
			if sp.Port == nil {
				continue
			}
			if byNumber && int(*sp.Port) == num || !byNumber && sp.Name != nil && *sp.Name == port {
				p = *sp.Port
				break
			}
		}
		if p < 1 || p > 65535 {
			continue
		}
		for _, e := range s.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			draining := !ready && e.Conditions.Terminating != nil && *e.Conditions.Terminating &&
				e.Conditions.Serving != nil && *e.Conditions.Serving
			if (!ready && !draining) || len(e.Addresses) == 0 {
				continue
			}
			ip, err := netip.ParseAddr(e.Addresses[0])
			if err != nil || ip.Zone() != "" || (at == discoveryv1.AddressTypeIPv4) != ip.Is4() {
				continue
			}
			addr := net.JoinHostPort(ip.String(), strconv.Itoa(int(p)))
			state[addr] = state[addr] || ready
		}
	}
	list := make([]Endpoint, 0, len(state))
	for addr, ready := range state {
		list = append(list, Endpoint{Addr: addr, Draining: !ready})
	}
	slices.SortFunc(list, func(a, b Endpoint) int { return cmp.Compare(a.Addr, b.Addr) })
	return list
}

// HTTPBackends returns the httpmaglev backends of a list of endpoints:
// each is named by its Addr, at http://Addr, weight 1, and a draining one
// has weight 0, which in httpmaglev drains it (it stays configured and
// health-checked, its requests in flight finish, and it owns no slots).
// A list with no endpoint that is not draining gives an empty list:
// httpmaglev would read all-zero weights as no weights. The list is in the
// order of eps (sorted by name, as a Watcher gives them). It is O(n).
func HTTPBackends(eps []Endpoint) []httpmaglev.Backend {
	bs := make([]httpmaglev.Backend, 0, len(eps))
	active := false
	for _, e := range eps {
		w := uint32(1)
		if e.Draining {
			w = 0
		} else {
			active = true
		}
		bs = append(bs, httpmaglev.Backend{Name: e.Addr, URL: &url.URL{Scheme: "http", Host: e.Addr}, Weight: w})
	}
	if !active {
		return bs[:0]
	}
	return bs
}
