package httpmaglev

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/maglevlb/maglev/internal/health"
)

// A backend's life cycle, in one place: where a configured backend is
// (Status), why one is out of service (Reason), the type that holds a
// backend's health and its lock (life), the one function that says the
// state (Transport.status), and every change of it: ejection, the active
// checks' verdicts, readmission and the backoff.

// A Reason says why a backend is out of service: the kind of failure that
// ejected it, or its failed active checks. BackendState.Reason shows it, and
// the log line of an ejection names it.
type Reason string

// The reasons a backend is out of service. Every one but ReasonProbe is a
// passive ejection, which RoundTrip detects: it backs off (see
// Config.EjectionTime) and never takes out more than half the configured
// backends. A new reason is a constant here and the one place that detects
// it.
const (
	ReasonConnect Reason = "connect failure" // the last of EjectAfter faults in a row was a failed dial: refused, unreachable, timed out
	ReasonTLS     Reason = "TLS failure"     // the last was a failed TLS handshake: no TLS spoken, an untrusted certificate, an alert from the backend
	ReasonLost    Reason = "connection lost" // the last was the connection reset or closed before the response headers
	ReasonTimeout Reason = "timeout"         // the last was a timeout awaiting the response headers
	Reason5xx     Reason = "consecutive 5xx" // Config.Consecutive5xx answers in a row had a 5xx status
	ReasonProbe   Reason = "probe failure"   // Config.Fall active checks in a row failed, or the first one did
)

// passive reports whether r is a passive ejection's reason.
func (r Reason) passive() bool { return r != "" && r != ReasonProbe }

// A Status is where a configured backend is in its life cycle.
type Status string

// The statuses of a configured backend. Only a serving backend is in the
// table; the others' keys are served by the table without them (see
// Transport.Table), but for a draining one, which the membership leaves
// out.
const (
	StatusServing  Status = "serving"  // in the table
	StatusEjected  Status = "ejected"  // out for a passive reason until its ejection time ends
	StatusProbing  Status = "probing"  // out until Config.Rise active checks in a row pass: its checks failed, or its ejection time ended with active checks on
	StatusDraining Status = "draining" // weight 0 in a list that gives weights: out of the table by configuration, still checked, its requests in flight finishing
)

// A life is one configured backend's health: its phase (in service or
// not, why, until when, and the backoff), the counts on the request path
// that eject it, and the active checks' memory that readmits it. It lives
// in its member, which SetBackends replaces when the backend's URL or
// weight changes: a new member starts serving.
//
// Locking, the one discipline for a backend's health:
//   - Every change of phase, and the active checks' memory (checks, the
//     rise and fall state machine of internal/health), happen with
//     Transport.lifeMu held.
//   - A phase is immutable and replaced whole, so everyone else (RoundTrip,
//     State, the metrics, a rebuild) reads it with one atomic load and no
//     lock.
//   - The request path's counts (faults, fives) are atomics, written
//     without a lock by every answer and fault; RoundTrip takes lifeMu only
//     when a count reaches its threshold.
//   - lifeMu is held for O(N) at most (the ejection cap counts the
//     ejected), never across a network wait, a table build or a log write,
//     and never together with Transport.mu, which membership changes and
//     publications hold: a request never waits for a rebuild, nor a
//     rebuild for a request.
type life struct {
	phase   atomic.Pointer[phase] // never nil
	faults  atomic.Int32          // consecutive backend faults (see faultOf)
	fives   atomic.Int32          // consecutive answers with a 5xx status, counted with Consecutive5xx on
	removed atomic.Bool           // no longer configured: its probes and failures are ignored

	// The active checks' memory, guarded by Transport.lifeMu: the
	// backend's health (Unknown until its first probe) with its passed and
	// failed probes in a row, the passes counted since the last ejection.
	checks health.Machine
}

// A phase is a backend's health at one moment. It is immutable: a change
// publishes a new one, with Transport.lifeMu held.
type phase struct {
	down    bool   // the active checks took it out: Fall failed probes in a row, or its first
	ejected Reason // a passive ejection's reason; "" when not ejected
	at      int64  // when it was last ejected, in Unix nanoseconds
	until   int64  // its ejection lasts at least until then, in Unix nanoseconds
	streak  int64  // consecutive ejections, the backoff's n
	back    int64  // when it was last readmitted, in Unix nanoseconds; 0 if never
}

