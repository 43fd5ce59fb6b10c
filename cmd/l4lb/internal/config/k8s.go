package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"go.yaml.in/yaml/v3"
)

// K8s is the Kubernetes controller's configuration (package k8slb): on
// when Pool is not empty.
type K8s struct {
	Pool       []netip.Prefix // vip-pool, each masked, none overlapping
	Class      string         // k8s-lb-class
	Default    bool           // k8s-lb-default
	Lease      string         // k8s-lease, NAMESPACE/NAME
	Kubeconfig string         // kubeconfig at the top of a file; "": in a pod its service account, else $KUBECONFIG or ~/.kube/config
}

// On reports whether the controller runs: vip-pool is given.
func (k K8s) On() bool { return len(k.Pool) > 0 }

// LeaseName returns the namespace and the name of k.Lease.
func (k K8s) LeaseName() (ns, name string) {
	ns, name, _ = strings.Cut(k.Lease, "/")
	return ns, name
}

// buildK8s returns the controller's settings of vs; the kubeconfig is
// the file's (Parse sets it).
func buildK8s(vs *setting.Values) (K8s, error) {
	k := K8s{Pool: vipPool.Get(vs), Class: k8sLBClass.Get(vs), Default: k8sLBDefault.Get(vs), Lease: k8sLease.Get(vs)}
	if !k.On() {
		for _, s := range []*setting.Setting{k8sLBClass.Setting, k8sLBDefault.Setting, k8sLease.Setting} {
			if vs.Given(s) {
				return k, setting.Errorf(s, "-%s needs -vip-pool", s.Name)
			}
		}
		return k, nil
	}
	if k.Class == "" || strings.Count(k.Class, "/") != 1 || strings.ContainsAny(k.Class, " \t") {
		return k, setting.Errorf(k8sLBClass.Setting, "-k8s-lb-class %q: a label-style key, DOMAIN/NAME", k.Class)
	}
	ns, name, ok := strings.Cut(k.Lease, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return k, setting.Errorf(k8sLease.Setting, "-k8s-lease %q: NAMESPACE/NAME", k.Lease)
	}
	return k, nil
}

// parsePoolPrefix parses a prefix of vip-pool: masked, of at least two
// addresses for IPv4 wider than /31, where the first and last are left.
func parsePoolPrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		a, aerr := netip.ParseAddr(strings.TrimSpace(s))
		if aerr != nil {
			return p, fmt.Errorf("neither a prefix nor an address")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Zone() != "" || p.Addr().Is4In6() {
		return p, fmt.Errorf("a prefix of plain IPv4 or IPv6 addresses")
	}
	if p.Masked() != p {
		return p, fmt.Errorf("not a prefix's first address (%v)", p.Masked())
	}
	if !p.Addr().IsGlobalUnicast() {
		return p, fmt.Errorf("not of unicast addresses")
	}
	return p, nil
}

// distinctPrefix refuses a prefix that overlaps one given before.
func distinctPrefix(have []netip.Prefix, p netip.Prefix) error {
	for _, h := range have {
		if h.Overlaps(p) {
			return fmt.Errorf("%v overlaps %v", p, h)
		}
	}
	return nil
}

// ErrOverride is wrapped by K8sService's errors that name a setting no
// Service may set.
var ErrOverride = errors.New("not a setting a Service may override")

// Overridable reports whether a Service's annotation may set the
// setting of key: a service's or its health check's, not its own (name,
// vip, backends, drain), not its protocol (the Service's port's), not
// its membership source's, not a file of the load balancer's host.
func Overridable(key string) bool {
	s := keys[key]
	return s != nil && (s.Scope == setting.Service || s.Scope == setting.Health) && !s.Own && !s.KeyOnly &&
		s != proto.Setting && s != quicLBKeyFile.Setting
}

// K8sService builds the l4lb service named name of a Kubernetes Service's
// port: its VIP addr, protocol (tcp or udp) and backends (the nodes), with the
// settings of the file's top (g's defaults) overridden by over (a key of
// the file to its value, as text: the Service's annotations). Its errors
// are setting.Errors (setting.SettingOf names the setting at fault), or
// wrap ErrOverride.
func (g Global) K8sService(name string, addr netip.AddrPort, protocol string, nodes []netip.Addr, over map[string]string) (Service, error) {
	vs := &setting.Values{}
	for k, v := range over {
		if !Overridable(k) {
			return Service{}, fmt.Errorf("%w: %s", ErrOverride, k)
		}
		if err := vs.Set(keys[k], v); err != nil {
			return Service{}, setting.Errorf(keys[k], "-%s %q: %v", k, v, err)
		}
	}
	given := func(key string) bool { _, ok := over[key]; return ok || g.defaults[keys[key]] != nil }
	for _, s := range table {
		d := g.defaults[s]
		if d == nil || vs.Given(s) || s.Scope == setting.Source || s == proto.Setting {
			continue
		}
		if s.Needs != "" && !given(s.Needs) {
			continue
		}
		if err := setValue(vs, s, s.KeyName(), d); err != nil {
			return Service{}, setting.Errorf(s, "%v", err.err)
		}
	}
	if err := vs.Set(vip.Setting, addr.String()); err != nil {
		return Service{}, err
	}
	if err := vs.Set(proto.Setting, protocol); err != nil {
		return Service{}, err
	}
	for _, b := range nodes {
		if err := vs.Set(backends.Setting, b.String()); err != nil {
			return Service{}, err
		}
	}
	c, _, err := buildService(vs, g, name)
	return c, err
}

// topDefaults returns the services' settings given at a file's top, and
// the kubeconfig there.
func topDefaults(t *top) (map[*setting.Setting]*yaml.Node, string) {
	kc := ""
	if n := t.defaults[keys["kubeconfig"]]; n != nil && n.Kind == yaml.ScalarNode {
		kc = n.Value
	}
	return t.defaults, kc
}
