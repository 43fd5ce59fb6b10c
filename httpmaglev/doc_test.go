package httpmaglev_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/httpmaglev"
)

// jsonBlocks returns the ```json blocks of a Markdown file.
func jsonBlocks(t *testing.T, path string) []string {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(text, -1) {
		blocks = append(blocks, string(m[1]))
	}
	return blocks
}

// missingFields returns the JSON names of typ's fields (and its nested
// structs' and slices' elements', and an embedded struct's) that v, the
// sample decoded generically, lacks.
func missingFields(typ reflect.Type, v any, path string) []string {
	switch typ.Kind() {
	case reflect.Slice:
		list, _ := v.([]any)
		if len(list) == 0 {
			return []string{path + "[]"}
		}
		var missing []string
		for _, e := range list {
			missing = append(missing, missingFields(typ.Elem(), e, path+"[]")...)
		}
		return missing
	case reflect.Struct:
		if typ.String() == "time.Time" {
			return nil
		}
		obj, _ := v.(map[string]any)
		var missing []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Anonymous {
				missing = append(missing, missingFields(f.Type, v, path)...)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			field, ok := obj[name]
			if !ok {
				missing = append(missing, path+"."+name)
				continue
			}
			missing = append(missing, missingFields(f.Type, field, path+"."+name)...)
		}
		return missing
	}
	return nil
}

// checkSample checks that sample decodes into a new value of typ with
// unknown fields disallowed, and that every field of typ appears in it.
func checkSample(t *testing.T, typ reflect.Type, sample string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(sample))
	dec.DisallowUnknownFields()
	if err := dec.Decode(reflect.New(typ).Interface()); err != nil {
		t.Errorf("sample does not decode into %v: %v\n%s", typ, err, sample)
		return
	}
	var generic any
	if err := json.Unmarshal([]byte(sample), &generic); err != nil {
		t.Fatal(err)
	}
	if missing := missingFields(typ, generic, ""); len(missing) > 0 {
		t.Errorf("sample lacks fields of %v: %v\n%s", typ, missing, sample)
	}
}

// TestStateDoc checks the State sample in docs/http.md against State, and
// that StateHandler serves a document of the same shape.
func TestStateDoc(t *testing.T) {
	blocks := jsonBlocks(t, "../docs/http.md")
	if len(blocks) != 1 {
		t.Fatalf("docs/http.md has %d JSON samples, want 1", len(blocks))
	}
	checkSample(t, reflect.TypeFor[httpmaglev.State](), blocks[0])

	servers := startServers(t, 2)
	tr := newTransport(t, httpmaglev.Config{BalanceFactor: 1.25}, servers)
	rec := httptest.NewRecorder()
	tr.StateHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if ct := rec.Header().Get("Content-Type"); rec.Code != http.StatusOK || ct != "application/json" {
		t.Errorf("StateHandler: %d, Content-Type %q", rec.Code, ct)
	}
	checkSample(t, reflect.TypeFor[httpmaglev.State](), rec.Body.String())
	rec = httptest.NewRecorder()
	tr.StateHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("StateHandler: POST got %d, want 405", rec.Code)
	}
}
