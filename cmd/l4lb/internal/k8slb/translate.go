package k8slb

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// ErrSettings is wrapped by Translate's errors: a Service whose
// annotations, or the file's defaults with them, make no valid service.
var ErrSettings = errors.New("k8slb: bad settings of a Service")

// ExcludeLabel marks a node that no external load balancer sends to.
const ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// HealthPath is the path kube-proxy serves on a Service's
// healthCheckNodePort: 200 where the node has a ready endpoint.
const HealthPath = "/healthz"

// Name returns the l4lb service name of svc's port p at the VIP vip of a
// Service of dual (two VIPs): k8s/NAMESPACE/NAME/PORT (the port's name,
// or its number if it has none), with /v6 after the IPv6 VIP's of a dual
// stack Service.
func Name(svc *corev1.Service, p corev1.ServicePort, vip netip.Addr, dual bool) string {
	port := p.Name
	if port == "" {
		port = strconv.Itoa(int(p.Port))
	}
	n := "k8s/" + svc.Namespace + "/" + svc.Name + "/" + port
	if dual && vip.Is6() {
		n += "/v6"
	}
	return n
}

// Translate returns the l4lb services of svc, a Service with its VIPs in
// status: one per port and VIP, of the file's settings g overridden by
// svc's annotations, its backends the nodes' InternalIPs of the VIP's
// family, sorted: every node without ExcludeLabel, Down with
// externalTrafficPolicy Cluster where it is not Ready, with Local where
// it has no ready endpoint of svc in eps (by nodeName); a Local service is health checked by an
// HTTP GET of HealthPath on its healthCheckNodePort, unless its
// annotations give another health check. A node out of service is a
// Down backend rather than none, so that the table is the same
// Without it: only its own slots move, and only they come back. It returns too a warning for each port it leaves
// (a protocol other than TCP and UDP), and an error wrapping ErrSettings
// for settings that make no service, with none of svc's services. It
// reads its arguments only.
func Translate(g config.Global, svc *corev1.Service, nodes []*corev1.Node, eps []*discoveryv1.EndpointSlice) ([]config.Service, []string, error) {
	over, err := overrides(svc)
	if err != nil {
		return nil, nil, err
	}
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	var ready map[string]bool
	if local {
		ready = readyNodes(svc, eps)
		if _, ok := over["health"]; !ok && svc.Spec.HealthCheckNodePort != 0 {
			over["health"], over["health-path"] = "http", HealthPath
			over["health-port"] = strconv.Itoa(int(svc.Spec.HealthCheckNodePort))
		}
	}
	vips := Ingress(svc)
	var out []config.Service
	var warnings []string
	for _, vip := range vips {
		backends, down := nodeAddrs(nodes, vip.Is4(), func(n *corev1.Node) bool {
			if local {
				return ready[n.Name] // kube-proxy's health check, not the kubelet's, says more
			}
			return nodeReady(n)
		})
		for _, p := range svc.Spec.Ports {
			var proto string
			switch p.Protocol {
			case corev1.ProtocolTCP, "":
				proto = "tcp"
			case corev1.ProtocolUDP:
				proto = "udp"
			default:
				warnings = append(warnings, fmt.Sprintf("port %s: protocol %s: l4lb serves TCP and UDP", Name(svc, p, vip, false), p.Protocol))
				continue
			}
			name := Name(svc, p, vip, len(vips) > 1)
			c, err := g.K8sService(name, netip.AddrPortFrom(vip, uint16(p.Port)), proto, backends, over)
			if err != nil {
				return nil, nil, settingsError(name, err)
			}
			c.Name = name
			markDown(&c, down)
			out = append(out, c)
		}
	}
	return out, warnings, nil
}

// markDown sets Down on c's backends that down has, and says which in
// c.Settings, so that a node going out of service or back is a change of
// the service.
func markDown(c *config.Service, down map[netip.Addr]bool) {
	var out []string
	for i, b := range c.Backends {
		if down[b.Addr] {
			c.Backends[i].Down = true
			out = append(out, b.Addr.String())
		}
	}
	if len(out) > 0 {
		c.Settings += "\x00down=" + strings.Join(out, ",")
	}
}

// overrides returns the settings svc's annotations give, by key.
func overrides(svc *corev1.Service) (map[string]string, error) {
	over := map[string]string{}
	for k, v := range svc.Annotations {
		s, ok := strings.CutPrefix(k, AnnotationPrefix)
		if !ok || k == AnnotationIP {
			continue
		}
		if !config.Overridable(s) {
			return nil, fmt.Errorf("%w: annotation %s: %w", ErrSettings, k, config.ErrOverride)
		}
		over[s] = v
	}
	return over, nil
}

// settingsError is K8sService's err for the service name, naming the
// annotation or the file's setting at fault.
func settingsError(name string, err error) error {
	if s := setting.SettingOf(err); s != nil {
		return fmt.Errorf("%w: %s: %s (annotation %s%s, or the file's %s): %w", ErrSettings, name, s.KeyName(), AnnotationPrefix, s.KeyName(), s.KeyName(), err)
	}
	return fmt.Errorf("%w: %s: %w", ErrSettings, name, err)
}

// readyNodes returns the nodes that have a ready endpoint of svc in
// eps (a slice of svc's namespace labelled with its name; an endpoint
// with no ready condition is ready).
func readyNodes(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) map[string]bool {
	out := map[string]bool{}
	for _, sl := range eps {
		if sl.Namespace != svc.Namespace || sl.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.NodeName != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
				out[*ep.NodeName] = true
			}
		}
	}
	return out
}

// nodeReady reports whether n's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeAddrs returns the first InternalIP of the family (IPv4 if v4) of
// each node not labelled ExcludeLabel, sorted, and which of them are out
// of service: those up does not take.
func nodeAddrs(nodes []*corev1.Node, v4 bool, up func(*corev1.Node) bool) ([]netip.Addr, map[netip.Addr]bool) {
	var out []netip.Addr
	down := map[netip.Addr]bool{}
	for _, n := range nodes {
		if _, excluded := n.Labels[ExcludeLabel]; excluded {
			continue
		}
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if a.Type == corev1.NodeInternalIP && err == nil && ip.Unmap().Is4() == v4 {
				out = append(out, ip.Unmap())
				if !up(n) {
					down[ip.Unmap()] = true
				}
				break
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), down
}
