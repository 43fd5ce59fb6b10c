package maglev_test

import (
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/internal/vectors"
)

// TestVectorsGolden checks that the test vectors for other languages
// (testdata/vectors, checked against the code by internal/vectors) hold
// every golden value of this package's tests: goldenSmall, goldenLarge and
// goldenSizes, and goldenWithout among the removals. The vectors pin at least what the golden tests pin, and
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
		// goldenWithout: a-e/M=13 without c, as owner names, and the
		// hosts-100 tables at M = 65537 without goldenWithoutRemoved.
		removal := func(id string, removed []string) *vectors.Removal {
			t.Helper()
			i, ok := tables[id]
			if !ok {
				t.Errorf("%s: no table %s in the vectors", name, id)
				return nil
			}
			tab := &f.Tables[i]
			var want []int
			for b, back := range tab.Backends {
				if slices.Contains(removed, f.Sets[setIndex(f, tab.Set)].Names[back.Name].Text) {
					want = append(want, b)
				}
			}
			for k := range tab.Removals {
				if slices.Equal(tab.Removals[k].Removed, want) {
					return &tab.Removals[k]
				}
			}
			t.Errorf("%s: %s has no removal of %q (backends %v)", name, id, removed, want)
			return nil
		}
		if r := removal("a-e/M=13", []string{"c"}); r != nil {
			sorted := []string{"a", "b", "c", "d", "e"}
			var owners []string
			for _, o := range r.Slots {
				owners = append(owners, sorted[o]) // no -1: a-e without c has owners
			}
			if got, want := strings.Join(owners, " "), maglev.GoldenWithout[name+"/a-e/M=13"]; got != want {
				t.Errorf("%s: vectors' a-e/M=13 without c = %q, golden %q", name, got, want)
			}
		}
		for _, id := range []string{"hosts-100/M=65537", "hosts-100/M=65537/weights=mod5"} {
			if r := removal(id, maglev.GoldenWithoutRemoved); r != nil && r.SlotsSHA256 != maglev.GoldenWithout[name+"/"+id] {
				t.Errorf("%s: vectors' %s without %q SHA-256 %s, golden %s", name, id, maglev.GoldenWithoutRemoved, r.SlotsSHA256, maglev.GoldenWithout[name+"/"+id])
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

// setIndex returns the index in f.Sets of the set called id, or -1.
func setIndex(f *vectors.File, id string) int {
	return slices.IndexFunc(f.Sets, func(s vectors.Set) bool { return s.ID == id })
}

// TestVectorsWithout checks every removal of the test vectors against
// Without, called other ways than the generator calls it: the base built
// from the set's names (and the table's weights), then the removed names
// given in the reverse order, and removed in steps (one call a name, or
// two calls for more than 4). Each must
// give the file's slots (or first slots), slot SHA-256, counts and freed
// slots. With -short, only the tables of M ≤ 13.
func TestVectorsWithout(t *testing.T) {
	if maglev.RaceEnabled {
		t.Skip("single-goroutine removals of every vector: skipped under the race detector (norace_test.go)")
	}
	for _, hname := range maglev.BuiltinNames() {
		f, err := vectors.ReadFile("testdata/vectors/" + hname + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var h maglev.Hasher
		for _, v := range vectors.Hashers {
			if v.ID == hname {
				h = v.H
			}
		}
		n := 0
		for _, tab := range f.Tables {
			if len(tab.Removals) == 0 || testing.Short() && tab.M > 13 {
				continue // the large tables take seconds under QEMU
			}
			set := f.Sets[setIndex(f, tab.Set)]
			names := make([]string, len(set.Names))
			for i, nm := range set.Names {
				b, err := hex.DecodeString(nm.Hex)
				if err != nil {
					t.Fatal(err)
				}
				names[i] = string(b)
			}
			var base *maglev.Table
			if tab.Weighted {
				bs := make([]maglev.Backend, len(tab.Backends))
				for i, b := range tab.Backends {
					bs[i] = maglev.Backend{Name: names[b.Name], Weight: b.Weight}
				}
				base, err = maglev.NewWeighted(bs, tab.M, h)
			} else {
				base, err = maglev.New(names, tab.M, h)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := vectors.SlotsSHA256(base.AppendSlots(nil)); got != tab.SlotsSHA256 {
				t.Fatalf("%s %s: base SHA-256 %s, file %s", hname, tab.ID, got, tab.SlotsSHA256)
			}
			for _, r := range tab.Removals {
				var gone []string
				for _, i := range slices.Backward(r.Removed) {
					gone = append(gone, names[tab.Backends[i].Name])
				}
				once, err := base.Without(gone...)
				if err != nil {
					t.Fatal(err)
				}
				// One call a name, or for more than 4 names two calls, half
				// the names each: each call costs about as much as the last.
				steps, chunk := base, 1
				if len(gone) > 4 {
					chunk = (len(gone) + 1) / 2
				}
				for part := range slices.Chunk(gone, chunk) {
					if steps, err = steps.Without(part...); err != nil {
						t.Fatal(err)
					}
				}
				for how, w := range map[string]*maglev.Table{"at once, reversed": once, "in steps": steps} {
					checkRemoval(t, hname+" "+tab.ID+" without "+strings.Join(gone, ",")+" "+how, base, w, r)
				}
				n++
			}
		}
		if n == 0 {
			t.Errorf("%s: no removals in the vectors", hname)
		}
	}
}

// checkRemoval checks w, base without some backends, against the file's
// removal r.
func checkRemoval(t *testing.T, what string, base, w *maglev.Table, r vectors.Removal) {
	t.Helper()
	slots := w.AppendSlots(nil)
	if got := vectors.SlotsSHA256(slots); got != r.SlotsSHA256 {
		t.Errorf("%s: SHA-256 %s, file %s", what, got, r.SlotsSHA256)
	}
	if got := w.Counts(); !slices.Equal(got, r.Counts) {
		t.Errorf("%s: counts %v, file %v", what, got, r.Counts)
	}
	ints := make([]int, len(slots))
	for s, o := range slots {
		ints[s] = int(int32(o))
	}
	if r.Slots != nil && !slices.Equal(ints, r.Slots) {
		t.Errorf("%s: slots %v, file %v", what, ints, r.Slots)
	}
	if r.FirstSlots != nil && !slices.Equal(ints[:len(r.FirstSlots)], r.FirstSlots) {
		t.Errorf("%s: first slots %v, file %v", what, ints[:len(r.FirstSlots)], r.FirstSlots)
	}
	for _, fr := range r.Freed {
		if got := ints[fr.Slot]; got != fr.Backend || !slices.Contains(r.Removed, base.LookupHashIndex(uint64(fr.Slot))) {
			t.Errorf("%s: freed slot %d: owner %d (base %d), file %d", what, fr.Slot, got, base.LookupHashIndex(uint64(fr.Slot)), fr.Backend)
		}
	}
}
