package doccheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

type inner struct {
	A int `json:"a"`
}

type embedded struct {
	E string `json:"e"`
}

type outer struct {
	embedded
	X    int       `json:"x"`
	List []inner   `json:"list"`
	At   time.Time `json:"at"`
}

// TestMissingFields: a field absent anywhere (top level, embedded, in a
// slice's element) is named; a complete sample lacks nothing.
func TestMissingFields(t *testing.T) {
	for _, c := range []struct {
		sample string
		want   []string
	}{
		{`{"e": "", "x": 1, "list": [{"a": 1}], "at": "2026-12-01T00:00:00Z"}`, nil},
		{`{"x": 1, "list": [{"a": 1}], "at": "2026-12-01T00:00:00Z"}`, []string{".e"}},
		{`{"e": "", "list": [{}], "at": "2026-12-01T00:00:00Z"}`, []string{".x", ".list[].a"}},
		{`{"e": "", "x": 1, "list": [], "at": "2026-12-01T00:00:00Z"}`, []string{".list[]"}},
	} {
		var v any
		if err := json.Unmarshal([]byte(c.sample), &v); err != nil {
			t.Fatal(err)
		}
		if got := MissingFields(reflect.TypeFor[outer](), v, ""); !slices.Equal(got, c.want) {
			t.Errorf("MissingFields(%s) = %v, want %v", c.sample, got, c.want)
		}
	}
}

// TestJSONBlocks: the json blocks of a Markdown file, and only those.
func TestJSONBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	md := "# Doc\n\n```json\n{\"x\": 1}\n```\n\n```go\nx := 1\n```\n\n```json\n[]\n```\n"
	if err := os.WriteFile(path, []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := JSONBlocks(t, path), []string{"{\"x\": 1}\n", "[]\n"}; !slices.Equal(got, want) {
		t.Errorf("JSONBlocks = %q, want %q", got, want)
	}
}