// fresh is the phase every backend starts in: serving, never ejected.
// Phases are immutable, so all share it.
var fresh = new(phase)

// init starts l serving, its health Unknown until its first probe, which
// rise passes in a row or fall failures in a row change after.
func (l *life) init(rise, fall int) {
	l.phase.Store(fresh)
	l.checks = health.New(rise, fall, health.Unknown)
}

// status says where m, a member of ms, is at now (Unix nanoseconds): the
// one function the table (serving or not), State and the metrics read a
// backend's health from. A drained backend is draining, whatever its
// health; an ejected one is ejected until its ejection time ends, and then,
// with active checks on, probing until Rise checks pass; one that failed
// its active checks is probing. It reads m's phase with one atomic load,
// takes no lock and does not allocate.
func (t *Transport) status(ms *roster, m *member, now int64) (Status, Reason) {
	if m.drained() {
		return StatusDraining, ""
	}
	p := m.life.phase.Load()
	switch {
	case p.ejected != "" && t.cfg.HealthPath != "" && now >= p.until:
		return StatusProbing, p.ejected
	case p.ejected != "":
		return StatusEjected, p.ejected
	case p.down:
		return StatusProbing, ReasonProbe
	}
	return StatusServing, ""
}

// faultOf returns the reason err, from sending req, says something about
// the backend, or "" if it says nothing: a failed dial (ReasonConnect) or
// TLS handshake (ReasonTLS), a connection reset or closed before the
// response headers (ReasonLost), a timeout awaiting them (ReasonTimeout).
// It tells by the error's types, never its text. The caller's own faults
// are not the backend's: req's context ending (cancelled, or its
// deadline), an error of the request body or a body whose length disagrees
// with its ContentLength (ErrRequestBody), and anything else net/http
// returns without reaching the backend (an invalid header or method, which
// it rejects before it connects, is a plain error of no such type).
func faultOf(req *http.Request, err error) Reason {
	// The context first: net/http's and net's own timeouts match
	// context.DeadlineExceeded with errors.Is, and are the backend's.
	if req.Context().Err() != nil || errors.Is(err, ErrRequestBody) {
		return ""
	}
	var (
		op  *net.OpError                      // dial, read or write on the connection: refused, unreachable, reset, a TLS alert from the backend
		rh  tls.RecordHeaderError             // the backend does not speak TLS
		cv  *tls.CertificateVerificationError // the backend's certificate is not trusted
		tmo interface{ Timeout() bool }       // the response-header or TLS handshake timeout
	)
	switch {
	case errors.As(err, &rh), errors.As(err, &cv):
		return ReasonTLS
	case errors.As(err, &op):
		switch {
		case op.Op == "dial" || op.Op == "proxyconnect":
			return ReasonConnect
		case op.Op == "remote error": // crypto/tls's for an alert the backend sent
			return ReasonTLS
		case op.Timeout():
			return ReasonTimeout
		}
		return ReasonLost
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ReasonLost // the connection closed before the response headers
	case errors.As(err, &tmo) && tmo.Timeout():
		return ReasonTimeout
	}
	return ""
}

