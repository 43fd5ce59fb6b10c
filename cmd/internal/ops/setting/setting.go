// Package setting declares a program's settings once each: a Setting is a
// setting's name (its flag's, and its key in a configuration file), its
// scope, its type and parser, its default, whether a reload may change it
// and one line of doc. Everything else derives from the declarations: the
// flags of a command (Values.Flags), the values of a configuration file
// (Values.Set with a YAML scalar's text, Values.SetFields with a mapping's
// fields), the rules of a reload (Setting.Reload) and the reference
// table of the docs (Table).
//
// A Values holds the settings given, parsed: a command line, or one
// service of a configuration file. Typed handles, Of and ListOf, read a
// setting's value back (its default when not given). An Error is an error
// of one setting's value, so that a configuration file's reader can name
// the line that gave it, whatever the error's text.
//
// cmd/l4lb declares its settings in its configuration package;
// cmd/internal/ops declares the membership sources' (each source its
// own), which both programs take.
//
// A Setting is immutable once declared, and safe for concurrent use; a
// Values is not: it is filled and read by one goroutine.
package setting

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// A Scope is what a setting configures.
type Scope string

// The scopes of the load balancer programs' settings.
const (
	LB      Scope = "load balancer" // the whole program: in a file, at the top only
	Service Scope = "service"       // one service: in a file, in the service, or at the top as every service's default
	Source  Scope = "source"        // a service's membership source: as Service
	Health  Scope = "health"        // a service's health check: as Service
	Decap   Scope = "decap"         // the decapsulator's (l4lb decap)
)

// A Setting is one setting, declared once (see New and NewList).
type Setting struct {
	// Name is the setting's flag ("health-rise" for -health-rise), and its
	// key in a configuration file unless Key says otherwise.
	Name string
	// Key is the setting's key in a configuration file when it is not
	// Name ("backends" for -backend).
	Key string
	// Scope is what it configures; Also a second scope whose command takes
	// it too (iface: the load balancer's, and the decapsulator's).
	Scope, Also Scope
	// FlagOnly settings are no key of a configuration file (-config
	// itself); KeyOnly settings are no flag (a service's name).
	FlagOnly, KeyOnly bool
	// Own marks a setting of a service that is each service's own: not a
	// default at the top of a file (vip, backends).
	Own bool
	// Needs names the setting without which a default of this one, given
	// at the top of a file, does not apply to a service: a service gets
	// it only if it gives Needs (or the top does) with a value other than
	// its default (the top's etcd URLs serve the services that give an
	// etcd-prefix; the top's health-interval those whose health is not
	// none).
	Needs string
	// Reload reports whether a reload of the configuration may change it.
	Reload bool
	// Default is the default as -h and the docs show it; "" for none.
	Default string
	// Doc is one line: the flag's usage (a word in backquotes names its
	// value, as for package flag) and the docs' table.
	Doc string
	// Fields are the keys of a mapping that gives one value in a
	// configuration file ({addr, mac, weight} for a backend), if one may.
	Fields []string

	kind      string                                  // the value's type, for -h when Doc names none
	isBool    bool                                    // a flag without a value
	isList    bool                                    // each value appended: the flag repeated, a YAML list
	add       func(old any, text string) (any, error) // parses text into the value (appended, for a list)
	addFields func(old any, f map[string]string) (any, error)
	def       any
}

// KeyName returns the setting's key in a configuration file ("" for a
// FlagOnly setting).
func (s *Setting) KeyName() string {
	switch {
	case s.FlagOnly:
		return ""
	case s.Key != "":
		return s.Key
	}
	return s.Name
}

// List reports whether the setting takes many values: the flag repeated,
// a list in a file.
func (s *Setting) List() bool { return s.isList }

// IsBool reports whether the setting's flag takes no value.
func (s *Setting) IsBool() bool { return s.isBool }

// Of is the handle of a setting of one value of type T.
type Of[T any] struct{ *Setting }

// ListOf is the handle of a setting of many values of type T.
type ListOf[T any] struct{ *Setting }

// New declares a setting of one value, def if it is not given, parsed from
// its text by parse. A Default of "" shows def (see show) unless def is
// T's zero value.
func New[T any](s Setting, def T, parse func(string) (T, error)) Of[T] {
	p := &s
	p.def = def
	p.kind = kindOf(any(def))
	_, p.isBool = any(def).(bool)
	if p.Default == "" && !isZero(def) {
		p.Default = show(def)
	}
	p.add = func(_ any, text string) (any, error) { return parse(text) }
	return Of[T]{p}
}

// WithFields lets a mapping of fields give the value in a configuration
// file: from(fields) makes it; s.Fields are the keys allowed.
func (o Of[T]) WithFields(from func(map[string]string) (T, error)) Of[T] {
	o.addFields = func(_ any, f map[string]string) (any, error) { return from(f) }
	return o
}

// Get returns the setting's value in vs, or its default.
func (o Of[T]) Get(vs *Values) T {
	if v, ok := vs.m[o.Setting]; ok {
		return v.(T)
	}
	return o.def.(T)
}

