package httpmaglev

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// loop runs the health checks and the rebuilds passive ejections ask for,
// until ctx ends. With active checks on, it probes every backend at once
// every HealthInterval (NewTransport ran the first round); with them off,
// it readmits ejected backends EjectionTime after their ejection, checking
// every HealthInterval.
func (t *Transport) loop(ctx context.Context) {
	defer close(t.done)
	tick := time.NewTicker(t.cfg.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if t.cfg.HealthPath != "" {
				t.round(ctx)
			} else {
				t.readmitAll()
			}
		case <-t.wake:
			t.republish(rebuildEjection) // the health checks may have dropped it already
		}
	}
}

// republish publishes a new snapshot of the current membership if the
// current one is stale (see staleLocked). A publication that failed
// before (not expected: see serve) is tried again at the next change.
func (t *Transport) republish(why rebuildReason) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.staleLocked() {
		if err := t.publishLocked(t.cur.Load().ms, why); err != nil {
			t.cfg.Logger.Error("httpmaglev: rebuild failed", "err", err)
		}
	}
}

// round probes every configured backend concurrently, applies the results
// and, if a backend went in or out, publishes the new table. A round cut
// short by Close changes nothing.
func (t *Transport) round(ctx context.Context) {
	t.rounds.Add(1)
	members := t.cur.Load().ms.all
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { errs[i] = t.check(ctx, m) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	now := time.Now().UnixNano()
	verdicts := make([]verdict, len(members))
	t.lifeMu.Lock()
	for i, m := range members {
		if !m.life.removed.Load() {
			verdicts[i] = t.observeLocked(m, errs[i], now)
		}
	}
	t.lifeMu.Unlock()
	for i, v := range verdicts {
		t.logVerdict(members[i], v, errs[i])
	}
	t.republish(rebuildHealth)
}

// logVerdict logs and counts what a probe of m did (v), err being its
// result.
func (t *Transport) logVerdict(m *member, v verdict, err error) {
	ctx := context.Background()
	if v.did&downFirst != 0 {
		t.cfg.Logger.Warn("httpmaglev: backend down at its first check", "backend", m.b.Name, "err", err)
	}
	if v.did&wentDown != 0 {
		t.metrics.health.Add(ctx, 1, m.mm.downAdd...)
		t.cfg.Logger.Warn("httpmaglev: backend down", "backend", m.b.Name, "failed", v.fails, "err", err)
	}
	if v.did&cameUp != 0 {
		t.metrics.health.Add(ctx, 1, m.mm.upAdd...)
		t.cfg.Logger.Info("httpmaglev: backend up", "backend", m.b.Name, "passed", v.passes)
	}
	if v.did&readmitted != 0 {
		t.cfg.Logger.Info("httpmaglev: ejected backend readmitted", "backend", m.b.Name, "passed", v.passes)
	}
}

// readmitAll puts back the backends whose ejection has lasted its time,
// with active checks off, and publishes the new table if there were any.
func (t *Transport) readmitAll() {
	for _, m := range t.readmitDue(t.cur.Load().ms.all, time.Now().UnixNano()) {
		p := m.life.phase.Load()
		t.cfg.Logger.Info("httpmaglev: ejected backend readmitted", "backend", m.b.Name, "after", time.Duration(p.until-p.at))
	}
	t.republish(rebuildReadmission)
}

// check GETs m's health URL and returns nil on a 2xx answer within
// HealthTimeout.
func (t *Transport) check(ctx context.Context, m *member) error {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.HealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.health, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "httpmaglev-health")
	resp, err := t.probe.Do(req)
	if err != nil {
		return err
	}
	// Drain a little so the connection can be reused; the status decides.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s", m.health, resp.Status)
	}
	return nil
}
