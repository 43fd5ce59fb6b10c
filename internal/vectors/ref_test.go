package vectors

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCReference checks the vector files against testdata/ref/maglev_ref.c,
// the independent C program built on the reference xxHash and FarmHash
// libraries: key hashes, every table's offsets, skips and slots (weighted
// too), every removal's slots (Without), every ring's points, and every
// key's candidates in every table and ring. It runs when MAGLEV_REF names a built
// maglev_ref (.ci/run builds it where a C compiler is present; see
// testdata/ref/README.md); a maglev_ref built without FarmHash skips the
// farm file.
func TestCReference(t *testing.T) {
	ref := os.Getenv("MAGLEV_REF")
	if ref == "" {
		t.Skip("MAGLEV_REF is not set: no C reference to check against (see testdata/ref/README.md)")
	}
	for _, h := range Hashers {
		t.Run(h.ID, func(t *testing.T) {
			if out, err := exec.Command(ref, "-hash", h.ID, "").CombinedOutput(); err != nil {
				if strings.Contains(string(out), "not built in") {
					t.Skipf("%s: %s", ref, bytes.TrimSpace(out))
				}
				t.Fatalf("%s -hash %s: %v: %s", ref, h.ID, err, out)
			}
			f, _ := load(t, h.ID)
			checkRef(t, ref, f)
		})
	}
}

// runRef runs the C reference with args and stdin, and returns its output.
func runRef(t *testing.T, ref, stdin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(ref, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("maglev_ref %s: %v: %s (input %.80q)", strings.Join(args, " "), err, stderr.Bytes(), stdin)
	}
	return out
}