// NewList declares a setting of many values, none by default: each text
// given is parsed by parse into one or more values, appended.
func NewList[T any](s Setting, parse func(string) ([]T, error)) ListOf[T] {
	p := &s
	p.isList = true
	var zero T
	p.kind = kindOf(any(zero))
	p.add = func(old any, text string) (any, error) {
		vs, err := parse(text)
		if err != nil {
			return old, err
		}
		l, _ := old.([]T)
		return append(l, vs...), nil
	}
	return ListOf[T]{p}
}

// WithFields lets a mapping of fields give one value of the list in a
// configuration file: from(fields) makes it; s.Fields are the keys
// allowed.
func (o ListOf[T]) WithFields(from func(map[string]string) (T, error)) ListOf[T] {
	o.addFields = func(old any, f map[string]string) (any, error) {
		v, err := from(f)
		if err != nil {
			return old, err
		}
		l, _ := old.([]T)
		return append(l, v), nil
	}
	return o
}

// Checked makes check refuse a value, before it is appended to those
// given before it (have), with check's error: a value given twice, say.
func (o ListOf[T]) Checked(check func(have []T, v T) error) ListOf[T] {
	wrap := func(add func(old any) (any, error), old any) (any, error) {
		nv, err := add(old)
		if err != nil {
			return old, err
		}
		have, _ := old.([]T)
		l := nv.([]T)
		for i := len(have); i < len(l); i++ {
			if err := check(l[:i], l[i]); err != nil {
				return old, err
			}
		}
		return nv, nil
	}
	add, addFields := o.add, o.addFields
	o.add = func(old any, text string) (any, error) {
		return wrap(func(old any) (any, error) { return add(old, text) }, old)
	}
	if addFields != nil {
		o.addFields = func(old any, f map[string]string) (any, error) {
			return wrap(func(old any) (any, error) { return addFields(old, f) }, old)
		}
	}
	return o
}

// Get returns the setting's values in vs, in the order given; nil if none.
func (o ListOf[T]) Get(vs *Values) []T {
	l, _ := vs.m[o.Setting].([]T)
	return l
}

// One makes a parser of one value a parser of a list's values.
func One[T any](parse func(string) (T, error)) func(string) ([]T, error) {
	return func(s string) ([]T, error) {
		v, err := parse(s)
		if err != nil {
			return nil, err
		}
		return []T{v}, nil
	}
}

// Values are the settings given, parsed. The zero Values is empty and
// ready to use.
type Values struct {
	m map[*Setting]any
}

// Set parses text as the value of s (appended to the others, for a list)
// and records it. Its error is the parser's, which names nothing: the
// caller says which setting and where.
func (vs *Values) Set(s *Setting, text string) error {
	v, err := s.add(vs.m[s], text)
	if err != nil {
		return err
	}
	vs.put(s, v)
	return nil
}

// SetFields records the value a mapping of fields gives s in a
// configuration file: an error if s takes no mapping, or a field is not
// one of s.Fields.
func (vs *Values) SetFields(s *Setting, fields map[string]string) error {
	if s.addFields == nil {
		return errors.New("a value, not a mapping")
	}
	for k := range fields {
		if !contains(s.Fields, k) {
			return fmt.Errorf("unknown key %q (%s)", k, strings.Join(s.Fields, ", "))
		}
	}
	v, err := s.addFields(vs.m[s], fields)
	if err != nil {
		return err
	}
	vs.put(s, v)
	return nil
}

func (vs *Values) put(s *Setting, v any) {
	if vs.m == nil {
		vs.m = map[*Setting]any{}
	}
	vs.m[s] = v
}

// Given reports whether s was given.
func (vs *Values) Given(s *Setting) bool {
	_, ok := vs.m[s]
	return ok
}

// Format returns s's value in vs, or its default, as text: two values of
// a setting are the same when their texts are.
func (vs *Values) Format(s *Setting) string {
	v, ok := vs.m[s]
	if !ok {
		v = s.def
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// An Error is an error in the value of one setting. Its text is Err's,
// which names the setting the way its command line does ("-health-rise 0:
// at least 1"); Setting lets a configuration file's reader name the line
// that gave it.
type Error struct {
	Setting *Setting
	Err     error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an Error of s: fmt.Errorf(format, args...).
func Errorf(s *Setting, format string, args ...any) error {
	return &Error{Setting: s, Err: fmt.Errorf(format, args...)}
}

// SettingOf returns the setting err is an Error of, or nil.
func SettingOf(err error) *Setting {
	var e *Error
	if errors.As(err, &e) {
		return e.Setting
	}
	return nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// show returns a default as -h and the docs show it: fmt's %v, but a
// duration without its zero units ("2m", not "2m0s"; "8760h").
func show(v any) string {
	d, ok := v.(time.Duration)
	if !ok {
		return fmt.Sprint(v)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case int:
		return x == 0
	case uint64:
		return x == 0
	}
	return fmt.Sprint(v) == "0" || fmt.Sprint(v) == "0s"
}
