package maglev_test

import (
	"strings"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/internal/vectors"
)

// TestVectorsGolden checks that the test vectors for other languages
// (testdata/vectors, checked against the code by internal/vectors) hold
// every golden value of this package's tests: goldenSmall, goldenLarge and
// goldenSizes. The vectors pin at least what the golden tests pin, and
// regenerating them can never move a golden value unnoticed. It reads the
// files with vectors.ReadFile, so a damaged file fails here at once, with
// the field named.
func TestVectorsGolden(t *testing.T) {
	for _, name := range maglev.BuiltinNames() {
		f, err := vectors.ReadFile("testdata/vectors/" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		tables := make(map[string]int)
		for i, tab := range f.Tables {
			tables[tab.ID] = i
		}
		sha := func(id string) string {
			t.Helper()
			i, ok := tables[id]
			if !ok {
				t.Errorf("%s: no table %s in the vectors", name, id)
				return ""
			}
			return f.Tables[i].SlotsSHA256
		}
		// goldenSmall: a..e at M = 13, as owner names.
		if i, ok := tables["a-e/M=13"]; !ok {
			t.Errorf("%s: no table a-e/M=13 in the vectors", name)
		} else {
			sorted := []string{"a", "b", "c", "d", "e"}
			var owners []string
			for _, o := range f.Tables[i].Slots {
				if o < 0 {
					owners = append(owners, "-") // no owner
					continue
				}
				owners = append(owners, sorted[o])
			}
			if got := strings.Join(owners, " "); got != maglev.GoldenSmall[name] {
				t.Errorf("%s: vectors' a-e/M=13 = %q, golden %q", name, got, maglev.GoldenSmall[name])
			}
		}
		if got := sha("hosts-100/M=65537"); got != maglev.GoldenLarge[name] {
			t.Errorf("%s: vectors' hosts-100/M=65537 SHA-256 %s, golden %s", name, got, maglev.GoldenLarge[name])
		}
		// goldenSizes: the first min(M, 100) hosts, unweighted and with
		// goldenWeights, which is the vectors' mod5 rule.
		for id, key := range map[string]string{
			"hosts-7/M=7":                     maglev.GoldenKey(name, 7, false),
			"hosts-7/M=7/weights=mod5":        maglev.GoldenKey(name, 7, true),
			"hosts-100/M=65537":               maglev.GoldenKey(name, maglev.DefaultSize, false),
			"hosts-100/M=65537/weights=mod5":  maglev.GoldenKey(name, maglev.DefaultSize, true),
			"hosts-100/M=655373":              maglev.GoldenKey(name, 655373, false),
			"hosts-100/M=655373/weights=mod5": maglev.GoldenKey(name, 655373, true),
		} {
			if got := sha(id); got != maglev.GoldenSizes[key] {
				t.Errorf("%s: vectors' %s SHA-256 %s, golden %s %s", name, id, got, key, maglev.GoldenSizes[key])
			}
		}
		// The sets are the golden tests' backends, in their order.
		for _, s := range f.Sets {
			want := map[string][]string{"a-e": {"e", "c", "a", "d", "b"}, "hosts-7": maglev.LargeBackends()[:7], "hosts-100": maglev.LargeBackends()}[s.ID]
			if want == nil {
				continue
			}
			var got []string
			for _, n := range s.Names {
				got = append(got, n.Text)
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("%s: set %s is %q, want the golden tests' %q", name, s.ID, got, want)
			}
		}
	}
}
