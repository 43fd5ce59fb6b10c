package k8slb

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AnnotationPrefix prefixes the annotations by which a Service overrides
// the file's settings (l4lb.maglevlb.io/forward: gue) and asks for its
// address (AnnotationIP).
const AnnotationPrefix = "l4lb.maglevlb.io/"

// AnnotationIP is the annotation by which a Service asks for its VIPs,
// one or two (one of each family), comma-separated; spec.loadBalancerIP
// (deprecated by Kubernetes) is read when it is absent.
const AnnotationIP = AnnotationPrefix + "ip"

// Class is which Services a controller serves: those of type
// LoadBalancer whose spec.loadBalancerClass is Name, or is unset when
// Default.
type Class struct {
	Name    string
	Default bool
}

// Serves reports whether c serves svc.
func (c Class) Serves(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return c.Default
	}
	return *svc.Spec.LoadBalancerClass == c.Name
}

// key returns svc's NAMESPACE/NAME.
func key(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

// Requested returns the VIPs svc asks for: its annotation
// l4lb.maglevlb.io/ip, or else spec.loadBalancerIP; an error for one
// that is no address.
func Requested(svc *corev1.Service) ([]netip.Addr, error) {
	s, ok := svc.Annotations[AnnotationIP]
	if !ok {
		s = svc.Spec.LoadBalancerIP
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("k8slb: %q asked for: not an address", strings.TrimSpace(f))
		}
		out = append(out, a.Unmap())
	}
	if len(out) > 2 || (len(out) == 2 && out[0].Is4() == out[1].Is4()) {
		return nil, fmt.Errorf("k8slb: %q asked for: one address, or one of each family", s)
	}
	return out, nil
}

// Families returns the families svc's VIPs are of, in its order, and
// whether each is required: spec.ipFamilies (IPv4 if empty), the first
// alone for SingleStack, both for RequireDualStack, as many as the pool
// can for PreferDualStack.
func Families(svc *corev1.Service) ([]Family, bool) {
	var fams []Family
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			fams = append(fams, IPv4)
		case corev1.IPv6Protocol:
			fams = append(fams, IPv6)
		}
	}
	if len(fams) == 0 {
		fams = []Family{IPv4}
	}
	p := svc.Spec.IPFamilyPolicy
	switch {
	case p == nil || *p == corev1.IPFamilyPolicySingleStack:
		return fams[:1], true
	case *p == corev1.IPFamilyPolicyRequireDualStack:
		return fams, true
	}
	return fams, false
}

// Ingress returns the VIPs in svc's status.loadBalancer.ingress.
func Ingress(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// IngressOf returns the status.loadBalancer.ingress of the VIPs addrs,
// each with ipMode VIP: the nodes receive packets addressed to the VIP.
func IngressOf(addrs []netip.Addr) []corev1.LoadBalancerIngress {
	var out []corev1.LoadBalancerIngress
	for _, a := range addrs {
		mode := corev1.LoadBalancerIPModeVIP
		out = append(out, corev1.LoadBalancerIngress{IP: a.String(), IPMode: &mode})
	}
	return out
}
