package maglev

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// refDigest is Digest's definition written plainly: every byte in one
// buffer, hashed at once, the owners read through Owner by name.
func refDigest(t *Table) [sha256.Size]byte {
	b := []byte("maglev table digest v1\n")
	b = binary.BigEndian.AppendUint32(b, uint32(t.Size()))
	var live []string
	index := map[string]uint32{}
	ws := t.Weights()
	for i, name := range t.Backends() {
		if ws[i] > 0 {
			index[name] = uint32(len(live))
			live = append(live, name)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(live)))
	for _, name := range live {
		b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
		b = append(b, name...)
		b = binary.BigEndian.AppendUint32(b, ws[t.Index(name)])
	}
	for s := range t.Size() {
		v := uint32(0xFFFFFFFF)
		if o := t.LookupHash(uint64(s)); o != "" {
			v = index[o]
		}
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return sha256.Sum256(b)
}

func digestTables(t *testing.T) map[string]*Table {
	t.Helper()
	mk := func(bs []Backend, m int, h Hasher) *Table {
		tb, err := NewWeighted(bs, m, h)
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	plain := func(names []string, m int, h Hasher) *Table {
		tb, err := New(names, m, h)
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	long := strings.Repeat("x", 5000) // longer than Digest's buffer
	return map[string]*Table{
		"empty/M=7":                 plain(nil, 7, nil),
		"abc/M=7":                   plain([]string{"c", "a", "b"}, 7, nil),
		"abc/M=7/farm":              plain([]string{"a", "b", "c"}, 7, Farm()),
		"large100/M=65537":          plain(largeBackends(), DefaultSize, nil),
		"weighted20/M=65537":        mk(goldenWeights(20), DefaultSize, nil),
		"all-drained/M=7":           mk([]Backend{{Name: "a"}, {Name: "b"}}, 7, nil),
		"long-name/M=7":             plain([]string{long, "b"}, 7, nil),
		"large100/M=65537/xxh3seed": plain(largeBackends(), DefaultSize, XXH3Seed(7)),
	}
}

// goldenDigests pins Digest's values, as hex. They were computed by
// refDigest (the definition in Digest's doc, written plainly) when Digest
// was added (and "empty/M=7" again with Python's hashlib over the bytes
// the definition lists); an empty or all-drained table has one digest, and are checked on amd64, 386 and s390x by .ci/run. A change
// to any of them is a breaking change: fleets compare digests across
// releases.
var goldenDigests = map[string]string{
	"empty/M=7":                 "c08575ebab8927f55e508d261f70b670690d0b4247c4a2a29b76d4ebb4651186",
	"abc/M=7":                   "3730df436ceabec6292304ae13ad27f074b3771ad0e47b4ff926c51b92866989",
	"abc/M=7/farm":              "124ea3a7df8018d6ac54f02481923d46fa38bb834cc75c9b5f944f4ece7db216",
	"large100/M=65537":          "56ab2cf095c1bd2cfbdd9e5bd22b4e62fd39ba8c7ea3c727246aacfef81896af",
	"weighted20/M=65537":        "9f2725d4afb9fe71a1eec4c0149f8b18a707e9efb822fb8b9f4b0d60ff938770",
	"all-drained/M=7":           "c08575ebab8927f55e508d261f70b670690d0b4247c4a2a29b76d4ebb4651186",
	"long-name/M=7":             "7f00bd985c4adfcbc82684fa1abb7e88df44a7f6a032be008c940f92426269a4",
	"large100/M=65537/xxh3seed": "6c417547982ec6046ddc29e4b1ca3fa467a57ae778a601f85fba6ea9088e128d",
}

func TestDigestGolden(t *testing.T) {
	for name, tb := range digestTables(t) {
		got := tb.Digest()
		if ref := refDigest(tb); got != ref {
			t.Errorf("%s: Digest %x, the definition gives %x", name, got, ref)
		}
		if want := goldenDigests[name]; hex.EncodeToString(got[:]) != want {
			t.Errorf("%s: Digest %x, pinned %s", name, got, want)
		}
	}
}

// TestDigestDrained: adding a drained backend changes no slot, and so no
// digest; changing a weight, a name or M changes it.
func TestDigestDrained(t *testing.T) {
	base := goldenWeights(20)
	var live []Backend
	for _, b := range base {
		if b.Weight > 0 {
			live = append(live, b)
		}
	}
	a, err := NewWeighted(base, DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewWeighted(live, DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.NumBackends() == b.NumBackends() || a.Digest() != b.Digest() || a.Diff(b) != 0 {
		t.Errorf("with %d drained backends: Diff %d, digests %x and %x; want one digest", a.NumBackends()-b.NumBackends(), a.Diff(b), a.Digest(), b.Digest())
	}
	differ := map[string][]Backend{}
	w := append([]Backend{}, live...)
	w[0].Weight++
	differ["a weight"] = w
	r := append([]Backend{}, live...)
	r[0].Name += "x"
	differ["a name"] = r
	differ["one backend fewer"] = live[1:]
	for what, bs := range differ {
		c, err := NewWeighted(bs, DefaultSize, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Digest() == b.Digest() {
			t.Errorf("%s changed: same digest", what)
		}
	}
	c, err := NewWeighted(live, 65521, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest() == b.Digest() {
		t.Error("another M: same digest")
	}
}

func TestDigestAllocs(t *testing.T) {
	tb, err := New(largeBackends(), DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(10, func() { _ = tb.Digest() }); n > 6 {
		t.Errorf("Digest: %v allocations, want at most 6 (none per slot)", n)
	}
}

func ExampleTable_Digest() {
	a, _ := New([]string{"10.0.0.1:80", "10.0.0.2:80"}, 7, nil)
	b, _ := NewWeighted([]Backend{{Name: "10.0.0.2:80", Weight: 1}, {Name: "10.0.0.1:80", Weight: 1}, {Name: "10.0.0.3:80", Weight: 0}}, 7, nil)
	da, db := a.Digest(), b.Digest()
	fmt.Println("same digest:", da == db) // 10.0.0.3 is drained: it owns no slot
	fmt.Printf("%x\n", da[:8])
	// Output:
	// same digest: true
	// 9a17f6d423ac918f
}
