package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A checker probes every backend's health URL once an interval, all
// backends at once, and rebuilds the proxy's table when one crosses its
// threshold: Fall consecutive failed probes drop a healthy backend, Rise
// consecutive passed probes re-add it. A probe passes if it gets a 2xx
// answer within HealthTimeout, on a new connection.
//
// Rounds are HealthInterval apart, so a backend that dies is dropped by the
// Fall-th round that starts after its death: within Fall intervals if it
// refuses connections (two with the default -fall 2), plus at most one
// HealthTimeout if it hangs instead.
type checker struct {
	p      *proxy
	client *http.Client
	status []status     // status[i] is p.backends[i]'s; only rounds touch it
	rounds atomic.Int64 // rounds started

	mu     sync.Mutex // protects cancel and done
	cancel context.CancelFunc
	done   chan struct{}
}

// A status is what the checker knows of one backend.
type status struct {
	healthy bool // in the table
	known   bool // probed at least once
	fails   int  // consecutive failed probes
	passes  int  // consecutive passed probes
}

func (c *checker) init(p *proxy) {
	c.p = p
	c.client = &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	c.status = make([]status, len(p.backends))
	for i := range c.status {
		c.status[i].healthy = true // as in the first table
	}
}

// start starts the health checker. It probes every backend once before it
// returns, so that the table reflects the first answers: the first probe of
// a backend decides its health, without waiting for Fall or Rise. Then it
// probes every HealthInterval until stop. Calling start on a running
// checker does nothing.
func (p *proxy) start() {
	c := &p.health
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.round(ctx)
	c.cancel, c.done = cancel, make(chan struct{})
	go c.loop(ctx, c.done)
}

// stop stops the health checker and waits for it to finish; the table
// stays as it is. The checker may be started again.
func (p *proxy) stop() {
	c := &p.health
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.cancel, c.done = nil, nil
}

func (c *checker) loop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(c.p.cfg.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.round(ctx)
		}
	}
}

// round probes every backend concurrently, applies the results and, if a
// backend went up or down, rebuilds the table. A round cut short by stop
// changes nothing.
func (c *checker) round(ctx context.Context) {
	n := c.rounds.Add(1)
	p := c.p
	errs := make([]error, len(p.backends))
	var wg sync.WaitGroup
	for i, b := range p.backends {
		wg.Go(func() { errs[i] = c.probe(ctx, b) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	changed := false
	for i, err := range errs {
		changed = c.observe(i, err) || changed
	}
	if !changed {
		return
	}
	var healthy []*backend
	for i, b := range p.backends {
		if c.status[i].healthy {
			healthy = append(healthy, b)
		}
	}
	if err := p.rebuild(healthy, n); err != nil {
		p.log.Print(err)
	}
}

// observe records the result of a probe of backend i and reports whether
// the backend went up or down.
func (c *checker) observe(i int, err error) bool {
	s, b, p := &c.status[i], c.p.backends[i], c.p
	if err == nil {
		s.fails, s.passes = 0, s.passes+1
	} else {
		s.fails, s.passes = s.fails+1, 0
	}
	switch {
	case !s.known:
		s.known = true
		if err != nil {
			s.healthy = false
			p.log.Printf("backend %s down at first check: %v", b.name, err)
			return true
		}
	case s.healthy && err != nil:
		if s.fails < p.cfg.Fall {
			p.log.Printf("backend %s failed check %d of %d: %v", b.name, s.fails, p.cfg.Fall, err)
			return false
		}
		s.healthy = false
		p.log.Printf("backend %s down after %d failed checks: %v", b.name, s.fails, err)
		return true
	case !s.healthy && err == nil && s.passes >= p.cfg.Rise:
		s.healthy = true
		p.log.Printf("backend %s up after %d passed checks", b.name, s.passes)
		return true
	}
	return false
}

// probe checks b's health URL.
func (c *checker) probe(ctx context.Context, b *backend) error {
	ctx, cancel := context.WithTimeout(ctx, c.p.cfg.HealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.health, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "lbproxy-health")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	// Drain a little so the connection can be reused; the status decides.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s", b.health, resp.Status)
	}
	return nil
}
