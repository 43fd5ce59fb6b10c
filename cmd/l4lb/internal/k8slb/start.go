package k8slb

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/balancer"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/k8smaglev"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Services are what a balancer runs: the file's services and the
// controller's, given to Apply together whenever either changes, so that
// a reload of the file keeps the controller's and a change of the
// Services keeps the file's. Its methods are safe for concurrent use;
// one Apply runs at a time.
type Services struct {
	Apply func([]config.Service) (balancer.Applied, error) // the balancer's
	Log   *slog.Logger

	mu        sync.Mutex // guards file and k8s, and serializes Apply
	file, k8s []config.Service
}

// SetFile applies svcs, the file's services, with the controller's.
func (s *Services) SetFile(svcs []config.Service) (balancer.Applied, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	did, err := s.Apply(Merge(svcs, s.k8s, s.Log))
	if err == nil {
		s.file = svcs
	}
	return did, err
}

// SetK8s applies svcs, the controller's services, with the file's.
func (s *Services) SetK8s(svcs []config.Service) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	did, err := s.Apply(Merge(s.file, svcs, s.Log))
	if err != nil {
		return err
	}
	s.k8s = svcs
	s.Log.Info("k8s: services applied", "applied", did)
	return nil
}

// FirstRound is how long Start waits for the controller's first round
// before the file's services start without the Services'.
const FirstRound = 10 * time.Second

// Start starts the controller of g with the cluster of g.K8s.Kubeconfig,
// its services given to s, and waits for its first round, at most wait
// (the API server does not answer: the file's services start meanwhile).
// client-go's own records go to log. The controller stops when ctx is
// done or at stop, which waits for it and may be called again. Without
// vip-pool (!g.K8s.On()) there is no controller: a nil *Controller, whose
// SetGlobal does nothing, and a stop that does nothing.
func Start(ctx context.Context, g config.Global, s *Services, log *slog.Logger, wait time.Duration) (c *Controller, stop func(), err error) {
	if !g.K8s.On() {
		return nil, func() {}, nil
	}
	cfg, err := k8smaglev.RESTConfig(g.K8s.Kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("k8slb: %w", err)
	}
	cfg.UserAgent = "l4lb"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("k8slb: %w", err)
	}
	klog.SetSlogLogger(log.With("from", "client-go"))
	c = New(Options{Global: g, Client: cs, Logger: log, Apply: s.SetK8s})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			log.Error("k8s: controller stopped", "err", err)
		}
	}()
	select {
	case <-c.Synced():
	case <-time.After(wait):
		log.Warn("k8s: no first round yet, the file's services start without the Services'", "waited", wait)
	case <-ctx.Done():
	}
	return c, func() { cancel(); <-done }, nil
}