func checkRef(t *testing.T, ref string, f *File) {
	id := f.Hasher.ID
	var in strings.Builder
	for _, k := range f.Keys {
		in.WriteString(k.Hex + "\n")
	}
	hashes := strings.Fields(string(runRef(t, ref, in.String(), "-hashes", id)))
	if len(hashes) != len(f.Keys) {
		t.Fatalf("-hashes gave %d hashes for %d keys", len(hashes), len(f.Keys))
	}
	for i, k := range f.Keys {
		if hashes[i] != k.Hash {
			t.Errorf("key %d: C hash %s, file %s", i, hashes[i], k.Hash)
		}
	}
	keys := filepath.Join(t.TempDir(), "keys.hex")
	if err := os.WriteFile(keys, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	sets := make(map[string]Set)
	for _, s := range f.Sets {
		sets[s.ID] = s
	}
	for _, tab := range f.Tables {
		checkRefTable(t, ref, id, tab, sets[tab.Set], hashes, keys)
	}
	for _, r := range f.Rings {
		checkRefRing(t, ref, id, r, sets[r.Set], keys)
	}
	if !t.Failed() {
		removals := 0
		for _, tab := range f.Tables {
			removals += len(tab.Removals)
		}
		t.Logf("%s: %d keys, %d tables, %d removals and %d rings agree with the C reference", id, len(f.Keys), len(f.Tables), removals, len(f.Rings))
	}
}

// checkRefTable builds tab with the C reference from its set, given in the
// set's order, and compares permutations, slots, lookups and candidates.
// keys names the file of the keys in hex, one a line.
func checkRefTable(t *testing.T, ref, id string, tab Table, set Set, hashes []string, keys string) {
	t.Helper()
	weight := make(map[int]uint32)
	for _, b := range tab.Backends {
		weight[b.Name] = b.Weight
	}
	var in strings.Builder
	for i, n := range set.Names {
		in.WriteString(n.Hex)
		if tab.Weighted {
			fmt.Fprintf(&in, " %d", weight[i])
		}
		in.WriteString("\n")
	}
	m := strconv.Itoa(tab.M)
	args := []string{"-hex", id, m}
	if tab.Weighted {
		args = []string{"-hex", "-weighted", id, m}
	}
	perms := strings.Split(strings.TrimSpace(string(runRef(t, ref, in.String(), append([]string{"-perms"}, args...)...))), "\n")
	if len(tab.Backends) == 0 {
		perms = nil
	}
	if len(perms) != len(tab.Backends) {
		t.Fatalf("%s: C gives %d backends, file %d", tab.ID, len(perms), len(tab.Backends))
	}
	for i, b := range tab.Backends {
		want := fmt.Sprintf("%s %d %d", set.Names[b.Name].Hex, b.Offset, b.Skip)
		if perms[i] != want {
			t.Errorf("%s: backend %d: C %q, file %q", tab.ID, i, perms[i], want)
		}
	}
	out := runRef(t, ref, in.String(), args...)
	if len(out) != 4*tab.M {
		t.Fatalf("%s: C table of %d bytes, want %d", tab.ID, len(out), 4*tab.M)
	}
	sum := sha256.Sum256(out)
	if got := hex.EncodeToString(sum[:]); got != tab.SlotsSHA256 {
		t.Errorf("%s: C slots SHA-256 %s, file %s", tab.ID, got, tab.SlotsSHA256)
	}
	owner := make([]int, tab.M)
	for s := range owner {
		owner[s] = int(int32(binary.LittleEndian.Uint32(out[4*s:])))
	}
	if tab.Slots != nil && !slices.Equal(owner, tab.Slots) {
		t.Errorf("%s: C slots %v, file %v", tab.ID, owner, tab.Slots)
	}
	if tab.FirstSlots != nil && !slices.Equal(owner[:len(tab.FirstSlots)], tab.FirstSlots) {
		t.Errorf("%s: C first slots %v, file %v", tab.ID, owner[:len(tab.FirstSlots)], tab.FirstSlots)
	}
	for _, l := range tab.Lookups {
		x, err := strconv.ParseUint(hashes[l.Key], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if s := int(x % uint64(tab.M)); l.Slot != s || l.Backend != owner[s] {
			t.Errorf("%s: key %d: C slot %d owner %d, file %d, %d", tab.ID, l.Key, s, owner[s], l.Slot, l.Backend)
		}
	}
	orders := refOrders(t, tab.ID, runRef(t, ref, in.String(), append([]string{"-candidates"}, append(args, keys)...)...), len(hashes))
	heads := make([][]int, len(tab.Lookups))
	for i, l := range tab.Lookups {
		heads[i] = l.Candidates
	}
	compareOrders(t, tab.ID, orders, heads, tab.CandidateOrders, tab.CandidatesSHA256)
	for _, r := range tab.Removals {
		checkRefRemoval(t, ref, tab, r, set, in.String(), args, owner)
	}
}

// checkRefRemoval builds tab without the backends of r with the C
// reference (-without, the removed backends named in hex) from the same
// input and arguments as tab, and compares its slots, counts and freed
// slots with the file's; base is the C reference's table of tab.
func checkRefRemoval(t *testing.T, ref string, tab Table, r Removal, set Set, in string, args []string, base []int) {
	t.Helper()
	var gone []string
	for _, i := range r.Removed {
		gone = append(gone, set.Names[tab.Backends[i].Name].Hex)
	}
	id := fmt.Sprintf("%s without %v", tab.ID, r.Removed)
	out := runRef(t, ref, in, append([]string{"-without", strings.Join(gone, ",")}, args...)...)
	if len(out) != 4*tab.M {
		t.Fatalf("%s: C table of %d bytes, want %d", id, len(out), 4*tab.M)
	}
	sum := sha256.Sum256(out)
	if got := hex.EncodeToString(sum[:]); got != r.SlotsSHA256 {
		t.Errorf("%s: C slots SHA-256 %s, file %s", id, got, r.SlotsSHA256)
	}
	owner := make([]int, tab.M)
	counts := make([]int, len(tab.Backends))
	freed := []Freed{}
	numFreed := 0
	for s := range owner {
		owner[s] = int(int32(binary.LittleEndian.Uint32(out[4*s:])))
		if owner[s] >= 0 {
			counts[owner[s]]++
		}
		if base[s] >= 0 && slices.Contains(r.Removed, base[s]) {
			numFreed++
			if len(freed) < headFreed {
				freed = append(freed, Freed{Slot: s, Backend: owner[s]})
			}
		}
	}
	if !slices.Equal(counts, r.Counts) {
		t.Errorf("%s: C counts %v, file %v", id, counts, r.Counts)
	}
	if r.Slots != nil && !slices.Equal(owner, r.Slots) {
		t.Errorf("%s: C slots %v, file %v", id, owner, r.Slots)
	}
	if r.FirstSlots != nil && !slices.Equal(owner[:len(r.FirstSlots)], r.FirstSlots) {
		t.Errorf("%s: C first slots %v, file %v", id, owner[:len(r.FirstSlots)], r.FirstSlots)
	}
	if numFreed != r.NumFreed || !slices.Equal(freed, r.Freed) {
		t.Errorf("%s: C frees %d slots, the first %v; file %d, %v", id, numFreed, freed, r.NumFreed, r.Freed)
	}
}

// refOrders parses the C reference's -candidates output: n lines, each a
// key's candidates separated by spaces.
func refOrders(t *testing.T, id string, out []byte, n int) [][]int {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%s: C gives candidates of %d keys, want %d", id, len(lines), n)
	}
	orders := make([][]int, n)
	for k, line := range lines {
		orders[k] = []int{}
		for _, f := range strings.Fields(line) {
			i, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s: C candidates of key %d: %q: %v", id, k, line, err)
			}
			orders[k] = append(orders[k], i)
		}
	}
	return orders
}

