package vectors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSpecExample checks the candidate walk-through of the spec's worked
// example (docs/spec-example.md): each row of its probe table recomputed
// from the key's hash, and each lookup it quotes in full present in
// xxh3.json.
func TestSpecExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/spec-example.md")
	if err != nil {
		t.Fatal(err)
	}
	const h, m = 0x759b159230239d9f, 7 // key 1 of xxh3.json, xyz/M=7
	row := regexp.MustCompile("(?m)^\\| (\\d+) \\| `([0-9a-f]{16})` \\| `([0-9a-f]{16})` = (\\d+) \\| (\\d+) \\|")
	rows := row.FindAllSubmatch(doc, -1)
	if len(rows) != 6 {
		t.Errorf("%d probe rows in the worked example, want 6", len(rows))
	}
	for _, r := range rows {
		j, _ := strconv.ParseUint(string(r[1]), 10, 64)
		x := uint64(h) + j*0x9e3779b97f4a7c15
		z := (x ^ x>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		prod := new(big.Int).Mul(new(big.Int).SetUint64(z), big.NewInt(m))
		slot := prod.Rsh(prod, 64).Uint64()
		want := fmt.Sprintf("%016x %016x %d %d", x, z, z, slot)
		if got := fmt.Sprintf("%s %s %s %s", r[2], r[3], r[4], r[5]); got != want {
			t.Errorf("probe row j = %d: %s, want %s", j, got, want)
		}
	}
	_, data := load(t, "xxh3")
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		t.Fatal(err)
	}
	quoted := regexp.MustCompile("`(\\{\"key\": [^`]*\"candidates\": [^`]*\\})`")
	n := 0
	for _, q := range quoted.FindAllSubmatch(doc, -1) {
		var b bytes.Buffer
		if err := json.Compact(&b, q[1]); err != nil {
			t.Errorf("spec quotes %s: %v", q[1], err)
			continue
		}
		n++
		if !strings.Contains(compact.String(), b.String()) {
			t.Errorf("spec quotes %s, which is not in xxh3.json", q[1])
		}
	}
	if n < 2 {
		t.Errorf("spec quotes %d lookups with candidates, want at least 2", n)
	}
}
