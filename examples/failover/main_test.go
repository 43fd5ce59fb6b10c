package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestRun: at N = 100 the rebuild moves more than the failed backend's
// keys and Without moves exactly those (the ideal, within sampling), and
// bad flags are errors.
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"-n", "100", "-keys", "100000"}, &out); err != nil {
		t.Fatal(err)
	}
	var rebuilt, without float64
	for _, line := range strings.Split(out.String(), "\n") {
		if s, ok := strings.CutPrefix(line, "rebuilt without it:"); ok {
			rebuilt = percent(t, s)
		}
		if s, ok := strings.CutPrefix(line, "Table.Without:"); ok {
			without = percent(t, s)
		}
	}
	// The ideal is 1%: 1,000 keys, give or take sampling (±0.1% at 3σ).
	if without < 0.85 || without > 1.15 || rebuilt < 1.3 {
		t.Errorf("moved %.2f%% by Without, %.2f%% by a rebuild; want about 1%% and well above:\n%s", without, rebuilt, out.String())
	}
	for _, bad := range [][]string{{"-n", "1"}, {"-keys", "0"}, {"-x"}} {
		if err := run(bad, &strings.Builder{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func percent(t *testing.T, s string) float64 {
	t.Helper()
	var v float64
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%f%%", &v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}
