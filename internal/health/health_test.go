package health

import (
	"strings"
	"testing"
)

// run records results ("+" passed, "-" failed) in m and returns the
// states after each, as "u" (up), "d" (down), "?" (unknown), with a "!"
// after each change.
func run(m *Machine, results string) string {
	var b strings.Builder
	for _, r := range results {
		s, changed := m.Record(r == '+')
		b.WriteByte(map[State]byte{Unknown: '?', Up: 'u', Down: 'd'}[s])
		if changed {
			b.WriteByte('!')
		}
	}
	return b.String()
}

// TestRules: the rule of the package doc, state by state, with rise 2
// and fall 3: an Unknown backend's first probe decides; Up needs three
// failures in a row to go down, Down two passes in a row to come up; a
// result of the other kind restarts the count.
func TestRules(t *testing.T) {
	for _, tc := range []struct {
		start   State
		results string
		want    string
	}{
		{Unknown, "+", "u!"},
		{Unknown, "-", "d!"},
		{Unknown, "-+", "d!d"},
		{Unknown, "-++", "d!du!"},
		{Unknown, "+--+---", "u!uuuuud!"},
		{Up, "--", "uu"},
		{Up, "---", "uud!"},
		{Up, "--+--+---+", "uuuuuuuud!d"},
		{Down, "+", "d"},
		{Down, "++", "du!"},
		{Down, "+-+-++", "dddddu!"},
		{Down, "-----", "ddddd"},
		{Up, "+++++", "uuuuu"},
	} {
		m := New(2, 3, tc.start)
		if m.State() != tc.start {
			t.Errorf("New(2, 3, %v).State() = %v", tc.start, m.State())
		}
		if got := run(&m, tc.results); got != tc.want {
			t.Errorf("from %v, %s: %s, want %s", tc.start, tc.results, got, tc.want)
		}
	}
}

// TestCounts: Passed and Failed are the probes in a row of each kind, one
// of them 0; ForgetPasses zeroes the passes and leaves the state.
func TestCounts(t *testing.T) {
	m := New(3, 2, Down)
	for i, r := range "++-+" {
		m.Record(r == '+')
		want := [][2]int{{1, 0}, {2, 0}, {0, 1}, {1, 0}}[i]
		if m.Passed() != want[0] || m.Failed() != want[1] {
			t.Errorf("after %d results: passed %d, failed %d; want %v", i+1, m.Passed(), m.Failed(), want)
		}
	}
	m.ForgetPasses()
	if m.Passed() != 0 || m.State() != Down {
		t.Errorf("ForgetPasses: passed %d, state %v", m.Passed(), m.State())
	}
	if got := run(&m, "+++"); got != "ddu!" {
		t.Errorf("three passes after ForgetPasses: %s, want ddu!", got)
	}
}

// TestZeroAndClamp: the zero Machine is Unknown with rise and fall 1, and
// New counts a rise or fall below 1 as 1.
func TestZeroAndClamp(t *testing.T) {
	var z Machine
	if z.State() != Unknown {
		t.Errorf("zero Machine: %v", z.State())
	}
	if got := run(&z, "+-+"); got != "u!d!u!" {
		t.Errorf("zero Machine: %s, want u!d!u!", got)
	}
	m := New(0, -1, Up)
	if got := run(&m, "-+"); got != "d!u!" {
		t.Errorf("New(0, -1, Up): %s, want d!u!", got)
	}
}

// TestState: the states' names, and which are in service.
func TestState(t *testing.T) {
	for s, want := range map[State]string{Unknown: "unknown", Up: "up", Down: "down", 7: "unknown"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s.String(), want)
		}
	}
	if !Unknown.InService() || !Up.InService() || Down.InService() {
		t.Error("InService: Unknown and Up are in service, Down is not")
	}
}

// TestRecordAllocs: Record does not allocate.
func TestRecordAllocs(t *testing.T) {
	m := New(2, 3, Unknown)
	if n := testing.AllocsPerRun(100, func() { m.Record(true); m.Record(false) }); n != 0 {
		t.Errorf("Record: %v allocations", n)
	}
}
