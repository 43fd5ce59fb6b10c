package k8slb

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// node returns a node named name with the InternalIPs ips, Ready or not,
// with the labels.
func node(name string, ready bool, labels map[string]string, ips ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeExternalIP, Address: "203.0.113.9"}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return n
}

// lbService returns the Service ns/name of type LoadBalancer with the
// ports (TCP unless UDP is named "dns"), in status at the VIPs.
func lbService(name string, annotations map[string]string, vips []string, ports ...corev1.ServicePort) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: annotations}}
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.Ports = ports
	for _, v := range vips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: v})
	}
	return svc
}

func slice(ns, svc string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-x",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, Endpoints: eps}
}

func endpoint(nodeName string, ready *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, NodeName: &nodeName, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
}

func global(t *testing.T, file string) config.Global {
	t.Helper()
	g, _, err := config.Parse([]byte("iface: eth0\nvip-pool: 198.19.0.0/24\n" + file + "services: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestTranslate: a Service's ports and VIPs as l4lb services, their
// backends the nodes by externalTrafficPolicy, their settings the file's
// overridden by annotations.
func TestTranslate(t *testing.T) {
	yes, no := true, false
	nodes := []*corev1.Node{
		node("n3", true, nil, "198.18.0.13", "2001:db8:1::13"),
		node("n1", true, nil, "198.18.0.11", "2001:db8:1::11"),
		node("n2", true, nil, "198.18.0.12"),
		node("down", false, nil, "198.18.0.14"),
		node("out", true, map[string]string{ExcludeLabel: ""}, "198.18.0.15"),
	}
	eps := []*discoveryv1.EndpointSlice{
		slice("ns", "web", endpoint("n2", &yes), endpoint("n3", &no), endpoint("out", nil), endpoint("down", nil)),
		slice("ns", "web", endpoint("n1", nil)),
		slice("ns", "api", endpoint("n3", nil)),
		slice("other", "web", endpoint("n3", nil)),
	}
	http := corev1.ServicePort{Name: "http", Port: 80}
	dns := corev1.ServicePort{Port: 53, Protocol: corev1.ProtocolUDP}
	sctp := corev1.ServicePort{Name: "sig", Port: 3868, Protocol: corev1.ProtocolSCTP}
	type want struct {
		name     string
		vip      string
		proto    xdpmaglev.Proto
		backends []string
		forward  xdpmaglev.Forward
		health   string // Kind/port
	}
	local := func(s *corev1.Service) *corev1.Service {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 30999
		return s
	}
	for _, tc := range []struct {
		name     string
		file     string
		svc      *corev1.Service
		want     []want
		warnings int
	}{
		{"Cluster: Ready nodes not excluded", "", lbService("web", nil, []string{"198.19.0.1"}, http, dns),
			[]want{{"k8s/ns/web/http", "198.19.0.1:80", xdpmaglev.TCP, []string{"198.18.0.11", "198.18.0.12", "198.18.0.13"}, xdpmaglev.ForwardL2, "/0"},
				{"k8s/ns/web/53", "198.19.0.1:53", xdpmaglev.UDP, []string{"198.18.0.11", "198.18.0.12", "198.18.0.13"}, xdpmaglev.ForwardL2, "/0"}}, 0},
		{"Local: nodes with a ready endpoint, health checked", "", local(lbService("web", nil, []string{"198.19.0.1"}, http)),
			[]want{{"k8s/ns/web/http", "198.19.0.1:80", xdpmaglev.TCP, []string{"198.18.0.11", "198.18.0.12", "198.18.0.14"}, xdpmaglev.ForwardL2, "http/30999"}}, 0},
		{"the file's defaults, an annotation over them", "forward: ipip\nhealth: tcp\n",
			lbService("web", map[string]string{AnnotationPrefix + "forward": "gue", AnnotationIP: "198.19.0.1", "other.io/forward": "x"}, []string{"198.19.0.1"}, http),
			[]want{{"k8s/ns/web/http", "198.19.0.1:80", xdpmaglev.TCP, []string{"198.18.0.11", "198.18.0.12", "198.18.0.13"}, xdpmaglev.ForwardGUE, "tcp/0"}}, 0},
		{"Local with a health check of its annotations", "", local(lbService("web", map[string]string{AnnotationPrefix + "health": "tcp", AnnotationPrefix + "health-port": "8080"}, []string{"198.19.0.1"}, http)),
			[]want{{"k8s/ns/web/http", "198.19.0.1:80", xdpmaglev.TCP, []string{"198.18.0.11", "198.18.0.12", "198.18.0.14"}, xdpmaglev.ForwardL2, "tcp/8080"}}, 0},
		{"dual stack: the nodes of each family", "", lbService("web", nil, []string{"198.19.0.1", "2001:db8::1"}, http, sctp),
			[]want{{"k8s/ns/web/http", "198.19.0.1:80", xdpmaglev.TCP, []string{"198.18.0.11", "198.18.0.12", "198.18.0.13"}, xdpmaglev.ForwardL2, "/0"},
				{"k8s/ns/web/http/v6", "[2001:db8::1]:80", xdpmaglev.TCP, []string{"2001:db8:1::11", "2001:db8:1::13"}, xdpmaglev.ForwardL2, "/0"}}, 2},
		{"no address in status: nothing", "", lbService("web", nil, nil, http), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, warnings, err := Translate(global(t, tc.file), tc.svc, nodes, eps)
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", warnings, tc.warnings)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d services, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				c := got[i]
				var bs, all []string // in service; and every one, Down too
				for _, b := range c.Backends {
					all = append(all, b.Addr.String())
					if !b.Down {
						bs = append(bs, b.Addr.String())
					}
				}
				// Every node not excluded, of the VIP's family: one out of
				// service is Down, so that the table is the same Without it.
				if want := []string{"198.18.0.11", "198.18.0.12", "198.18.0.13", "198.18.0.14"}; c.Svc.VIP.Addr().Is4() && !slices.Equal(all, want) {
					t.Errorf("service %d: backends %v, want %v (some Down)", i, all, want)
				}
				h := c.Health.Kind + "/" + strings.TrimPrefix(netip.AddrPortFrom(netip.IPv4Unspecified(), c.Health.Port).String(), "0.0.0.0:")
				if c.Name != w.name || c.Svc.VIP.String() != w.vip || c.Svc.Proto != w.proto || !slices.Equal(bs, w.backends) || c.Fwd.Forward != w.forward || h != w.health {
					t.Errorf("service %d: %s %v %v %v %v %s; want %+v", i, c.Name, c.Svc.VIP, c.Svc.Proto, bs, c.Fwd.Forward, h, w)
				}
				if c.Health.Kind == "http" && c.Health.Path != HealthPath {
					t.Errorf("health path %q", c.Health.Path)
				}
			}
		})
	}
}

// TestTranslateRefused: annotations that make no service are an error
// wrapping ErrSettings, naming the annotation, and no service.
func TestTranslateRefused(t *testing.T) {
	nodes := []*corev1.Node{node("n1", true, nil, "198.18.0.11")}
	http := corev1.ServicePort{Name: "http", Port: 80}
	for _, tc := range []struct {
		file string
		ann  map[string]string
		want string
	}{
		{"", map[string]string{AnnotationPrefix + "forward": "pigeon"}, "annotation l4lb.maglevlb.io/forward"},
		{"", map[string]string{AnnotationPrefix + "health-interval": "1s"}, "-health-interval needs -health"},
		{"", map[string]string{AnnotationPrefix + "backends": "198.18.0.1"}, "annotation l4lb.maglevlb.io/backends"},
		{"", map[string]string{AnnotationPrefix + "seed": "1"}, "annotation l4lb.maglevlb.io/seed"},
		{"", map[string]string{AnnotationPrefix + "colour": "red"}, "annotation l4lb.maglevlb.io/colour"},
		{"", map[string]string{AnnotationPrefix + "m": "1000"}, "-m 1000"},
		{"forward: gue\n", map[string]string{AnnotationPrefix + "second-chance-window": "0s"}, "-second-chance-window 0s"},
	} {
		got, _, err := Translate(global(t, tc.file), lbService("web", tc.ann, []string{"198.19.0.1"}, http), nodes, nil)
		if !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), tc.want) || got != nil {
			t.Errorf("%v: %v, %d services; want an error with %q", tc.ann, err, len(got), tc.want)
		}
	}
}

