package bounded

import (
	"fmt"
	"testing"

	"github.com/maglevlb/maglev"
)

func mustNew(t testing.TB, backends []string, m int, h maglev.Hasher) *maglev.Table {
	t.Helper()
	tab, err := maglev.New(backends, m, h)
	if err != nil {
		t.Fatalf("New(%d backends, %d): %v", len(backends), m, err)
	}
	return tab
}

func mustWeighted(t testing.TB, bs []maglev.Backend, m int, h maglev.Hasher) *maglev.Table {
	t.Helper()
	tab, err := maglev.NewWeighted(bs, m, h)
	if err != nil {
		t.Fatalf("NewWeighted(%d backends, %d): %v", len(bs), m, err)
	}
	return tab
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// weighted returns backends named backend-0, backend-1, ... with the
// given weights.
func weighted(ws ...uint32) []maglev.Backend {
	out := make([]maglev.Backend, len(ws))
	for i, w := range ws {
		out[i] = maglev.Backend{Name: fmt.Sprintf("backend-%d", i), Weight: w}
	}
	return out
}

// goldenWeights returns n backends named 10.0.0.1:80, 10.0.0.2:80, ...
// with weights 0, 1, 2, 3, 4, 0, 1, ...
func goldenWeights(n int) []maglev.Backend {
	bs := make([]maglev.Backend, n)
	for i := range bs {
		bs[i] = maglev.Backend{Name: fmt.Sprintf("10.0.0.%d:80", i+1), Weight: uint32(i % 5)}
	}
	return bs
}
