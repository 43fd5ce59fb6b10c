package k8slb

import (
	"context"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// campaign runs for the Lease until ctx is done: while c leads, its
// rounds allocate.
func (c *Controller) campaign(ctx context.Context) {
	ns, name := c.opts.Global.K8s.LeaseName()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
		Client:     c.opts.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.opts.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: LeaseDuration, RenewDeadline: RenewDeadline, RetryPeriod: RetryPeriod,
			ReleaseOnCancel: true, Name: "l4lb-vip-allocator",
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					c.leader.Store(true)
					c.log.Info("k8s: leading, allocating VIPs", "lease", c.opts.Global.K8s.Lease, "identity", c.opts.Identity)
					c.trigger()
				},
				OnStoppedLeading: func() {
					if c.leader.Swap(false) {
						c.log.Info("k8s: no longer leading", "lease", c.opts.Global.K8s.Lease, "identity", c.opts.Identity)
					}
				},
				OnNewLeader: func(id string) {
					if id != c.opts.Identity {
						c.log.Info("k8s: another l4lb leads", "lease", c.opts.Global.K8s.Lease, "leader", id)
					}
				},
			},
		})
		if err != nil { // a configuration of ours: never
			c.log.Error("k8s: leader election failed", "err", err)
			return
		}
		le.Run(ctx) // returns when c stops leading, or ctx is done
	}
}

// allocate gives each served Service of svcs (oldest first) its VIPs,
// in a pool rebuilt from every Service's status, so that no VIP in
// status moves: the addresses it asks for, or the first free ones of its
// families. A Service served whose status holds an address outside the
// pool, or another's, is given new ones.
func (c *Controller) allocate(ctx context.Context, svcs []*corev1.Service) {
	pool := NewPool(c.opts.Global.K8s.Pool)
	var need []pending
	seen := map[string]bool{}
	for _, svc := range svcs {
		if !c.class.Serves(svc) {
			for _, a := range Ingress(svc) {
				_ = pool.Assign(key(svc), a) // another's: an address in status is in use
			}
			continue
		}
		seen[key(svc)] = true
		addrs := c.statusOf(svc)
		keep := len(addrs) > 0
		for _, a := range addrs {
			if err := pool.Assign(key(svc), a); err != nil {
				keep = false
			}
		}
		if req, err := Requested(svc); err == nil && !subset(req, addrs) {
			keep = false // asked for another since
		}
		if !keep {
			pool.Release(key(svc))
			need = append(need, pending{svc, addrs})
		}
	}
	for k := range c.assumed {
		if !seen[k] {
			delete(c.assumed, k)
		}
	}
	for k := range c.failed {
		if !seen[k] {
			delete(c.failed, k)
		}
	}
	for _, p := range need {
		c.give(ctx, pool, p)
	}
}

// pending is a Service to give VIPs, and those its status has.
type pending struct {
	svc    *corev1.Service
	status []netip.Addr
}

// statusOf returns the VIPs in svc's status, or those c wrote that the
// cache does not show yet.
func (c *Controller) statusOf(svc *corev1.Service) []netip.Addr {
	addrs := Ingress(svc)
	w, ok := c.assumed[key(svc)]
	switch {
	case !ok:
	case w.uid != string(svc.UID):
		delete(c.assumed, key(svc))
	case sameSet(w.addrs, addrs):
		delete(c.assumed, key(svc)) // the cache caught up
	default:
		return w.addrs
	}
	return addrs
}

// give allocates p's VIPs from pool and writes them to its status, with
// an event; or reports, once, why it cannot, the VIPs of its status
// kept in the pool (those that are free), for no other to be given.
func (c *Controller) give(ctx context.Context, pool *Pool, p pending) {
	svc, k := p.svc, key(p.svc)
	fams, required := Families(svc)
	req, err := Requested(svc)
	var addrs []netip.Addr
	if err == nil {
		addrs, err = pool.Allocate(k, fams, req, required)
	}
	if err != nil {
		holdStatus(pool, p)
		if c.failed[k] != err.Error() {
			c.failed[k] = err.Error()
			c.events.Event(svc, corev1.EventTypeWarning, ReasonAllocationFailed, err.Error())
			c.log.Warn("k8s: allocation failed", "service", k, "err", err)
		}
		return
	}
	up := svc.DeepCopy()
	up.Status.LoadBalancer.Ingress = IngressOf(addrs)
	if _, err := c.opts.Client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil {
		pool.Release(k)
		holdStatus(pool, p)
		c.log.Warn("k8s: status not written, tried again at the next round", "service", k, "vips", addrs, "err", err)
		go c.retry(ctx)
		return
	}
	delete(c.failed, k)
	c.assumed[k] = written{uid: string(svc.UID), addrs: addrs}
	c.events.Eventf(svc, corev1.EventTypeNormal, ReasonAllocated, "VIPs %v given from the pool", addrs)
	c.log.Info("k8s: VIP allocated", "service", k, "vips", addrs)
}

// holdStatus gives p's Service back the VIPs of its status that are free in
// pool: they stay its while it has no others, for no other Service to be
// given them.
func holdStatus(pool *Pool, p pending) {
	for _, a := range p.status {
		_ = pool.Assign(key(p.svc), a) // another's, or outside the pool: not kept
	}
}

// retry runs a round a retry period from now.
func (c *Controller) retry(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(RetryPeriod):
		c.trigger()
	}
}

// sameSet reports whether a and b hold the same addresses.
func sameSet(a, b []netip.Addr) bool {
	return len(a) == len(b) && subset(a, b)
}

// subset reports whether every address of a is in b.
func subset(a, b []netip.Addr) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
