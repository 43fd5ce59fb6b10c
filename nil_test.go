package maglev

import (
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
)

// nilTableArgs are the arguments TestNilTable calls methods of Table with,
// by parameter type. A method with a parameter of a type not listed fails
// the test: add values for it.
func nilTableArgs(t *testing.T) map[reflect.Type][]any {
	full := mustNew(t, names("b", 5), 7, nil)
	return map[reflect.Type][]any{
		reflect.TypeFor[string]():   {"", "b1", "x"},
		reflect.TypeFor[[]byte]():   {[]byte(nil), []byte("b1")},
		reflect.TypeFor[uint64]():   {uint64(0), uint64(12345)},
		reflect.TypeFor[int]():      {-1, 0, 1},
		reflect.TypeFor[[]uint32](): {[]uint32(nil), []uint32{7}, make([]uint32, 0, 8)},
		reflect.TypeFor[[]string](): {[]string(nil), []string{"x"}, []string{"b1", "b2"}}, // Without's names
		reflect.TypeFor[*Table]():   {(*Table)(nil), &Table{}, full, mustNew(t, nil, 7, nil), mustWithout(t, full, "b2")},
	}
}

// TestNilTable: a nil *Table answers every method of Table as the zero
// Table does, and a nil other table of Diff and Changes is the zero Table
// too: the same results, errors, panics and yielded values, for every
// combination of nilTableArgs. The methods are found by reflection, so a
// method added later is called as well. A *Table result is compared by
// value, nil as the zero Table.
func TestNilTable(t *testing.T) {
	args := nilTableArgs(t)
	receivers := slices.Concat([]*Table{nil}, tablesOf(args))
	typ := reflect.TypeFor[*Table]()
	if typ.NumMethod() < 20 {
		t.Fatalf("%v has %d methods: is reflection seeing them?", typ, typ.NumMethod())
	}
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		lists := argLists(t, m, args)
		for _, recv := range receivers {
			for _, in := range lists {
				if recv != nil && !slices.ContainsFunc(in, isNilTable) {
					continue // nothing nil to compare
				}
				got := callMethod(m, recv, in)
				want := callMethod(m, orZero(recv), orZeroArgs(in))
				if !reflect.DeepEqual(got, want) {
					t.Errorf("(%s).%s%s = %v, want the zero Table's %v", describe(recv), m.Name, describeArgs(in), got, want)
				}
			}
		}
	}
}

// TestNilTableSwap runs the package doc's swap pattern from the start: the
// first Swap returns nil, whose Diff with the new table is every slot.
func TestNilTableSwap(t *testing.T) {
	var current atomic.Pointer[Table]
	next := mustNew(t, names("b", 5), 7, nil)
	old := current.Swap(next)
	if d := old.Diff(next); d != 7 {
		t.Errorf("first swap: Diff = %d, want 7 (every slot)", d)
	}
	n := 0
	for range old.Changes(next) {
		n++
	}
	if n != 7 {
		t.Errorf("first swap: Changes yields %d slots, want 7", n)
	}
	if got := current.Load().Lookup("k"); got == "" {
		t.Error("the swapped-in table routes no key")
	}
}

// tablesOf returns the non-nil tables of args.
func tablesOf(args map[reflect.Type][]any) []*Table {
	var tables []*Table
	for _, a := range args[reflect.TypeFor[*Table]()] {
		if tab := a.(*Table); tab != nil {
			tables = append(tables, tab)
		}
	}
	return tables
}

// argLists returns every combination of args for m's parameters after the
// receiver; a variadic parameter gets its slice whole.
func argLists(t *testing.T, m reflect.Method, args map[reflect.Type][]any) [][]any {
	lists := [][]any{nil}
	for p := 1; p < m.Type.NumIn(); p++ {
		vals, ok := args[m.Type.In(p)]
		if !ok {
			t.Fatalf("Table.%s takes a %v: add values of that type to nilTableArgs", m.Name, m.Type.In(p))
		}
		var next [][]any
		for _, l := range lists {
			for _, v := range vals {
				next = append(next, append(slices.Clip(l), v))
			}
		}
		lists = next
	}
	return lists
}

// callMethod calls m on recv with in and returns what it gives: its
// results (see outcome), or the panic.
func callMethod(m reflect.Method, recv *Table, in []any) (out []any) {
	defer func() {
		if r := recover(); r != nil {
			out = []any{fmt.Sprintf("panic: %v", r)}
		}
	}()
	vals := []reflect.Value{reflect.ValueOf(recv)}
	for _, a := range in {
		vals = append(vals, reflect.ValueOf(a))
	}
	var res []reflect.Value
	if m.Type.IsVariadic() {
		res = m.Func.CallSlice(vals)
	} else {
		res = m.Func.Call(vals)
	}
	for _, r := range res {
		out = append(out, outcome(r))
	}
	return out
}

// outcome returns a comparable form of a method's result: the value, the
// text of an error, the table a *Table points to (the zero Table for
// nil), or the values an iterator yields.
func outcome(r reflect.Value) any {
	switch {
	case r.Type() == reflect.TypeFor[error]():
		if r.IsNil() {
			return nil
		}
		return "error: " + r.Interface().(error).Error()
	case r.Type() == reflect.TypeFor[*Table]():
		return *orZero(r.Interface().(*Table))
	case r.Kind() == reflect.Func: // iter.Seq or iter.Seq2
		var yielded [][]any
		yield := reflect.MakeFunc(r.Type().In(0), func(args []reflect.Value) []reflect.Value {
			var vs []any
			for _, a := range args {
				vs = append(vs, a.Interface())
			}
			yielded = append(yielded, vs)
			return []reflect.Value{reflect.ValueOf(true)}
		})
		r.Call([]reflect.Value{yield})
		return yielded
	}
	return r.Interface()
}

// orZero returns tab, or a zero Table for nil.
func orZero(tab *Table) *Table {
	if tab == nil {
		return &Table{}
	}
	return tab
}

// orZeroArgs returns in with every nil *Table replaced by a zero Table.
func orZeroArgs(in []any) []any {
	out := slices.Clone(in)
	for i, a := range out {
		if isNilTable(a) {
			out[i] = &Table{}
		}
	}
	return out
}

// isNilTable reports whether a is a nil *Table.
func isNilTable(a any) bool {
	tab, ok := a.(*Table)
	return ok && tab == nil
}

// describe names a receiver in a failure.
func describe(tab *Table) string {
	if tab == nil {
		return "nil"
	}
	return fmt.Sprintf("table of %d backends, M=%d", tab.NumBackends(), tab.Size())
}

// describeArgs writes in as a call's arguments.
func describeArgs(in []any) string {
	s := "("
	for i, a := range in {
		if i > 0 {
			s += ", "
		}
		if isNilTable(a) {
			s += "nil"
		} else if tab, ok := a.(*Table); ok {
			s += describe(tab)
		} else {
			s += fmt.Sprintf("%#v", a)
		}
	}
	return s + ")"
}