// TestServes: the Services of the class, and of none with Default.
func TestServes(t *testing.T) {
	ours, other := "maglevlb.io/l4lb", "example.com/lb"
	for _, tc := range []struct {
		typ   corev1.ServiceType
		class *string
		def   bool
		want  bool
	}{
		{corev1.ServiceTypeLoadBalancer, &ours, false, true},
		{corev1.ServiceTypeLoadBalancer, &other, true, false},
		{corev1.ServiceTypeLoadBalancer, nil, false, false},
		{corev1.ServiceTypeLoadBalancer, nil, true, true},
		{corev1.ServiceTypeClusterIP, &ours, true, false},
		{corev1.ServiceTypeNodePort, nil, true, false},
	} {
		svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: tc.typ, LoadBalancerClass: tc.class}}
		if got := (Class{Name: ours, Default: tc.def}).Serves(svc); got != tc.want {
			t.Errorf("%s %v default %v: %v, want %v", tc.typ, tc.class, tc.def, got, tc.want)
		}
	}
}

// TestRequestedFamilies: the addresses a Service asks for and its
// families.
func TestRequestedFamilies(t *testing.T) {
	svc := &corev1.Service{}
	svc.Spec.LoadBalancerIP = "198.19.0.9"
	if r, err := Requested(svc); err != nil || !slices.Equal(r, addrs("198.19.0.9")) {
		t.Errorf("loadBalancerIP: %v %v", r, err)
	}
	svc.Annotations = map[string]string{AnnotationIP: "2001:db8::9, 198.19.0.7"}
	if r, err := Requested(svc); err != nil || !slices.Equal(r, addrs("2001:db8::9", "198.19.0.7")) {
		t.Errorf("annotation: %v %v", r, err)
	}
	for _, bad := range []string{"x", "198.19.0.1,198.19.0.2", "fe80::1%eth0", "198.19.0.1,2001:db8::1,198.19.0.3"} {
		svc.Annotations[AnnotationIP] = bad
		if _, err := Requested(svc); err == nil || !strings.HasPrefix(err.Error(), "k8slb: ") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	single, prefer, require := corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack
	for _, tc := range []struct {
		fams     []corev1.IPFamily
		policy   *corev1.IPFamilyPolicy
		want     []Family
		required bool
	}{
		{nil, nil, []Family{IPv4}, true},
		{[]corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, &single, []Family{IPv6}, true},
		{[]corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, &prefer, []Family{IPv6, IPv4}, false},
		{[]corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, &require, []Family{IPv4, IPv6}, true},
	} {
		s := &corev1.Service{Spec: corev1.ServiceSpec{IPFamilies: tc.fams, IPFamilyPolicy: tc.policy}}
		if got, req := Families(s); !slices.Equal(got, tc.want) || req != tc.required {
			t.Errorf("%v %v: %v %v, want %v %v", tc.fams, tc.policy, got, req, tc.want, tc.required)
		}
	}
}
