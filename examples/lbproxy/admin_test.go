package main

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestDebugSample checks that every /debug/maglev sample in
// docs/lbproxy.md decodes into debugState with unknown fields disallowed,
// and that every field of debugState (its backends' included) appears in
// it, so that the page shows the whole document.
func TestDebugSample(t *testing.T) {
	text, err := os.ReadFile("../../docs/lbproxy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(text, -1)
	if len(blocks) != 2 {
		t.Fatalf("docs/lbproxy.md has %d JSON samples, want 2", len(blocks))
	}
	for _, b := range blocks {
		sample := string(b[1])
		dec := json.NewDecoder(strings.NewReader(sample))
		dec.DisallowUnknownFields()
		var st debugState
		if err := dec.Decode(&st); err != nil {
			t.Errorf("sample does not decode into debugState: %v\n%s", err, sample)
			continue
		}
		var generic any
		if err := json.Unmarshal([]byte(sample), &generic); err != nil {
			t.Fatal(err)
		}
		if missing := missingFields(reflect.TypeFor[debugState](), generic, ""); len(missing) > 0 {
			t.Errorf("sample lacks fields %v:\n%s", missing, sample)
		}
	}
}

// missingFields returns the JSON names of typ's fields (its embedded
// structs', and its nested structs' and slice elements') that v, a
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
