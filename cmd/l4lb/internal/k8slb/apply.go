package k8slb

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// translate hands Apply the services of the served Services of svcs with
// VIPs in status, if they are not those it last took. A Service whose
// settings make no service is left out, with an event if c leads.
func (c *Controller) translate(svcs []*corev1.Service) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		c.log.Error("k8s: list failed", "err", err)
		return
	}
	c.mu.Lock()
	g := c.g
	c.mu.Unlock()
	var out []config.Service
	refusals := c.refusals
	c.refusals = map[string]bool{}
	of := map[string]*corev1.Service{} // the Service of each service, by name
	for _, svc := range svcs {
		if !c.class.Serves(svc) || len(Ingress(svc)) == 0 {
			continue
		}
		var eps []*discoveryv1.EndpointSlice
		if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
			if eps, err = c.slices.EndpointSlices(svc.Namespace).List(sel); err != nil {
				c.log.Error("k8s: list failed", "err", err)
				return
			}
		}
		got, warnings, err := Translate(g, svc, nodes, eps)
		if err != nil {
			c.refused(refusals, svc, err.Error())
			continue
		}
		for _, w := range warnings {
			c.refused(refusals, svc, w)
		}
		for _, s := range got {
			if o := owner(out, s); o != "" {
				c.refused(refusals, svc, fmt.Sprintf("%s: %v is %s's", s.Name, s.Svc, o))
				continue
			}
			out = append(out, s)
			of[s.Name] = svc
		}
	}
	slices.SortFunc(out, func(a, b config.Service) int { return strings.Compare(a.Name, b.Name) })
	if same(out, c.last) {
		return
	}
	if err := c.opts.Apply(out); err != nil {
		out = c.applyEach(out, of, refusals)
	}
	c.last = out
}

// applyEach applies the services of out that c.last holds as they are,
// and then each other alone, which Apply refused together: those Apply
// refuses alone are reported (refused) and left out. It returns the
// services applied.
func (c *Controller) applyEach(out []config.Service, of map[string]*corev1.Service, last map[string]bool) []config.Service {
	var base, next []config.Service
	for _, s := range out {
		if slices.ContainsFunc(c.last, func(l config.Service) bool { return l.Name == s.Name && l.Settings == s.Settings }) {
			base = append(base, s)
		} else {
			next = append(next, s)
		}
	}
	if err := c.opts.Apply(base); err != nil {
		c.log.Error("k8s: services not applied, tried again at the next round", "err", err)
		return c.last
	}
	for _, s := range next {
		if err := c.opts.Apply(append(slices.Clone(base), s)); err != nil {
			c.refused(last, of[s.Name], fmt.Sprintf("%s: %v", s.Name, err))
			continue
		}
		base = append(base, s)
	}
	slices.SortFunc(base, func(a, b config.Service) int { return strings.Compare(a.Name, b.Name) })
	return base
}

// refused reports why svc is not served, or a port of it, unless the
// last round's refusals reported it: an event on it if c leads, a log
// record.
func (c *Controller) refused(last map[string]bool, svc *corev1.Service, why string) {
	k := key(svc) + "\x00" + why
	c.refusals[k] = true
	if last[k] {
		return
	}
	c.log.Warn("k8s: service refused", "service", key(svc), "err", why)
	if c.Leader() {
		c.events.Event(svc, corev1.EventTypeWarning, ReasonSettings, why)
	}
}

// owner returns the name of the service of svcs that is s's VIP, port
// and protocol, or "".
func owner(svcs []config.Service, s config.Service) string {
	for _, o := range svcs {
		if o.Svc == s.Svc {
			return o.Name
		}
	}
	return ""
}

// Merge returns the file's services and then the controller's, but for
// those of the controller's whose VIP, port and protocol is one of the
// file's: the file's wins, and each left out is logged.
func Merge(file, k8s []config.Service, log *slog.Logger) []config.Service {
	out := slices.Clone(file)
	for _, s := range k8s {
		if o := owner(file, s); o != "" {
			log.Warn("k8s: service left out, the file's has its address", "service", s.Name, "vip", s.Svc.String(), "file_service", o)
			continue
		}
		out = append(out, s)
	}
	return out
}

// same reports whether a and b are the same services: names and
// settings (which hold the VIP, protocol and backends).
func same(a, b []config.Service) bool {
	return slices.EqualFunc(a, b, func(x, y config.Service) bool { return x.Name == y.Name && x.Settings == y.Settings })
}