// compareOrders compares the C reference's orders, every candidate of every
// key, with a table's or ring's candidates: each lookup's first ones (heads),
// the explicit full orders and the SHA-256 of all of them.
func compareOrders(t *testing.T, id string, orders, heads [][]int, explicit []CandidateOrder, sum string) {
	t.Helper()
	if len(heads) != len(orders) {
		t.Errorf("%s: %d lookups, C gives the candidates of %d keys", id, len(heads), len(orders))
	}
	for k, h := range heads[:min(len(heads), len(orders))] {
		if want := orders[k][:min(headCandidates, len(orders[k]))]; !slices.Equal(h, want) {
			t.Errorf("%s: key %d: C's first candidates %v, file %v", id, k, want, h)
		}
	}
	for _, o := range explicit {
		if o.Key < 0 || o.Key >= len(orders) {
			t.Errorf("%s: full candidates of key %d, which is not a key", id, o.Key)
		} else if !slices.Equal(o.Candidates, orders[o.Key]) {
			t.Errorf("%s: full candidates of key %d: C %v, file %v", id, o.Key, orders[o.Key], o.Candidates)
		}
	}
	if got := OrdersSHA256(orders); got != sum {
		t.Errorf("%s: C candidates SHA-256 %s, file %s", id, got, sum)
	}
}

// checkRefRing builds r's points with the C reference and compares them, and
// the candidates of every key (keys, as in checkRefTable).
func checkRefRing(t *testing.T, ref, id string, r Ring, set Set, keys string) {
	t.Helper()
	var in strings.Builder
	for _, n := range set.Names {
		in.WriteString(n.Hex + "\n")
	}
	lines := strings.Split(strings.TrimSpace(string(runRef(t, ref, in.String(), "-ring", "-hex", id, strconv.Itoa(r.Vnodes)))), "\n")
	if r.NumPoints == 0 {
		lines = nil
	}
	if len(lines) != r.NumPoints {
		t.Fatalf("%s: C gives %d points, file %d", r.ID, len(lines), r.NumPoints)
	}
	var pts []Point
	buf := make([]byte, 0, 12*len(lines))
	for _, line := range lines {
		var p Point
		var pos uint64
		if _, err := fmt.Sscanf(line, "%x %d %d", &pos, &p.Backend, &p.J); err != nil {
			t.Fatalf("%s: C point %q: %v", r.ID, line, err)
		}
		p.Pos = Hex64(pos)
		pts = append(pts, p)
		buf = binary.LittleEndian.AppendUint64(buf, pos)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(p.Backend))
	}
	sum := sha256.Sum256(buf)
	if got := hex.EncodeToString(sum[:]); got != r.PointsSHA256 {
		t.Errorf("%s: C points SHA-256 %s, file %s", r.ID, got, r.PointsSHA256)
	}
	if r.Points != nil && !slices.Equal(pts, r.Points) {
		t.Errorf("%s: C points differ from the file's", r.ID)
	}
	if r.FirstPoints != nil && !slices.Equal(pts[:len(r.FirstPoints)], r.FirstPoints) {
		t.Errorf("%s: C first points differ from the file's", r.ID)
	}
	for _, l := range r.Lookups {
		if l.Point >= 0 && pts[l.Point].Backend != l.Backend {
			t.Errorf("%s: key %d: file's point %d is backend %d's in C, file says %d", r.ID, l.Key, l.Point, pts[l.Point].Backend, l.Backend)
		}
	}
	out := runRef(t, ref, in.String(), "-ring", "-candidates", "-hex", id, strconv.Itoa(r.Vnodes), keys)
	orders := refOrders(t, r.ID, out, len(r.Lookups))
	heads := make([][]int, len(r.Lookups))
	for i, l := range r.Lookups {
		heads[i] = l.Candidates
	}
	compareOrders(t, r.ID, orders, heads, r.CandidateOrders, r.CandidatesSHA256)
}
