// Package doccheck checks the JSON samples in the repository's docs
// against the Go types they show: each must decode into the type with no
// unknown field, and show every field the type has. It is for tests only.
package doccheck

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

var jsonBlock = regexp.MustCompile("(?s)```json\n(.*?)```")

// JSONBlocks returns the ```json blocks of the Markdown file at path.
func JSONBlocks(t testing.TB, path string) []string {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range jsonBlock.FindAllSubmatch(text, -1) {
		blocks = append(blocks, string(m[1]))
	}
	return blocks
}

// CheckSample checks that sample decodes into a new value of typ with
// unknown fields disallowed, and that every field of typ appears in it.
func CheckSample(t testing.TB, typ reflect.Type, sample string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(sample))
	dec.DisallowUnknownFields()
	if err := dec.Decode(reflect.New(typ).Interface()); err != nil {
		t.Errorf("sample does not decode into %v: %v\n%s", typ, err, sample)
		return
	}
	var generic any
	if err := json.Unmarshal([]byte(sample), &generic); err != nil {
		t.Errorf("sample is not JSON: %v\n%s", err, sample)
		return
	}
	if missing := MissingFields(typ, generic, ""); len(missing) > 0 {
		t.Errorf("sample lacks fields of %v: %v\n%s", typ, missing, sample)
	}
}

// MissingFields returns the JSON names of typ's fields (and its nested
// structs' and slices' elements', and an embedded struct's) that v, a
// sample decoded generically, lacks. An empty slice counts as lacking its
// elements' fields, as "path[]". path prefixes every name.
func MissingFields(typ reflect.Type, v any, path string) []string {
	switch typ.Kind() {
	case reflect.Slice:
		list, _ := v.([]any)
		if len(list) == 0 {
			return []string{path + "[]"}
		}
		var missing []string
		for _, e := range list {
			missing = append(missing, MissingFields(typ.Elem(), e, path+"[]")...)
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
				missing = append(missing, MissingFields(f.Type, v, path)...)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			field, ok := obj[name]
			if !ok {
				missing = append(missing, path+"."+name)
				continue
			}
			missing = append(missing, MissingFields(f.Type, field, path+"."+name)...)
		}
		return missing
	}
	return nil
}
