package admin

import "testing"

// TestCount: the table's counts say "1 service", "2 services".
func TestCount(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 packets", 1: "1 packet", 2: "2 packets"} {
		if got := count(n, "packet"); got != want {
			t.Errorf("count(%d): %q, want %q", n, got, want)
		}
	}
}
