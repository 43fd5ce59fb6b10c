package k8slb

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	listersdiscoveryv1 "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// The reasons of the events on a Service.
const (
	ReasonAllocated        = "IPAllocated"      // a VIP given, written to status
	ReasonAllocationFailed = "AllocationFailed" // the pool exhausted, or the VIP asked for not to be had
	ReasonSettings         = "InvalidSettings"  // annotations that make no service: the Service is not served
)

// The leader election's timings, client-go's LeaderElectionConfig's: a
// new leader takes over at most LeaseDuration + RetryPeriod after the
// last one died, at once after it stopped (the Lease is released).
const (
	LeaseDuration = 8 * time.Second
	RenewDeadline = 6 * time.Second
	RetryPeriod   = 2 * time.Second
)

// resync is how often a controller runs a round with no change seen.
const resync = 30 * time.Second

// Options are a Controller's.
type Options struct {
	Global config.Global        // the K8s settings, and the file's defaults of the services
	Client kubernetes.Interface // through which it reads and writes
	Logger *slog.Logger
	// Apply is called, from one goroutine, with the l4lb services of the
	// Services whenever they change; an error is logged, and the services
	// given again at the next round.
	Apply func([]config.Service) error
	// Identity is this l4lb's in the Lease; "" for the host's name and a
	// random suffix.
	Identity string
}

// A Controller serves the Services of its class: it allocates their VIPs
// while it leads, and hands every served Service's ports to Apply.
type Controller struct {
	opts   Options
	class  Class
	log    *slog.Logger
	events record.EventRecorder
	kick   chan struct{} // a round is due
	synced chan struct{} // closed after the first round
	leader atomic.Bool

	services listerscorev1.ServiceLister
	nodes    listerscorev1.NodeLister
	slices   listersdiscoveryv1.EndpointSliceLister

	// Of the rounds, which run one at a time, on Run's goroutine.
	assumed  map[string]written // statuses written that the cache may not show yet, by key
	failed   map[string]string  // the last allocation failure reported of each Service, by key
	refusals map[string]bool    // the last round's Services refused, each key and why
	last     []config.Service   // what Apply last took

	mu sync.Mutex    // guards g
	g  config.Global // the file's settings, replaced by SetGlobal
}

// written is a status a Controller wrote: the Service's UID and VIPs.
type written struct {
	uid   string
	addrs []netip.Addr
}

// New returns the controller of opts, not started.
func New(opts Options) *Controller {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Identity == "" {
		h, _ := os.Hostname()
		opts.Identity = h + "_" + uuid.NewString()[:8]
	}
	k := opts.Global.K8s
	return &Controller{opts: opts, class: Class{Name: k.Class, Default: k.Default}, log: opts.Logger,
		kick: make(chan struct{}, 1), synced: make(chan struct{}), g: opts.Global, assumed: map[string]written{}, failed: map[string]string{}, refusals: map[string]bool{}}
}

// Leader reports whether c leads: allocates the VIPs.
func (c *Controller) Leader() bool { return c.leader.Load() }

// SetGlobal replaces the file's settings the Services' services are
// built of (a reload), and runs a round with them; on a nil c (no
// vip-pool) it does nothing.
func (c *Controller) SetGlobal(g config.Global) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.g = g
	c.mu.Unlock()
	c.trigger()
}

// Synced is closed once c's first round is done: its caches filled, the
// services of the Services with VIPs in status given to Apply.
func (c *Controller) Synced() <-chan struct{} { return c.synced }

// trigger makes a round due.
func (c *Controller) trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run watches the Services, nodes and EndpointSlices, campaigns for the
// Lease, and runs a round at each change, until ctx is done (a leader
// then releases the Lease). It returns an error if the caches do not
// fill.
func (c *Controller) Run(ctx context.Context) error {
	f := informers.NewSharedInformerFactory(c.opts.Client, 0)
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.trigger() },
		UpdateFunc: func(any, any) { c.trigger() },
		DeleteFunc: func(any) { c.trigger() },
	}
	for _, inf := range []cache.SharedIndexInformer{f.Core().V1().Services().Informer(), f.Core().V1().Nodes().Informer(), f.Discovery().V1().EndpointSlices().Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("k8slb: %w", err)
		}
	}
	c.services, c.nodes, c.slices = f.Core().V1().Services().Lister(), f.Core().V1().Nodes().Lister(), f.Discovery().V1().EndpointSlices().Lister()
	f.Start(ctx.Done())
	defer f.Shutdown()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("k8slb: the cache of %v did not fill: %w", typ, context.Cause(ctx))
		}
	}
	eb := record.NewBroadcaster(record.WithContext(ctx))
	defer eb.Shutdown()
	eb.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.opts.Client.CoreV1().Events("")})
	c.events = eb.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "l4lb"})
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		c.campaign(ctx)
	}()
	defer func() { <-elected }()
	c.log.Info("k8s: controller started", "class", c.class.Name, "default", c.class.Default, "pool", c.opts.Global.K8s.Pool, "identity", c.opts.Identity)
	t := time.NewTicker(resync)
	defer t.Stop()
	for first := true; ; first = false {
		c.round(ctx)
		if first {
			close(c.synced)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-t.C:
		}
	}
}

// round allocates the VIPs, if c leads, and applies the services of the
// served Services with VIPs in status, if they changed.
func (c *Controller) round(ctx context.Context) {
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		c.log.Error("k8s: list failed", "err", err)
		return
	}
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		if d := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); d != 0 {
			return d
		}
		return cmp.Compare(key(a), key(b))
	})
	if c.Leader() {
		c.allocate(ctx, svcs)
	}
	c.translate(svcs)
}
