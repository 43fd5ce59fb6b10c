package httpmaglev_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/maglevlb/maglev/httpmaglev"
)

// backendState returns the named backend's part of tr's State.
func backendState(t *testing.T, tr *httpmaglev.Transport, name string) httpmaglev.BackendState {
	t.Helper()
	for _, b := range tr.State().Backends {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("no backend %s in State", name)
	return httpmaglev.BackendState{}
}

// TestConsecutive5xx: with Consecutive5xx 3, a real backend on loopback
// that answers 500 three times in a row is ejected for "consecutive 5xx"
// (its keys move to the table without it), and readmitted by the backoff
// of every ejection: with active checks off after EjectionTime; with them
// on after Rise passed checks, and the next ejection lasts EjectionTime
// longer. An answer of another status resets the count; the 500s are
// returned as they are, never retried. Off by default.
func TestConsecutive5xx(t *testing.T) {
	const ejection = 300 * time.Millisecond
	for _, active := range []bool{false, true} {
		name := map[bool]string{false: "active=false", true: "active=true"}[active]
		t.Run(name, func(t *testing.T) {
			servers := startServers(t, 3)
			cfg := httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), Consecutive5xx: 3, EjectionTime: ejection,
				HealthInterval: 20 * time.Millisecond, HealthTimeout: 20 * time.Millisecond}
			if active {
				// The checks pass while the backend answers 500; three
				// rounds of 100 ms keep it out long enough to look.
				cfg.HealthPath = "/healthz"
				cfg.HealthInterval, cfg.HealthTimeout, cfg.Rise = 100*time.Millisecond, 100*time.Millisecond, 3
			}
			tr := newTransport(t, cfg, servers)
			base := tr.Table()
			victim := servers[1]
			var onVictim []string
			for _, k := range keys(300) {
				if base.Lookup(k) == victim.name {
					onVictim = append(onVictim, k)
				}
			}
			client := &http.Client{Transport: tr}
			send := func(k string, want int) {
				t.Helper()
				if status, got, err := get(t, client, "http://x", http.MethodGet, k); err != nil || status != want || got != victim.name {
					t.Fatalf("key %q: %d from %s, %v; want %d from %s", k, status, got, err, want, victim.name)
				}
			}
			// Two 500s, an answer of 200, two 500s: no three in a row.
			victim.failing.Store(true)
			send(onVictim[0], http.StatusInternalServerError)
			send(onVictim[1], http.StatusInternalServerError)
			victim.failing.Store(false)
			send(onVictim[2], http.StatusOK)
			victim.failing.Store(true)
			send(onVictim[3], http.StatusInternalServerError)
			send(onVictim[4], http.StatusInternalServerError)
			if b := backendState(t, tr, victim.name); b.Status != httpmaglev.StatusServing || b.Ejections != 0 {
				t.Fatalf("after 500s broken by a 200: %+v, want serving", b)
			}
			for n := 1; n <= 2; n++ {
				start := time.Now()
				send(onVictim[5], http.StatusInternalServerError) // the third in a row
				b := backendState(t, tr, victim.name)
				if b.Reason != httpmaglev.Reason5xx || !b.Ejected || b.Ejections != int64(n) {
					t.Fatalf("ejection %d: %+v, want ejected for %q", n, b, httpmaglev.Reason5xx)
				}
				waitFor(t, "the ejection's rebuild", func() bool { return !backendState(t, tr, victim.name).Healthy })
				without := tableWithout(t, base, victim.name)
				for _, k := range onVictim[:20] {
					if _, got, err := get(t, client, "http://x", http.MethodGet, k); err != nil || got != without.Lookup(k) {
						t.Fatalf("ejection %d: key %q from %s, %v; want %s", n, k, got, err, without.Lookup(k))
					}
				}
				waitFor(t, "readmission", func() bool { return backendState(t, tr, victim.name).Healthy })
				// Active checks off: n·EjectionTime; on: (n-1)·EjectionTime and Rise checks.
				least := time.Duration(n) * ejection
				if active {
					least -= ejection
				}
				if took := time.Since(start); took < least {
					t.Errorf("ejection %d lasted %v, want at least %v", n, took, least)
				}
				if b := backendState(t, tr, victim.name); b.Status != httpmaglev.StatusServing || b.Reason != "" {
					t.Errorf("readmitted: %+v, want serving", b)
				}
				// Readmission resets the count: two more 500s do not eject it.
				send(onVictim[3], http.StatusInternalServerError)
				send(onVictim[4], http.StatusInternalServerError)
			}
			if st := tr.State(); st.Retries != 0 {
				t.Errorf("%d retries of 500 answers, want none", st.Retries)
			}

			// Off by default: a backend answering 500 stays.
			off := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)}, servers)
			client = &http.Client{Transport: off}
			for range 10 {
				send(onVictim[0], http.StatusInternalServerError)
			}
			if b := backendState(t, off, victim.name); b.Status != httpmaglev.StatusServing || b.Ejected {
				t.Errorf("Consecutive5xx 0: after 10 answers of 500, %+v; want serving", b)
			}
		})
	}
}
