package k8smaglev

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev/membership"
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

// endpoints returns the endpoints of port in slices of the address type
// at, in canonical order (membership.Canonical), each address once: an
// endpoint is named "IP:PORT" ("[IP]:PORT" for IPv6, in RFC 5952 form),
// the name membership.WatchDNS on the Service's headless name, and gRPC's
// resolvers, give it. It is in the list when it is ready (a nil Ready
// counts as ready, as the API says), with weight 1, or when it is
// terminating and serving (a pod being deleted that still passes its
// readiness probe), with weight 0, which drains it: it takes no new keys,
// but the requests already routed to it finish. An address listed in
// several slices (as while the EndpointSlice controller moves it) is one
// endpoint, ready if any slice says so. Its Meta has the endpoint's
// "zone" and "node" (its nodeName), when the slice gives them. Only an
// endpoint's first address is used, as kube-proxy does. Slices of another
// address type, and endpoints without the port, are left out. It is
// O(n log n) in the n endpoints.
func endpoints(all []*discoveryv1.EndpointSlice, port string, at discoveryv1.AddressType) []membership.Endpoint {
	num, err := strconv.Atoi(port)
	byNumber := err == nil
	// By name: an address in two slices keeps the Meta of the first, the
	// same whatever order the store held them in.
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	var list []membership.Endpoint
	for _, s := range all {
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
			ap := netip.AddrPortFrom(ip, uint16(p))
			ep := membership.Endpoint{Name: ap.String(), Host: ip.Unmap().String(), Port: uint16(p), Weight: 1}
			if !ready {
				ep.Weight = 0
			}
			if e.Zone != nil && *e.Zone != "" {
				ep.Meta = map[string]string{"zone": *e.Zone}
			}
			if e.NodeName != nil && *e.NodeName != "" {
				if ep.Meta == nil {
					ep.Meta = map[string]string{}
				}
				ep.Meta["node"] = *e.NodeName
			}
			list = append(list, ep)
		}
	}
	return membership.Canonical(list)
}