// eject takes m out of service for reason, n failures in a row (the last
// one cause) having reached their threshold, unless m is ejected already
// or half of the configured backends are: a failure that hits every
// backend at once (the client's own network, say) must not empty the
// table. Active health checks, which see each backend on its own, may
// still take the rest out. Each consecutive ejection of m lasts longer
// (see ejectionTime). It runs on the failure path only, takes lifeMu for
// O(N), and asks the loop for the rebuild.
func (t *Transport) eject(m *member, reason Reason, n int32, cause error) {
	now := time.Now().UnixNano()
	l := &m.life
	// Counting and ejecting are one step under lifeMu: two requests
	// failing at once on different backends must not both see room for
	// one more. The membership is the published one, not the snapshot the
	// request routed by: a newer one may have readmitted others.
	t.lifeMu.Lock()
	p := l.phase.Load()
	if p.ejected != "" || l.removed.Load() {
		t.lifeMu.Unlock()
		return // another request ejected it meanwhile, or it is gone
	}
	all := t.cur.Load().ms.all
	out := 0
	for _, o := range all {
		if o.life.phase.Load().ejected != "" {
			out++
		}
	}
	if out+1 > len(all)/2 {
		t.lifeMu.Unlock()
		t.cfg.Logger.Warn("httpmaglev: backend not ejected: half the backends are out already", "backend", m.b.Name, "reason", reason, "err", cause)
		return
	}
	// The streak of consecutive ejections, less one for every
	// EjectionTime the backend has stayed in since its last readmission,
	// as Envoy's outlier detection decrements its multiplier.
	streak := p.streak
	if p.back != 0 {
		streak = max(0, streak-(now-p.back)/int64(t.cfg.EjectionTime))
	}
	streak++
	q := *p
	q.ejected, q.at, q.until, q.streak = reason, now, now+int64(t.ejectionTime(streak)), streak
	l.checks.ForgetPasses() // probes passed before the ejection do not end it
	l.phase.Store(&q)
	t.lifeMu.Unlock()

	t.metrics.ejections.Add(context.Background(), 1, m.mm.backendAdd...)
	t.cfg.Logger.Warn("httpmaglev: backend ejected", "backend", m.b.Name, "failures", n, "reason", reason,
		"ejections", streak, "for", time.Duration(q.until-q.at), "err", cause)
	select {
	case t.wake <- struct{}{}:
	default: // a rebuild is already due
	}
}

// ejectionTime returns how long the n-th consecutive ejection of a backend
// lasts at least: n·EjectionTime, at most MaxEjectionTime, with active
// checks off; with them on, (n-1)·EjectionTime (the first ejection ends
// with Rise passed probes alone), and Rise passed probes besides.
func (t *Transport) ejectionTime(n int64) time.Duration {
	if t.cfg.HealthPath != "" {
		n--
	}
	d := t.cfg.MaxEjectionTime
	if n < int64(d/t.cfg.EjectionTime) {
		d = time.Duration(n) * t.cfg.EjectionTime
	}
	return d
}

// A verdict is what one probe did to a backend, for the log and the
// metrics, which the caller writes once lifeMu is released.
type verdict struct {
	did           uint8 // any of downFirst, wentDown, cameUp, readmitted
	fails, passes int   // the backend's consecutive failed and passed probes after it
}

// What a probe did.
const (
	downFirst  = 1 << iota // its first check failed
	wentDown               // Fall checks in a row failed
	cameUp                 // Rise checks in a row passed after it went down
	readmitted             // Rise checks passed after its ejection time: the ejection ended
)

// observeLocked records the result of a probe of m at now and returns its
// verdict. Call it with lifeMu held. The backend's health is
// internal/health's machine: the first probe of a backend decides its
// health; later, Fall consecutive failures take it out and Rise
// consecutive passes put it back. Rise passes also end a passive ejection
// whose time is over.
func (t *Transport) observeLocked(m *member, err error, now int64) verdict {
	l := &m.life
	was := l.checks.State()
	state, changed := l.checks.Record(err == nil)
	p := l.phase.Load()
	q := *p
	q.down = state == health.Down
	v := verdict{fails: l.checks.Failed(), passes: l.checks.Passed()}
	switch {
	case changed && was == health.Unknown && state == health.Down:
		v.did |= downFirst
	case changed && state == health.Down:
		v.did |= wentDown
	case changed && was == health.Down:
		v.did |= cameUp
	}
	if p.ejected != "" && err == nil && l.checks.Passed() >= t.cfg.Rise && now >= p.until {
		readmit(&q, l, now)
		v.did |= readmitted
	}
	if q != *p {
		l.phase.Store(&q)
	}
	return v
}

// readmit ends the ejection in q, a copy of l's phase to be published, at
// now, and resets l's counts. Call it with lifeMu held.
func readmit(q *phase, l *life, now int64) {
	q.ejected, q.back = "", now
	l.faults.Store(0)
	l.fives.Store(0)
}

// readmitDue ends, with active checks off, the ejections of the members of
// all whose time is over at now, and returns those members. It takes
// lifeMu for O(N).
func (t *Transport) readmitDue(all []*member, now int64) []*member {
	var back []*member
	t.lifeMu.Lock()
	defer t.lifeMu.Unlock()
	for _, m := range all {
		if p := m.life.phase.Load(); p.ejected != "" && now >= p.until {
			q := *p
			readmit(&q, &m.life, now)
			m.life.phase.Store(&q)
			back = append(back, m)
		}
	}
	return back
}
