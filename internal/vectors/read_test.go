package vectors

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/ring"
)

// parseQuickly is Parse, failing the test if it takes more than 10 seconds
// (it takes milliseconds) instead of letting a loop run to go test's
// timeout.
func parseQuickly(t *testing.T, name string, data []byte) (*File, error) {
	t.Helper()
	type result struct {
		f   *File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := Parse(name, data)
		done <- result{f, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("Parse(%s) still running after 10s", name)
		return nil, nil
	}
}

// TestReadFile checks that every committed file reads without error.
func TestReadFile(t *testing.T) {
	for _, h := range Hashers {
		f, err := ReadFile(filepath.Join(dir, h.ID+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if f.Hasher.ID != h.ID || len(f.Tables) == 0 || len(f.Rings) == 0 {
			t.Errorf("%s.json: hasher %q, %d tables, %d rings", h.ID, f.Hasher.ID, len(f.Tables), len(f.Rings))
		}
	}
}

// smallFile is xxh3-seed.json cut down to a few tables and rings, which is
// still a valid file, as JSON: a small base for TestParseRejects' edits.
func smallFile(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "xxh3-seed.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse("xxh3-seed.json", data)
	if err != nil {
		t.Fatal(err)
	}
	f.Tables = slices.DeleteFunc(f.Tables, func(t Table) bool {
		return !slices.Contains([]string{"empty/M=7", "xyz/M=7", "xyz/M=7/weights=mod5", "a-e/M=13", "a-e/M=13/weights=mod5", "xyz/M=65537", "hosts-100/M=65537"}, t.ID)
	})
	f.Rings = slices.DeleteFunc(f.Rings, func(r Ring) bool {
		return !slices.Contains([]string{"empty/vnodes=3", "a-e/vnodes=3", "xyz/vnodes=256"}, r.ID)
	})
	if len(f.Tables) != 7 || len(f.Rings) != 3 {
		t.Fatalf("%d tables and %d rings kept, want 7 and 3", len(f.Tables), len(f.Rings))
	}
	small, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return small
}

func tableOf(f *File, id string) *Table {
	for i := range f.Tables {
		if f.Tables[i].ID == id {
			return &f.Tables[i]
		}
	}
	panic("no table " + id)
}

func ringOf(f *File, id string) *Ring {
	for i := range f.Rings {
		if f.Rings[i].ID == id {
			return &f.Rings[i]
		}
	}
	panic("no ring " + id)
}

// TestParseRejects damages a valid file in memory in each way Parse must
// catch, and checks that Parse returns at once an error that errors.Is
// matches with the right sentinels (also maglev's or ring's, where one
// applies) and that names the file and the field.
func TestParseRejects(t *testing.T) {
	full, err := os.ReadFile(filepath.Join(dir, "xxh3-seed.json"))
	if err != nil {
		t.Fatal(err)
	}
	small := smallFile(t)
	if _, err := parseQuickly(t, "small.json", small); err != nil {
		t.Fatalf("the cut-down file: %v", err)
	}
	const (
		xyz7    = "(xyz/M=7)"
		xyz7w   = "(xyz/M=7/weights=mod5)"
		ae13    = "(a-e/M=13)"
		ae13w   = "(a-e/M=13/weights=mod5)"
		xyz64k  = "(xyz/M=65537)"
		ae3     = "(a-e/vnodes=3)"
		xyz256  = "(xyz/vnodes=256)"
		empty3  = "(empty/vnodes=3)"
		emptyM7 = "(empty/M=7)"
		h64k    = "(hosts-100/M=65537)"
	)
	for _, c := range []struct {
		name string
		// Either raw edits the bytes of the whole committed file, or edit
		// the decoded small file.
		raw   func([]byte) []byte
		edit  func(*File)
		want  []error // every sentinel the error must wrap
		field string  // what the error must name
	}{
		// Issue 24: this one edit made go test run to its timeout.
		{name: "m 65537 to 65538", raw: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"m": 65537,`), []byte(`"m": 65538,`), 1)
		}, want: []error{ErrSize, maglev.ErrSize}, field: "tables[22] (xyz/M=65537).m: maglev: unsupported table size: 65538 is not a prime"},
		{name: "m a string", raw: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"m": 65537,`), []byte(`"m": "65537",`), 1)
		}, want: []error{ErrSyntax}, field: "tables.m"},
		{name: "negative offset", raw: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"offset":1,`), []byte(`"offset":-1,`), 1)
		}, want: []error{ErrSyntax}, field: "offset"},
		{name: "cut short", raw: func(b []byte) []byte { return b[:len(b)/2] }, want: []error{ErrSyntax}, field: "xxh3-seed.json: "},
		{name: "data after the object", raw: func(b []byte) []byte { return append(b, "{}\n"...) }, want: []error{ErrSyntax}, field: "data after"},

		{name: "format", edit: func(f *File) { f.Format = "maglev-test-vectors/2" }, want: []error{ErrSyntax}, field: "format"},
		{name: "no hasher id", edit: func(f *File) { f.Hasher.ID = "" }, want: []error{ErrName}, field: "hasher.id"},
		{name: "seed not hex", edit: func(f *File) { f.Hasher.Seed = "9E3779B97F4A7C15" }, want: []error{ErrSyntax}, field: "hasher.seed"},
		{name: "set ID repeated", edit: func(f *File) { f.Sets[2].ID = f.Sets[1].ID }, want: []error{ErrName}, field: "sets[2].id"},
		{name: "empty name", edit: func(f *File) { f.Sets[1].Names[1].Hex = "" }, want: []error{ErrName, maglev.ErrEmptyName}, field: "sets[1] (xyz).names[1].hex"},
		{name: "name repeated", edit: func(f *File) { f.Sets[1].Names[2] = f.Sets[1].Names[0] }, want: []error{ErrName, maglev.ErrDuplicateName}, field: "sets[1] (xyz).names[2].hex"},
		{name: "name odd hex", edit: func(f *File) { f.Sets[1].Names[0].Hex = "787" }, want: []error{ErrSyntax}, field: "sets[1] (xyz).names[0].hex"},
		{name: "offset_hash short", edit: func(f *File) { f.Sets[1].Names[0].OffsetHash = "0123" }, want: []error{ErrSyntax}, field: "names[0].offset_hash"},
		{name: "skip_hash not hex", edit: func(f *File) { f.Sets[1].Names[0].SkipHash = "0123456789abcdeg" }, want: []error{ErrSyntax}, field: "names[0].skip_hash"},
		{name: "key not hex", edit: func(f *File) { f.Keys[5].Hex = "zz" }, want: []error{ErrSyntax}, field: "keys[5].hex"},
		{name: "key hash upper case", edit: func(f *File) { f.Keys[5].Hash = strings.ToUpper(f.Keys[5].Hash) }, want: []error{ErrSyntax}, field: "keys[5].hash"},

		{name: "table set unknown", edit: func(f *File) { tableOf(f, "xyz/M=7").Set = "xy" }, want: []error{ErrName}, field: xyz7 + ".set"},
		{name: "table ID repeated", edit: func(f *File) { f.Tables[2].ID = f.Tables[1].ID }, want: []error{ErrName}, field: "tables[2] (xyz/M=7).id"},
		{name: "table ID empty", edit: func(f *File) { f.Tables[1].ID = "" }, want: []error{ErrName}, field: "tables[1] ().id"},
		{name: "m composite", edit: func(f *File) { tableOf(f, "a-e/M=13").M = 15 }, want: []error{ErrSize, maglev.ErrSize}, field: ae13 + ".m"},
		{name: "m 1", edit: func(f *File) { tableOf(f, "xyz/M=7").M = 1 }, want: []error{ErrSize, maglev.ErrSize}, field: xyz7 + ".m"},
		{name: "m negative", edit: func(f *File) { tableOf(f, "xyz/M=7").M = -7 }, want: []error{ErrSize, maglev.ErrSize}, field: xyz7 + ".m"},
		{name: "m above MaxSize", edit: func(f *File) { tableOf(f, "xyz/M=65537").M = maglev.MaxSize + 2 }, want: []error{ErrSize, maglev.ErrSize}, field: xyz64k + ".m"},
		{name: "m below the names", edit: func(f *File) { tableOf(f, "a-e/M=13").M = 3 }, want: []error{ErrSize, maglev.ErrTooManyBackends}, field: ae13 + ".m"},
		{name: "m prime but not the ID's", edit: func(f *File) { tableOf(f, "xyz/M=65537").M = 65539 }, want: []error{ErrMismatch}, field: xyz64k + ".id"},
		{name: "weighted without a rule", edit: func(f *File) { tableOf(f, "xyz/M=7/weights=mod5").Weights = "" }, want: []error{ErrMismatch}, field: xyz7w + ".weights"},
		{name: "weight rule unknown", edit: func(f *File) {
			tab := tableOf(f, "xyz/M=7/weights=mod5")
			tab.Weights, tab.ID = "mod7", "xyz/M=7/weights=mod7"
		}, want: []error{ErrName}, field: "(xyz/M=7/weights=mod7).weights"},
		{name: "a backend missing", edit: func(f *File) { tab := tableOf(f, "a-e/M=13"); tab.Backends = tab.Backends[:4] }, want: []error{ErrMismatch}, field: ae13 + ".backends: 4 backends, set a-e has 5 names"},
		{name: "backend name out of range", edit: func(f *File) { tableOf(f, "xyz/M=7").Backends[1].Name = 3 }, want: []error{ErrRange}, field: xyz7 + ".backends[1].name"},
		{name: "backend name repeated", edit: func(f *File) { tableOf(f, "xyz/M=7").Backends[2].Name = 0 }, want: []error{ErrMismatch}, field: xyz7 + ".backends[2].name"},
		{name: "weight in an unweighted table", edit: func(f *File) { tableOf(f, "xyz/M=7").Backends[0].Weight = 2 }, want: []error{ErrMismatch}, field: xyz7 + ".backends[0].weight"},
		{name: "offset m", edit: func(f *File) { tableOf(f, "xyz/M=7").Backends[1].Offset = 7 }, want: []error{ErrRange}, field: xyz7 + ".backends[1].offset"},
		{name: "skip 0", edit: func(f *File) { tableOf(f, "xyz/M=7").Backends[1].Skip = 0 }, want: []error{ErrRange}, field: xyz7 + ".backends[1].skip"},
		{name: "skip m", edit: func(f *File) { tableOf(f, "xyz/M=65537").Backends[2].Skip = 65537 }, want: []error{ErrRange}, field: xyz64k + ".backends[2].skip"},
		{name: "count negative", edit: func(f *File) { tableOf(f, "xyz/M=7").Backends[0].Count = -1 }, want: []error{ErrRange}, field: xyz7 + ".backends[0].count"},
		{name: "count above m", edit: func(f *File) { tableOf(f, "xyz/M=7").Backends[0].Count = 8 }, want: []error{ErrRange}, field: xyz7 + ".backends[0].count"},
		{name: "drained backend with slots", edit: func(f *File) {
			tab := tableOf(f, "a-e/M=13/weights=mod5")
			tab.Backends[4].Count, tab.Backends[0].Count = 1, tab.Backends[0].Count-1
		}, want: []error{ErrMismatch}, field: ae13w + ".backends[4].count"},
		{name: "counts not adding up to m", edit: func(f *File) { tableOf(f, "xyz/M=65537").Backends[0].Count++ }, want: []error{ErrMismatch}, field: xyz64k + ".backends: counts add up to 65538, want 65537"},
		{name: "counts not adding up to m, weighted", edit: func(f *File) { tableOf(f, "xyz/M=7/weights=mod5").Backends[2].Count-- }, want: []error{ErrMismatch}, field: xyz7w + ".backends: counts add up to 6, want 7"},
		{name: "counts disagreeing with slots", edit: func(f *File) {
			tab := tableOf(f, "xyz/M=7")
			tab.Backends[0].Count--
			tab.Backends[1].Count++
		}, want: []error{ErrMismatch}, field: xyz7 + ".backends[0].count: 2, slots give it 3"},
		{name: "slots short", edit: func(f *File) { tab := tableOf(f, "a-e/M=13"); tab.Slots = tab.Slots[:12] }, want: []error{ErrMismatch}, field: ae13 + ".slots: 12 entries, want 13"},
		{name: "slot owner out of range", edit: func(f *File) { tableOf(f, "a-e/M=13").Slots[3] = 5 }, want: []error{ErrRange}, field: ae13 + ".slots[3]"},
		{name: "slot owner below -1", edit: func(f *File) { tableOf(f, "empty/M=7").Slots[0] = -2 }, want: []error{ErrRange}, field: emptyM7 + ".slots[0]"},
		{name: "slots for a large m", edit: func(f *File) { tab := tableOf(f, "xyz/M=65537"); tab.Slots = tab.FirstSlots }, want: []error{ErrMismatch}, field: xyz64k + ".slots"},
		{name: "first_slots for a small m", edit: func(f *File) { tab := tableOf(f, "xyz/M=7"); tab.FirstSlots = tab.Slots }, want: []error{ErrMismatch}, field: xyz7 + ".first_slots"},
		{name: "first_slots short", edit: func(f *File) { tab := tableOf(f, "xyz/M=65537"); tab.FirstSlots = tab.FirstSlots[1:] }, want: []error{ErrMismatch}, field: xyz64k + ".first_slots: 31 entries"},
		{name: "first_slots owner out of range", edit: func(f *File) { tableOf(f, "xyz/M=65537").FirstSlots[31] = 3 }, want: []error{ErrRange}, field: xyz64k + ".first_slots[31]"},
		{name: "slots_sha256 short", edit: func(f *File) { tableOf(f, "xyz/M=7").SlotsSHA256 = "00" }, want: []error{ErrSyntax}, field: xyz7 + ".slots_sha256"},
		{name: "a lookup missing", edit: func(f *File) { tab := tableOf(f, "xyz/M=7"); tab.Lookups = tab.Lookups[:99] }, want: []error{ErrMismatch}, field: xyz7 + ".lookups: 99 lookups, 100 keys"},
		{name: "lookup key", edit: func(f *File) { tableOf(f, "xyz/M=7").Lookups[5].Key = 6 }, want: []error{ErrMismatch}, field: xyz7 + ".lookups[5].key"},
		{name: "lookup slot m", edit: func(f *File) { tableOf(f, "xyz/M=65537").Lookups[5].Slot = 65537 }, want: []error{ErrRange}, field: xyz64k + ".lookups[5].slot"},
		{name: "lookup backend out of range", edit: func(f *File) { tableOf(f, "xyz/M=7").Lookups[5].Backend = 3 }, want: []error{ErrRange}, field: xyz7 + ".lookups[5].backend"},
		{name: "lookup backend not the slot's", edit: func(f *File) {
			l := &tableOf(f, "xyz/M=7").Lookups[0] // slot 6, backend 0
			l.Backend = 1
		}, want: []error{ErrMismatch}, field: xyz7 + ".lookups[0].backend: 1, but slots[6] is 0"},
		{name: "too many candidates", edit: func(f *File) {
			l := &tableOf(f, "xyz/M=7").Lookups[0]
			l.Candidates = append(l.Candidates, 0, 1, 2, 0, 1, 2)
		}, want: []error{ErrMismatch}, field: xyz7 + ".lookups[0].candidates: 9 candidates"},
		{name: "candidate out of range", edit: func(f *File) { tableOf(f, "xyz/M=7").Lookups[0].Candidates[1] = 3 }, want: []error{ErrRange}, field: xyz7 + ".lookups[0].candidates[1]"},
		{name: "candidate repeated", edit: func(f *File) { tableOf(f, "xyz/M=7").Lookups[0].Candidates[2] = 0 }, want: []error{ErrMismatch}, field: xyz7 + ".lookups[0].candidates[2]"},
		{name: "candidates not starting with the owner", edit: func(f *File) {
			l := &tableOf(f, "xyz/M=7").Lookups[0]
			l.Candidates[0], l.Candidates[1] = l.Candidates[1], l.Candidates[0]
		}, want: []error{ErrMismatch}, field: xyz7 + ".lookups[0].candidates"},
		{name: "candidates in an empty table", edit: func(f *File) { tableOf(f, "empty/M=7").Lookups[3].Candidates = []int{0} }, want: []error{ErrMismatch}, field: emptyM7 + ".lookups[3].candidates"},
		{name: "a candidate order missing", edit: func(f *File) { tab := tableOf(f, "xyz/M=7"); tab.CandidateOrders = tab.CandidateOrders[:3] }, want: []error{ErrMismatch}, field: xyz7 + ".candidate_orders: 3 orders, want 4"},
		{name: "candidate order key", edit: func(f *File) { tableOf(f, "xyz/M=7").CandidateOrders[2].Key = 1 }, want: []error{ErrMismatch}, field: xyz7 + ".candidate_orders[2].key"},
		{name: "candidate order out of range", edit: func(f *File) { tableOf(f, "a-e/M=13").CandidateOrders[1].Candidates[4] = 7 }, want: []error{ErrRange}, field: ae13 + ".candidate_orders[1].candidates[4]"},
		{name: "candidate order not the lookup's", edit: func(f *File) {
			o := tableOf(f, "a-e/M=13").CandidateOrders[1].Candidates
			o[1], o[2] = o[2], o[1]
		}, want: []error{ErrMismatch}, field: ae13 + ".candidate_orders[1].candidates: start"},
		{name: "candidates_sha256 upper case", edit: func(f *File) {
			tab := tableOf(f, "xyz/M=7")
			tab.CandidatesSHA256 = strings.ToUpper(tab.CandidatesSHA256)
		}, want: []error{ErrSyntax}, field: xyz7 + ".candidates_sha256"},

		{name: "nothing removed", edit: func(f *File) { tableOf(f, "xyz/M=7").Removals[0].Removed = []int{} }, want: []error{ErrMismatch}, field: xyz7 + ".removals[0].removed: empty"},
		{name: "removed out of range", edit: func(f *File) { tableOf(f, "xyz/M=7").Removals[0].Removed = []int{3} }, want: []error{ErrRange}, field: xyz7 + ".removals[0].removed[0]"},
		{name: "removed not in order", edit: func(f *File) {
			r := tableOf(f, "a-e/M=13").Removals[1].Removed
			r[0], r[1] = r[1], r[0]
		}, want: []error{ErrMismatch}, field: ae13 + ".removals[1].removed[1]"},
		{name: "removal counts short", edit: func(f *File) { r := &tableOf(f, "xyz/M=7").Removals[0]; r.Counts = r.Counts[:2] }, want: []error{ErrMismatch}, field: xyz7 + ".removals[0].counts: 2 counts, 3 backends"},
		{name: "removal count above m", edit: func(f *File) { tableOf(f, "xyz/M=7").Removals[0].Counts[0] = 8 }, want: []error{ErrRange}, field: xyz7 + ".removals[0].counts[0]"},
		{name: "slots left to a removed backend", edit: func(f *File) {
			r := &tableOf(f, "xyz/M=7").Removals[0] // y removed
			r.Counts[1]++
			r.Counts[0]--
		}, want: []error{ErrMismatch}, field: xyz7 + ".removals[0].counts[1]: 1 slots for a removed backend"},
		{name: "slots given to a drained backend", edit: func(f *File) {
			r := &tableOf(f, "a-e/M=13/weights=mod5").Removals
			*r = append(*r, Removal{Removed: []int{0}, Counts: []int{0, 0, 0, 0, 13}})
		}, want: []error{ErrMismatch}, field: ae13w + ".removals[0].counts[4]: 13 slots with weight 0"},
		{name: "removal counts not adding up", edit: func(f *File) { tableOf(f, "xyz/M=7").Removals[0].Counts[0]++ }, want: []error{ErrMismatch}, field: xyz7 + ".removals[0].counts: add up to 8, want 7"},
		{name: "removal first_slots for a small m", edit: func(f *File) { r := &tableOf(f, "xyz/M=7").Removals[0]; r.FirstSlots = r.Slots }, want: []error{ErrMismatch}, field: xyz7 + ".removals[0].first_slots"},
		{name: "removal slots for a large m", edit: func(f *File) { r := &tableOf(f, "hosts-100/M=65537").Removals[0]; r.Slots = r.FirstSlots }, want: []error{ErrMismatch}, field: h64k + ".removals[0].slots"},
		{name: "removal first_slots short", edit: func(f *File) { r := &tableOf(f, "hosts-100/M=65537").Removals[2]; r.FirstSlots = r.FirstSlots[:31] }, want: []error{ErrMismatch}, field: h64k + ".removals[2].first_slots: 31 entries, want 32"},
		{name: "removal slot owner out of range", edit: func(f *File) { tableOf(f, "hosts-100/M=65537").Removals[1].FirstSlots[4] = 100 }, want: []error{ErrRange}, field: h64k + ".removals[1].first_slots[4]"},
		{name: "freed slot left to its removed backend", edit: func(f *File) {
			r := &tableOf(f, "xyz/M=7").Removals[0]
			r.Slots[r.Freed[0].Slot] = r.Removed[0]
		}, want: []error{ErrMismatch}, field: "a removed backend"},
		{name: "slot moved that was not freed", edit: func(f *File) {
			tab := tableOf(f, "a-e/M=13")
			r := &tab.Removals[0]
			for s, o := range tab.Slots {
				if o != r.Removed[0] {
					r.Slots[s] = (o + 1) % 5
					if r.Slots[s] == r.Removed[0] {
						r.Slots[s] = (o + 2) % 5
					}
					break
				}
			}
		}, want: []error{ErrMismatch}, field: "which was not removed"},
		{name: "removal counts disagreeing with slots", edit: func(f *File) {
			c := tableOf(f, "a-e/M=13").Removals[0].Counts // c removed: backend 2
			c[0]--
			c[1]++
		}, want: []error{ErrMismatch}, field: ae13 + ".removals[0].counts: "},
		{name: "removal slots_sha256 short", edit: func(f *File) { tableOf(f, "xyz/M=7").Removals[0].SlotsSHA256 = "ab" }, want: []error{ErrSyntax}, field: xyz7 + ".removals[0].slots_sha256"},
		{name: "num_freed", edit: func(f *File) { tableOf(f, "hosts-100/M=65537").Removals[0].NumFreed++ }, want: []error{ErrMismatch}, field: h64k + ".removals[0].num_freed"},
		{name: "a freed slot missing", edit: func(f *File) { r := &tableOf(f, "hosts-100/M=65537").Removals[1]; r.Freed = r.Freed[:7] }, want: []error{ErrMismatch}, field: h64k + ".removals[1].freed: 7 entries, want 8"},
		{name: "freed slot m", edit: func(f *File) { tableOf(f, "hosts-100/M=65537").Removals[1].Freed[7].Slot = 65537 }, want: []error{ErrRange}, field: h64k + ".removals[1].freed[7].slot"},
		{name: "freed slots out of order", edit: func(f *File) {
			fr := tableOf(f, "hosts-100/M=65537").Removals[1].Freed
			fr[2], fr[3] = fr[3], fr[2]
		}, want: []error{ErrMismatch}, field: h64k + ".removals[1].freed[3].slot"},
		{name: "freed slot not a removed backend's", edit: func(f *File) {
			tab := tableOf(f, "hosts-100/M=65537")
			r := &tab.Removals[0] // one removed, whose first slot is past 32
			for s, o := range tab.FirstSlots {
				if o != r.Removed[0] && s < r.Freed[1].Slot {
					r.Freed[0].Slot = s
					break
				}
			}
		}, want: []error{ErrMismatch}, field: h64k + ".removals[0].freed[0].slot"},
		{name: "freed slot given to no backend", edit: func(f *File) { tableOf(f, "hosts-100/M=65537").Removals[0].Freed[0].Backend = -1 }, want: []error{ErrMismatch}, field: h64k + ".removals[0].freed[0].backend"},
		{name: "freed slot given to a removed backend", edit: func(f *File) {
			r := &tableOf(f, "hosts-100/M=65537").Removals[0]
			r.Freed[0].Backend = r.Removed[0]
		}, want: []error{ErrMismatch}, field: h64k + ".removals[0].freed[0].backend"},
		{name: "freed slot disagreeing with slots", edit: func(f *File) {
			r := &tableOf(f, "a-e/M=13").Removals[0]
			fr := &r.Freed[0]
			for i := range 5 {
				if i != fr.Backend && !slices.Contains(r.Removed, i) {
					fr.Backend = i
					break
				}
			}
		}, want: []error{ErrMismatch}, field: ae13 + ".removals[0].freed[0].backend"},

		{name: "ring set unknown", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Set = "a-f" }, want: []error{ErrName}, field: ae3 + ".set"},
		{name: "ring ID repeats a table's", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").ID = "a-e/M=13" }, want: []error{ErrName}, field: "rings[1] (a-e/M=13).id"},
		{name: "vnodes 0", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Vnodes = 0 }, want: []error{ErrRange, ring.ErrVnodes}, field: ae3 + ".vnodes"},
		{name: "too many points", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Vnodes = ring.MaxPoints }, want: []error{ErrRange, ring.ErrTooManyPoints}, field: ae3 + ".vnodes"},
		{name: "vnodes not the ID's", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Vnodes = 2 }, want: []error{ErrMismatch}, field: ae3 + ".id"},
		{name: "order short", edit: func(f *File) { r := ringOf(f, "a-e/vnodes=3"); r.Order = r.Order[1:] }, want: []error{ErrMismatch}, field: ae3 + ".order"},
		{name: "order out of range", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Order[0] = 5 }, want: []error{ErrRange}, field: ae3 + ".order[0]"},
		{name: "order repeated", edit: func(f *File) { r := ringOf(f, "a-e/vnodes=3"); r.Order[1] = r.Order[0] }, want: []error{ErrMismatch}, field: ae3 + ".order[1]"},
		{name: "num_points", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").NumPoints = 16 }, want: []error{ErrMismatch}, field: ae3 + ".num_points: 16, want 15"},
		{name: "a point missing", edit: func(f *File) { r := ringOf(f, "a-e/vnodes=3"); r.Points = r.Points[:14] }, want: []error{ErrMismatch}, field: ae3 + ".points: 14 points, want 15"},
		{name: "first_points for 3 vnodes", edit: func(f *File) { r := ringOf(f, "a-e/vnodes=3"); r.FirstPoints = r.Points }, want: []error{ErrMismatch}, field: ae3 + ".first_points"},
		{name: "points for 256 vnodes", edit: func(f *File) { r := ringOf(f, "xyz/vnodes=256"); r.Points = r.FirstPoints }, want: []error{ErrMismatch}, field: xyz256 + ".points"},
		{name: "first_points short", edit: func(f *File) { r := ringOf(f, "xyz/vnodes=256"); r.FirstPoints = r.FirstPoints[:15] }, want: []error{ErrMismatch}, field: xyz256 + ".first_points: 15 points, want 16"},
		{name: "point pos short", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Points[2].Pos = "3c4f" }, want: []error{ErrSyntax}, field: ae3 + ".points[2].pos"},
		{name: "points out of order", edit: func(f *File) {
			p := ringOf(f, "a-e/vnodes=3").Points
			p[1], p[2] = p[2], p[1]
		}, want: []error{ErrMismatch}, field: ae3 + ".points[2].pos"},
		{name: "point backend out of range", edit: func(f *File) { ringOf(f, "xyz/vnodes=256").FirstPoints[3].Backend = 3 }, want: []error{ErrRange}, field: xyz256 + ".first_points[3].backend"},
		{name: "point j vnodes", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Points[0].J = 3 }, want: []error{ErrRange}, field: ae3 + ".points[0].j"},
		{name: "points_sha256 long", edit: func(f *File) { r := ringOf(f, "a-e/vnodes=3"); r.PointsSHA256 += "00" }, want: []error{ErrSyntax}, field: ae3 + ".points_sha256"},
		{name: "ring lookups extra", edit: func(f *File) { r := ringOf(f, "a-e/vnodes=3"); r.Lookups = append(r.Lookups, r.Lookups[0]) }, want: []error{ErrMismatch}, field: ae3 + ".lookups: 101 lookups"},
		{name: "ring lookup point out of range", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Lookups[0].Point = 15 }, want: []error{ErrRange}, field: ae3 + ".lookups[0].point"},
		{name: "ring lookup on an empty ring", edit: func(f *File) {
			l := &ringOf(f, "empty/vnodes=3").Lookups[7]
			l.Point, l.Backend = 0, 0
		}, want: []error{ErrRange}, field: empty3 + ".lookups[7].point"},
		{name: "ring lookup missing its point", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Lookups[0].Point = -1 }, want: []error{ErrMismatch}, field: ae3 + ".lookups[0].point"},
		{name: "ring lookup backend not the point's", edit: func(f *File) {
			l := &ringOf(f, "a-e/vnodes=3").Lookups[0] // point 6, backend 3
			l.Backend = (l.Backend + 1) % 5
		}, want: []error{ErrMismatch}, field: ae3 + ".lookups[0].backend"},
		{name: "ring candidates repeated", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").Lookups[1].Candidates[4] = 0 }, want: []error{ErrMismatch}, field: ae3 + ".lookups[1].candidates[4]"},
		{name: "ring candidate order key", edit: func(f *File) { ringOf(f, "a-e/vnodes=3").CandidateOrders[0].Key = 4 }, want: []error{ErrMismatch}, field: ae3 + ".candidate_orders[0].key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "small.json"
			var data []byte
			if c.raw != nil {
				name, data = "xxh3-seed.json", c.raw(slices.Clone(full))
			} else {
				var f File
				if err := json.Unmarshal(small, &f); err != nil {
					t.Fatal(err)
				}
				c.edit(&f)
				var err error
				if data, err = json.Marshal(&f); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			f, err := parseQuickly(t, name, data)
			if err == nil {
				t.Fatalf("Parse accepted the file (%d tables)", len(f.Tables))
			}
			if f != nil {
				t.Errorf("Parse returned a File with its error")
			}
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Errorf("error %q is not %q", err, w)
				}
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "vectors: ") || !strings.Contains(msg, name+": ") || !strings.Contains(msg, c.field) {
				t.Errorf("error %q: want the prefix \"vectors: \", the file %s and %q", msg, name, c.field)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Parse took %v", d)
			}
		})
	}
}
