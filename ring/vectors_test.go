package ring

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestVectorsGolden checks that the test vectors for other languages
// (testdata/vectors, checked against the code by internal/vectors) hold
// this package's golden rings: goldenSmall (a..e, 3 points a backend) and
// goldenLarge (the 100 hosts, 100 points a backend).
func TestVectorsGolden(t *testing.T) {
	for _, b := range builtins {
		data, err := os.ReadFile("../testdata/vectors/" + b.name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Rings []struct {
				ID           string
				Points       []struct{ Backend int }
				PointsSHA256 string `json:"points_sha256"`
			}
		}
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		found := 0
		for _, r := range f.Rings {
			switch r.ID {
			case "a-e/vnodes=3":
				found++
				var owners []string
				for _, p := range r.Points {
					owners = append(owners, string(rune('a'+p.Backend)))
				}
				if got := strings.Join(owners, " "); got != goldenSmall[b.name] {
					t.Errorf("%s: vectors' %s = %q, golden %q", b.name, r.ID, got, goldenSmall[b.name])
				}
			case "hosts-100/vnodes=100":
				found++
				if r.PointsSHA256 != goldenLarge[b.name] {
					t.Errorf("%s: vectors' %s SHA-256 %s, golden %s", b.name, r.ID, r.PointsSHA256, goldenLarge[b.name])
				}
			}
		}
		if found != 2 {
			t.Errorf("%s: %d of the 2 golden rings in the vectors", b.name, found)
		}
	}
}
