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
// it readmits
// ejected backends EjectionTime after their ejection, checking every
// HealthInterval.
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
				t.readmit()
			}
		case <-t.wake:
			t.mu.Lock()
			if t.staleLocked() { // the health checks may have dropped it already
				if err := t.publishLocked(t.members, "ejection"); err != nil {
					t.cfg.Logger.Error("httpmaglev: rebuild failed", "err", err)
				}
			}
			t.mu.Unlock()
		}
	}
}

// staleLocked reports whether the current table is not over exactly the
// healthy members. Call it with t.mu held.
func (t *Transport) staleLocked() bool {
	s := t.cur.Load()
	n := 0
	for _, m := range t.members {
		if !m.healthy() {
			continue
		}
		n++
		if i := s.table.Index(m.b.Name); i < 0 || s.members[i] != m {
			return true
		}
	}
	return n != len(s.members)
}

// round probes every configured backend concurrently, applies the results
// and, if a backend went in or out, rebuilds the table. A round cut short
// by Close changes nothing.
func (t *Transport) round(ctx context.Context) {
	t.rounds.Add(1)
	t.mu.Lock()
	members := t.members
	t.mu.Unlock()
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { errs[i] = t.check(ctx, m) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	for i, m := range members {
		if !m.removed {
			changed = t.observe(m, errs[i]) || changed
		}
	}
	// A rebuild that failed before (a NewTable error, say) is tried again
	// every round until the table matches the healthy backends.
	if changed || t.staleLocked() {
		if err := t.publishLocked(t.members, "health"); err != nil {
			t.cfg.Logger.Error("httpmaglev: rebuild failed", "err", err)
		}
	}
}

// observe records the result of a probe of m and reports whether m went
// in or out of the table. Call it with t.mu held. The first probe of a
// backend decides its health; later, Fall consecutive failures take it
// out and Rise consecutive passes put it back, and also readmit it after
// a passive ejection.
func (t *Transport) observe(m *member, err error) bool {
	was := m.healthy()
	if gen := m.ejectGen.Load(); gen != m.seenGen {
		m.seenGen, m.passes = gen, 0
	}
	if err == nil {
		m.fails, m.passes = 0, m.passes+1
	} else {
		m.fails, m.passes = m.fails+1, 0
	}
	switch {
	case !m.known:
		m.known, m.up = true, err == nil
		if err != nil {
			t.cfg.Logger.Warn("httpmaglev: backend down at its first check", "backend", m.b.Name, "err", err)
		}
	case m.up && err != nil && m.fails >= t.cfg.Fall:
		m.up = false
		t.metrics.health.Add(context.Background(), 1, m.mm.downAdd...)
		t.cfg.Logger.Warn("httpmaglev: backend down", "backend", m.b.Name, "failed", m.fails, "err", err)
	case !m.up && err == nil && m.passes >= t.cfg.Rise:
		m.up = true
		t.metrics.health.Add(context.Background(), 1, m.mm.upAdd...)
		t.cfg.Logger.Info("httpmaglev: backend up", "backend", m.b.Name, "passed", m.passes)
	}
	// An ejection counts its generation before it sets ejected, so one
	// that happened while this probe was out shows here as a new
	// generation: its passes do not count toward readmitting it.
	if m.ejected.Load() && err == nil && m.passes >= t.cfg.Rise && m.ejectGen.Load() == m.seenGen &&
		time.Now().UnixNano()-m.ejectedAt.Load() >= m.ejectFor.Load() {
		t.readmitMember(m)
		t.cfg.Logger.Info("httpmaglev: ejected backend readmitted", "backend", m.b.Name, "passed", m.passes)
	}
	return m.healthy() != was
}

// readmit puts back the backends whose ejection has lasted its time, with
// active checks off, and rebuilds the table if there were any.
func (t *Transport) readmit() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now().UnixNano()
	changed := false
	for _, m := range t.members {
		if m.ejected.Load() && now-m.ejectedAt.Load() >= m.ejectFor.Load() {
			t.readmitMember(m)
			changed = true
			t.cfg.Logger.Info("httpmaglev: ejected backend readmitted", "backend", m.b.Name, "after", time.Duration(m.ejectFor.Load()))
		}
	}
	if changed || t.staleLocked() {
		if err := t.publishLocked(t.members, "readmission"); err != nil {
			t.cfg.Logger.Error("httpmaglev: rebuild failed", "err", err)
		}
	}
}

// readmitMember ends m's ejection. Call it with t.mu held.
func (t *Transport) readmitMember(m *member) {
	m.connFails.Store(0)
	m.readmittedAt.Store(time.Now().UnixNano())
	m.ejected.Store(false)
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
