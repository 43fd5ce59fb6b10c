package maglev

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// vectorFile is the part of a file in testdata/vectors that the golden
// tests pin (docs/spec.md defines the files).
type vectorFile struct {
	Sets []struct {
		ID    string
		Names []struct{ Hex, Text string }
	}
	Tables []struct {
		ID          string
		Slots       []int
		SlotsSHA256 string `json:"slots_sha256"`
	}
}

// TestVectorsGolden checks that the test vectors for other languages
// (testdata/vectors, checked against the code by internal/vectors) hold
// every golden value of this package's tests: goldenSmall, goldenLarge and
// goldenSizes. The vectors pin at least what the golden tests pin, and
// regenerating them can never move a golden value unnoticed.
func TestVectorsGolden(t *testing.T) {
	for _, b := range builtins {
		data, err := os.ReadFile("testdata/vectors/" + b.name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var f vectorFile
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		tables := make(map[string]int)
		for i, tab := range f.Tables {
			tables[tab.ID] = i
		}
		sha := func(id string) string {
			t.Helper()
			i, ok := tables[id]
			if !ok {
				t.Errorf("%s: no table %s in the vectors", b.name, id)
				return ""
			}
			return f.Tables[i].SlotsSHA256
		}
		// goldenSmall: a..e at M = 13, as owner names.
		if i, ok := tables["a-e/M=13"]; !ok {
			t.Errorf("%s: no table a-e/M=13 in the vectors", b.name)
		} else {
			sorted := []string{"a", "b", "c", "d", "e"}
			var owners []string
			for _, o := range f.Tables[i].Slots {
				owners = append(owners, sorted[o])
			}
			if got := strings.Join(owners, " "); got != goldenSmall[b.name] {
				t.Errorf("%s: vectors' a-e/M=13 = %q, golden %q", b.name, got, goldenSmall[b.name])
			}
		}
		if got := sha("hosts-100/M=65537"); got != goldenLarge[b.name] {
			t.Errorf("%s: vectors' hosts-100/M=65537 SHA-256 %s, golden %s", b.name, got, goldenLarge[b.name])
		}
		// goldenSizes: the first min(M, 100) hosts, unweighted and with
		// goldenWeights, which is the vectors' mod5 rule.
		for id, key := range map[string]string{
			"hosts-7/M=7":                     goldenKey(b.name, 7, false),
			"hosts-7/M=7/weights=mod5":        goldenKey(b.name, 7, true),
			"hosts-100/M=65537":               goldenKey(b.name, DefaultSize, false),
			"hosts-100/M=65537/weights=mod5":  goldenKey(b.name, DefaultSize, true),
			"hosts-100/M=655373":              goldenKey(b.name, 655373, false),
			"hosts-100/M=655373/weights=mod5": goldenKey(b.name, 655373, true),
		} {
			if got := sha(id); got != goldenSizes[key] {
				t.Errorf("%s: vectors' %s SHA-256 %s, golden %s %s", b.name, id, got, key, goldenSizes[key])
			}
		}
		// The sets are the golden tests' backends, in their order.
		for _, s := range f.Sets {
			want := map[string][]string{"a-e": {"e", "c", "a", "d", "b"}, "hosts-7": largeBackends()[:7], "hosts-100": largeBackends()}[s.ID]
			if want == nil {
				continue
			}
			var got []string
			for _, n := range s.Names {
				got = append(got, n.Text)
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("%s: set %s is %q, want the golden tests' %q", b.name, s.ID, got, want)
			}
		}
	}
}
