// Package health is the rise and fall of a backend's health: the one
// state machine of the repository's active health checks, httpmaglev's
// (and so lbproxy's) and cmd/l4lb's. A checker records each probe's
// result in its backend's Machine and acts on the state it returns; how it
// probes, and what a state does to the backend (a table without it, a
// route withdrawn), are the checker's.
//
// The rule, the same everywhere:
//
//   - A backend never probed is Unknown: it is in service, and its first
//     probe decides. Passed, it is Up; failed, it is Down at once. A new
//     backend takes traffic as soon as it is configured (adding capacity,
//     or starting a load balancer, waits for no probe, and a load balancer
//     whose backends are all new does not see them all down), and a dead
//     one takes it for one probe interval at most, not Fall of them. This
//     is HAProxy's default for a server at start.
//   - Up, Fall failed probes in a row take it Down.
//   - Down, Rise passed probes in a row bring it Up.
//   - A backend whose health is known from before (a checker replaced by
//     a reload, a data plane adopted across a restart) starts in the state
//     it had: New's start.
//
// A Machine is a value of a few words with no lock: its owner guards it
// (httpmaglev with its lifeMu, l4lb's checker with its mu). Record is O(1)
// and does not allocate.
package health

// A State is a backend's health.
type State uint8

// The states of a backend.
const (
	Unknown State = iota // never probed: in service until its first probe, which decides
	Up                   // in service; Fall failed probes in a row take it down
	Down                 // out of service; Rise passed probes in a row bring it up
)

// String returns "unknown", "up" or "down".
func (s State) String() string {
	switch s {
	case Up:
		return "up"
	case Down:
		return "down"
	}
	return "unknown"
}

// InService reports whether a backend in state s takes traffic: it does
// unless it is Down.
func (s State) InService() bool { return s != Down }

// A Machine is one backend's health: its state and its probes passed and
// failed in a row (one of the two is 0). The zero Machine is Unknown, with
// a rise and fall of 1.
type Machine struct {
	rise, fall     int
	state          State
	passed, failed int
}

// New returns the Machine of a backend that starts in state start, which
// rise passed probes in a row bring up and fall failed ones take down. A
// rise or fall below 1 counts as 1: the caller's settings have their own
// checks and messages.
func New(rise, fall int, start State) Machine {
	return Machine{rise: max(rise, 1), fall: max(fall, 1), state: start}
}

// Record records a probe's result, passed or failed, and returns the
// state after it and whether it changed (from Unknown to Up is a change of
// state, not of service: see State.InService). It is O(1) and does not
// allocate.
func (m *Machine) Record(passed bool) (State, bool) {
	if passed {
		m.passed, m.failed = m.passed+1, 0
	} else {
		m.passed, m.failed = 0, m.failed+1
	}
	was := m.state
	switch {
	case m.state == Unknown && passed:
		m.state = Up
	case m.state == Unknown:
		m.state = Down
	case m.state == Up && m.failed >= max(m.fall, 1):
		m.state = Down
	case m.state == Down && m.passed >= max(m.rise, 1):
		m.state = Up
	}
	return m.state, m.state != was
}

// State returns the backend's state.
func (m *Machine) State() State { return m.state }

// Passed returns the probes passed in a row.
func (m *Machine) Passed() int { return m.passed }

// Failed returns the probes failed in a row.
func (m *Machine) Failed() int { return m.failed }

// ForgetPasses counts the probes passed in a row from 0 again, leaving the
// state, for a rule of the caller's that counts passes from a moment on:
// httpmaglev readmits a passively ejected backend after Rise passes since
// its ejection.
func (m *Machine) ForgetPasses() { m.passed = 0 }
